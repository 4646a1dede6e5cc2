// `dsl check NET [SCHED]`: shapes, parameters, FLOPs and memory of every layer; with a schedule, each
// layer's distribution and per-process tile.
#include "commands.hpp"
#include "planning.hpp"
#include "report.hpp"

#include <dsl/backend/kinds.hpp>
#include <dsl/base/error.hpp>
#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/pipeline.hpp>
#include <dsl/scheduler/platform.hpp>
#include <dsl/scheduler/tile_limits.hpp>

#include <fmt/format.h>
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
    std::optional<std::int64_t> rank;
    std::string platform;
};

// `--dump-after filled` and `plan`: the fields the schedule leaves open filled by the auto-scheduler for
// `--platform` (as `dsl explain` fills them), then the stage printed. False when the platform has errors
// (rendered); a UserError when filling fails.
bool fill(Checked& c, const CheckOptions& o, std::int64_t batch, const scheduler::Pipeline& pipeline,
          SourceManager& sources, Diagnostics& diags) {
    const auto& net = c.net.net;
    if (!c.schedule || !has_open_fields(net, c.schedule)) {
        if (c.schedule) pipeline.filled(net, *c.schedule, "the schedule, with nothing open");
        return true;
    }
    std::string why;
    c.schedule->procs = run_procs(std::nullopt, c.schedule, why);
    if (!c.schedule->procs)
        throw UserError(why.empty() ? "the schedule leaves 'procs' open: set it to fill the rest" : why);
    auto platform = resolve_platform(o.platform, c.schedule, sources, diags);
    diags.render(std::cerr, stderr_color());
    if (!platform) return false;
    const auto planned = measure_and_plan(*platform, o.net, net, *c.schedule, batch, why);
    if (!planned) throw UserError(why);
    c.schedule = planned->schedule;
    pipeline.filled(net, *c.schedule, "open fields filled by the auto-scheduler", platform->text);
    return true;
}

// What a process has on the schedule's platform (this machine where it names none), which each layer's tile
// must fit; 0 (not judged) where the schedule leaves its processes open or the platform does not load (its
// errors are said where it is read).
double process_memory(const Checked& c, std::int64_t batch, SourceManager& sources) {
    std::string why;
    const auto procs = run_procs(std::nullopt, c.schedule, why);
    if (!procs) return 0.0;
    Diagnostics quiet;
    const auto platform = resolve_platform("", c.schedule, sources, quiet);
    if (!platform) return 0.0;
    return scheduler::Model(c.net.net, platform->platform, *procs, batch, backend::kind_costs()).memory_limit();
}

// `--dump-after plan`: the plan of process `rank` of the run the (filled) schedule describes, or of the
// one-process run without a schedule.
int dump_plan(const Checked& c, const CheckOptions& o, std::int64_t batch, const scheduler::Pipeline& pipeline) {
    const auto& net = c.net.net;
    const scheduler::Schedule s = c.schedule.value_or(scheduler::Schedule{});
    std::int64_t procs = 1;
    if (c.schedule) {
        procs = s.procs.value_or(0);
        for (std::size_t i = 0; i < net.layers.size() && procs == 0; ++i)
            if (!net.layers[i].is_data()) procs = s.layers[i].split->procs();
    }
    const std::int64_t rank = o.rank.value_or(0);
    if (rank >= procs) {
        std::cerr << fmt::format("error: --rank {} is out of range: the run has {} process{} (ranks 0 to {})\n", rank,
                                 procs, procs == 1 ? "" : "es", procs - 1);
        return usage;
    }
    pipeline.show_plan(net, s, batch, static_cast<int>(procs));  // of process --rank
    return ok;
}

int run_check(const CheckOptions& o) {
    if (!o.platform.empty() && o.dump_after != "filled" && o.dump_after != "plan") {
        std::cerr << "error: --platform is the platform the auto-scheduler fills open fields for, with "
                     "--dump-after filled or plan, and has no effect without one of them\n";
        return usage;
    }
    if (o.rank && o.dump_after != "plan") {
        std::cerr << "error: --rank picks the process whose plan --dump-after plan prints, and has no effect "
                     "without it\n";
        return usage;
    }
    SourceManager sources;
    Diagnostics diags;
    const scheduler::Pipeline pipeline(stage_dump(o.dump_after, static_cast<int>(o.rank.value_or(0))));
    auto checked = pipeline.check(o.net, o.sched, sources, diags, {o.batch, std::nullopt, std::nullopt});
    // The schedule's platform is read and checked as `dsl explain` reads it (this machine's `local` is measured
    // only where it is used): a schedule that explain refuses is not one that check passes.
    if (checked && checked->schedule && checked->schedule->platform &&
        *checked->schedule->platform != scheduler::platform_path("local") &&
        !scheduler::load_platform(*checked->schedule->platform, sources, diags)) {
        diags.error(checked->schedule->platform_loc, "the schedule's platform has errors");
        checked.reset();
    }
    diags.render(std::cerr, stderr_color());
    if (!checked) return user_error;
    const std::int64_t batch = report_batch(*checked, o.batch);
    // The tiles of the schedule as a run would make them: one that the kernels cannot address, or that a
    // process cannot hold, is an error at its layer, as `dsl run` says it (explain and compare, which predict,
    // only note what does not fit).
    Diagnostics tiles;
    if (checked->schedule && !scheduler::check_tile_limits(checked->net.net, *checked->schedule, batch, tiles,
                                                           process_memory(*checked, batch, sources))) {
        tiles.render(std::cerr, stderr_color());
        return user_error;
    }
    // The report is of the schedule as written; the stages after it are printed from a copy.
    if (o.dump_after == "filled" || o.dump_after == "plan") {
        Checked filled = *checked;
        if (!fill(filled, o, batch, pipeline, sources, diags)) return user_error;
        if (o.dump_after == "plan")
            if (const int code = dump_plan(filled, o, batch, pipeline); code != ok) return code;
    }
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
    add_dump_after(*sub, o->dump_after);
    sub->add_option("--rank", o->rank, "With --dump-after plan: the process whose plan is printed (default 0)")
        ->check(nonnegative_count());
    sub->add_option("--platform", o->platform,
                    "With --dump-after filled or plan: the platform the auto-scheduler fills open fields for "
                    "(default: the schedule's, else 'local')");
    sub->footer("Example:\n  dsl check samples/mesh_tiny.net samples/mesh_tiny_hybrid_4.sched");
    sub->callback([o, &action] { action = [o] { return run_check(*o); }; });
}

}  // namespace dsl::cli
