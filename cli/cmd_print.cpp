// `dsl print FILE`: the canonical form of a .net, .sched or .platform file (or its syntax tree as JSON).
#include "commands.hpp"
#include "report.hpp"

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/print.hpp>
#include <dsl/scheduler/platform.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

namespace dsl::cli {

namespace {

struct PrintOptions {
    std::string file;
    bool json = false;
    bool locations = false;
};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int run_print(const PrintOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    const bool is_sched = ends_with(o.file, ".sched");
    const bool is_platform = ends_with(o.file, ".platform");
    if (!is_sched && !is_platform && !ends_with(o.file, ".net")) {
        std::cerr << fmt::format("error: cannot tell the language of '{}': name a .net, .sched or .platform file\n",
                                 o.file);
        return usage;
    }
    const SourceFile* file = sources.load(o.file);
    if (file == nullptr) {
        diags.error({}, fmt::format("cannot read '{}': {}", o.file, sources.last_error()));
        diags.render(std::cerr, stderr_color());
        return user_error;
    }
    std::string out;
    if (is_platform) {
        // A platform file has no other command to check it, so printing checks its settings too.
        if (auto tree = frontend::parse_platform(*file, diags); tree && scheduler::platform_from_file(*tree, diags))
            out = o.json ? json_text(frontend::platform_to_json(*tree, o.locations))
                         : frontend::print_platform_file(*tree);
    } else if (is_sched) {
        if (auto tree = frontend::parse_sched(*file, diags))
            out = o.json ? json_text(frontend::sched_to_json(*tree, o.locations)) : frontend::print_sched(*tree);
    } else {
        if (auto tree = frontend::parse_net(*file, diags))
            out = o.json ? json_text(frontend::net_to_json(*tree, o.locations)) : frontend::print_net(*tree);
    }
    diags.render(std::cerr, stderr_color());
    if (diags.has_errors()) return user_error;
    std::cout << out;
    return ok;
}

}  // namespace

void setup_print(CLI::App& app, Action& action) {
    auto o = std::make_shared<PrintOptions>();
    CLI::App* sub = app.add_subcommand("print", "Print a .net, .sched or .platform file in canonical form");
    sub->add_option("FILE", o->file, "The file (.net, .sched or .platform)")->required();
    sub->add_flag("--json", o->json, "Print the syntax tree as JSON");
    sub->add_flag("--locations", o->locations, "With --json: add each node's line and column");
    sub->footer(
        "Printing is syntactic: blocks stay blocks and comments are dropped. The output parses back to\n"
        "the same tree. A .platform file is also checked (known settings, units, ranges, required ones):\n"
        "print fails on its errors.\nExample:\n  dsl print stdlib/resnet50.net\n"
        "  dsl print stdlib/platforms/lassen.platform");
    sub->callback([o, &action] { action = [o] { return run_print(*o); }; });
}

}  // namespace dsl::cli
