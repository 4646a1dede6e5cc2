// `dsl schedule NET [SCHED] --procs P --platform X -o FILE`: the auto-scheduler's schedule, as `.sched` text
// that a person can read and edit. Fields a given schedule fixes are kept; the rest are filled.
#include "commands.hpp"
#include "planning.hpp"

#include <dsl/backend/kinds.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

namespace dsl::cli {

namespace {

struct ScheduleOptions {
    std::string net, sched, platform, output, method = "frontier", dump_after;
    std::optional<std::int64_t> procs, batch;
};

constexpr const char* written_by = "# Written by 'dsl schedule'";

// An output file may replace an earlier one that dsl schedule wrote, never another file.
bool safe_to_replace(const std::string& path) {
    std::ifstream in(path);
    if (!in) return true;
    std::string first;
    return !std::getline(in, first) || first.empty() || first.rfind(written_by, 0) == 0;
}

int run_schedule(const ScheduleOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    const scheduler::Pipeline pipeline(stage_dump(o.dump_after));
    auto inputs =
        load_model_inputs(pipeline, o.net, o.sched, o.platform, sources, diags, {o.batch, std::nullopt, o.procs});
    if (!inputs) return user_error;
    PlatformChoice& platform = inputs->platform;
    const auto& net = inputs->checked.net.net;
    const auto& s = inputs->checked.schedule;
    std::string why;
    const auto run = run_procs(o.procs, s, why);
    if (!run) {
        std::cerr << "error: "
                  << (why.empty() ? "how many processes? give --procs P (or 'procs' in the schedule)" : why) << "\n";
        return usage;
    }
    const std::int64_t procs = *run;
    const std::int64_t batch = o.batch ? *o.batch : s && s->batch ? *s->batch : procs;
    if (const std::string bad = o.output.empty() || o.output == "-" ? "" : unwritable(o.output); !bad.empty())
        throw UserError("-o: " + bad);
    if (!o.output.empty() && !safe_to_replace(o.output))
        throw UserError(fmt::format(
            "-o '{}' exists and was not written by dsl schedule; it is left as it is (choose another name)", o.output));

    if (!measure_local(platform, o.net, net, {procs}, batch, why, multiplies_in_bfloat16(net, s))) {
        throw UserError(why);
    }
    const auto t0 = std::chrono::steady_clock::now();
    scheduler::Model model(net, platform.platform, procs, batch, backend::kind_costs());
    const auto result =
        fill_schedule(net, s, model, procs, batch, why,
                      o.method == "paper" ? scheduler::SearchMethod::paper : scheduler::SearchMethod::frontier);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!result) {
        throw UserError(why);
    }
    const scheduler::Prediction p = model.predict(result->schedule);
    const std::string header = fmt::format(
        "{} for {} on {} processes of '{}', mini-batch {}{}.\n"
        "Predicted: {} ms per step, {} per process (of {}).",
        std::string(written_by).substr(2), o.net, procs, platform.text, batch,
        o.sched.empty() ? "" : fmt::format("; fields fixed in {} kept", o.sched), milliseconds(p.step),
        human_bytes(p.memory), human_bytes(p.memory_limit));
    const std::string text = scheduler::schedule_text(net, result->schedule, header, platform.text);
    pipeline.filled(net, result->schedule, header, platform.text);
    pipeline.show_plan(net, result->schedule, batch, static_cast<int>(procs));

    if (o.output.empty() || o.output == "-") {
        std::cout << text;
    } else {
        if (!replace_file(o.output, text, why)) {
            throw UserError(why);
        }
        std::cout << fmt::format("wrote {}: {} ms per step predicted, {} per process (of {})\n", o.output,
                                 milliseconds(p.step), human_bytes(p.memory), human_bytes(p.memory_limit));
    }
    std::cerr << fmt::format(
        "searched {} candidate distributions in {:.0f} ms ({})\n", result->candidates, seconds * 1e3,
        result->optimal() ? "exact: dynamic programming over the frontier" : "the paper's longest-path heuristic");
    return ok;
}

}  // namespace

void setup_schedule(CLI::App& app, Action& action) {
    auto o = std::make_shared<ScheduleOptions>();
    CLI::App* sub = app.add_subcommand("schedule", "Write the auto-scheduler's schedule for a network");
    sub->add_option("NET", o->net, "The network (.net)")->required();
    sub->add_option("SCHED", o->sched, "A partial schedule whose fixed fields are kept");
    sub->add_option("--procs", o->procs, "Processes (default: the schedule's procs)")->check(positive_count());
    sub->add_option("--platform", o->platform,
                    "Platform name (stdlib/platforms) or file (default: the schedule's, else 'local': this machine, "
                    "measured on first use)");
    sub->add_option("-o,--output", o->output, "The .sched file to write (default: print it)")->check(file_name());
    add_dump_after(*sub, o->dump_after);
    sub->add_option("--batch", o->batch, "Mini-batch size N (default: the schedule's batch, else procs)")
        ->check(positive_count());
    sub->add_option("--method", o->method,
                    "frontier (exact, the default) or paper (the reference paper's longest-path heuristic)")
        ->check(CLI::IsMember({"frontier", "paper"}));
    sub->footer(
        "Example:\n  dsl schedule stdlib/mesh1k.net --procs 64 --platform lassen --batch 16 -o mesh1k_64.sched\n"
        "  dsl schedule samples/mesh_tiny.net samples/mesh_tiny_partial_4.sched -o filled.sched");
    sub->callback([o, &action] { action = [o] { return run_schedule(*o); }; });
}

}  // namespace dsl::cli
