// `dsl check NET [SCHED]`: shapes, parameters, FLOPs and memory of every layer; with a schedule, each
// layer's distribution and per-process tile.
#include "commands.hpp"
#include "report.hpp"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

namespace dsl::cli {

namespace {

struct CheckOptions {
    std::string net;
    std::string sched;
    bool json = false;
    std::optional<std::int64_t> batch;
    std::string dump_after;
};

int run_check(const CheckOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    auto checked = load_and_check(o.net, o.sched, sources, diags, o.dump_after, {o.batch, std::nullopt, std::nullopt});
    diags.render(std::cerr, stderr_color());
    if (!checked) return user_error;
    const std::int64_t batch = report_batch(*checked, o.batch);
    if (o.json)
        std::cout << json_text(check_json(*checked, batch));
    else
        std::cout << check_table(*checked, batch);
    return ok;
}

}  // namespace

void setup_check(CLI::App& app, Action& action) {
    auto o = std::make_shared<CheckOptions>();
    CLI::App* sub = app.add_subcommand("check", "Check a network, and a schedule for it, and report shapes and costs");
    sub->add_option("NET", o->net, "The network (.net)")->required();
    sub->add_option("SCHED", o->sched, "A schedule (.sched) to check against the network");
    sub->add_flag("--json", o->json, "Print the report as JSON");
    sub->add_option("--batch", o->batch,
                    "Mini-batch size for the tile shapes, checked against the splits as 'dsl run --batch' is "
                    "(default: the schedule's, or one sample per process)")
        ->check(positive_count());
    sub->add_option("--dump-after", o->dump_after, "Print the state after a pass to stderr")
        ->check(CLI::IsMember({"parse", "imports", "elaborate", "shapes"}));
    sub->footer("Example:\n  dsl check samples/mesh_tiny.net samples/mesh_tiny_hybrid_4.sched");
    sub->callback([o, &action] { action = [o] { return run_check(*o); }; });
}

}  // namespace dsl::cli
