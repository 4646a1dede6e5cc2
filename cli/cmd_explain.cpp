// `dsl explain NET SCHED`: the performance model's prediction for a schedule, layer by layer; with --trace,
// as a timeline in the format of `dsl run --trace`.
#include "commands.hpp"
#include "planning.hpp"
#include "trace.hpp"

#include <dsl/backend/kinds.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

namespace dsl::cli {

namespace {

struct ExplainOptions {
    std::string net, sched, platform, trace, dump_after;
    std::optional<std::int64_t> batch, procs;
    bool json = false;
};

int run_explain(const ExplainOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    const scheduler::Pipeline pipeline(stage_dump(o.dump_after));
    auto inputs =
        load_model_inputs(pipeline, o.net, o.sched, o.platform, sources, diags, {o.batch, std::nullopt, o.procs});
    if (!inputs) return user_error;
    const Checked& checked = inputs->checked;
    PlatformChoice& platform = inputs->platform;
    const auto& net = checked.net.net;
    scheduler::Schedule s = *checked.schedule;
    std::string why;
    s.procs = run_procs(o.procs, s, why);
    if (!s.procs) {
        std::cerr << "error: " << (why.empty() ? "the schedule leaves 'procs' open: give --procs P" : why) << "\n";
        return usage;
    }
    const std::int64_t batch = report_batch(checked, o.batch);
    if (!o.trace.empty())
        if (std::string bad = trace_output_problem(o.trace); !bad.empty()) {
            std::cerr << "error: --trace: " << bad << "\n";
            return user_error;
        }
    const auto planned = measure_and_plan(platform, o.net, net, s, batch, why);
    if (!planned) throw UserError(why);
    if (planned->filled)
        std::cerr << "note: the schedule leaves fields open; the auto-scheduler filled them ('dsl schedule' writes "
                     "the result)\n";
    pipeline.filled(net, planned->schedule,
                    planned->filled ? "open fields filled by the auto-scheduler" : "the schedule, with nothing open",
                    platform.text);
    pipeline.show_plan(net, planned->schedule, batch, static_cast<int>(*planned->schedule.procs));
    const scheduler::Prediction& p = planned->prediction;
    if (!o.trace.empty()) {
        const nlohmann::json about{{"network", o.net},
                                   {"schedule", o.sched},
                                   {"processes", *s.procs},
                                   {"platform", platform.platform.path},
                                   {"platform_figures", platform_source(platform)}};
        const scheduler::Model model(net, platform.platform, *s.procs, batch, backend::kind_costs());
        const std::string text =
            trace_text(net, {{predicted_step(net, p, model.drift())}},
                       {fmt::format("predicted: the busiest of {} processes", *s.procs)}, "dsl explain", about);
        if (!replace_file(o.trace, text, why)) {
            std::cerr << "error: --trace: " << why << "\n";
            return user_error;
        }
    }
    if (o.json) {
        nlohmann::json j = explain_json(net, p, batch);
        j["network"] = o.net;
        j["schedule"] = o.sched;
        j["platform"] = platform.platform.path;
        j["platform_figures"] = platform_source(platform);
        j["procs"] = *s.procs;
        std::cout << json_text(j);
    } else {
        std::cout << fmt::format("{} under {} on {} processes of '{}'\nfigures: {}\n\n", o.net, o.sched, *s.procs,
                                 platform.text, platform_source(platform));
        std::cout << explain_table(net, p, batch);
    }
    return ok;
}

}  // namespace

void setup_explain(CLI::App& app, Action& action) {
    auto o = std::make_shared<ExplainOptions>();
    CLI::App* sub = app.add_subcommand("explain", "Show the performance model's prediction for a schedule");
    sub->add_option("NET", o->net, "The network (.net)")->required();
    sub->add_option("SCHED", o->sched, "The schedule (.sched); open fields are filled by the auto-scheduler")
        ->required();
    sub->add_option("--platform", o->platform,
                    "Platform name (stdlib/platforms) or file (default: the schedule's, else 'local': this machine, "
                    "measured on first use)");
    sub->add_option("--batch", o->batch, "Mini-batch size N (default: the schedule's, or one sample per process)")
        ->check(positive_count());
    sub->add_option("--procs", o->procs, "Processes, where the schedule leaves them open")->check(positive_count());
    sub->add_flag("--json", o->json, "Print the prediction as JSON");
    add_dump_after(*sub, o->dump_after);
    sub->add_option("--trace", o->trace,
                    "Also write the predicted step as a timeline, in the format of 'dsl run --trace' (Chrome "
                    "trace-event JSON, for Perfetto or chrome://tracing)")
        ->check(file_name());
    sub->footer(
        "Example:\n  dsl explain samples/mesh_tiny.net samples/mesh_tiny_hybrid_4.sched\n"
        "  dsl explain stdlib/mesh1k.net my.sched --platform lassen --json\n"
        "  dsl explain samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --trace predicted.json");
    sub->callback([o, &action] { action = [o] { return run_explain(*o); }; });
}

}  // namespace dsl::cli
