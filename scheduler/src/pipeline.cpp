// The one driver of the stages (pipeline.hpp): the front end's passes, the schedule bound and checked against
// the mini-batch and the process count, the schedule filled, a process's plan; each printed where
// `--dump-after` names it.
#include <dsl/scheduler/pipeline.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/schedule_text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <set>

namespace dsl::scheduler {

const std::vector<std::string>& stage_names() {
    static const std::vector<std::string> names{"parse",    "imports", "elaborate", "shapes",
                                                "schedule", "filled",  "plan"};
    return names;
}

std::optional<Stage> stage_named(const std::string& name) {
    const auto& names = stage_names();
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return std::nullopt;
    return static_cast<Stage>(it - names.begin());
}

std::optional<frontend::SchedFile> load_sched(const std::string& path, SourceManager& sources, Diagnostics& diags) {
    const SourceFile* file = sources.load(path);
    if (file == nullptr) {
        diags.error({}, fmt::format("cannot read '{}': {}", path, sources.last_error()));
        return std::nullopt;
    }
    return frontend::parse_sched(*file, diags);
}

namespace {

void print_after(Stage stage, const std::string& text) {
    std::cerr << "// after " << stage_names()[static_cast<std::size_t>(stage)] << "\n" << text;
}

// Whether the run's process count (the schedule's, else --procs) can run every layer: each split the
// schedule fixes uses that many, and for each split it leaves open some split of that many fits the layer.
// Each problem is reported at the line that caused it: the entry, or the `procs` setting.
bool check_procs(const Checked& c, std::optional<std::int64_t> flag, std::optional<std::int64_t> batch,
                 Diagnostics& diags) {
    const auto& net = c.net.net;
    const auto& s = *c.schedule;
    const std::optional<std::int64_t> procs = s.procs ? s.procs : flag;
    if (!procs) return true;
    Location procs_loc;
    for (const auto& g : c.sched_file->globals)
        if (g.key == "procs") procs_loc = g.value.loc;
    if (s.procs && flag && *flag != *s.procs) {
        diags.error(procs_loc, fmt::format("--procs {} differs from the schedule's procs = {}", *flag, *s.procs));
        return false;
    }
    const std::string from_flag = s.procs ? "" : fmt::format(" (--procs {})", *procs);
    std::set<int> reported;  // entries
    bool ok = true;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const auto& l = net.layers[i];
        const auto& d = s.layers[i];
        if (l.is_data()) continue;
        if (d.split && d.split->procs() != *procs) {
            const int entry = s.source_entry[i];
            if (entry >= 0 && reported.insert(entry).second)
                diags.error(c.sched_file->entries[static_cast<std::size_t>(entry)].loc,
                            fmt::format("split {} uses {} processes, but the run has {}{}", d.split->str(),
                                        d.split->procs(), *procs, from_flag));
            ok = false;
            continue;
        }
        // Without a mini-batch yet, the most samples a split of `procs` can use: only what none can run fails.
        if (!d.split && ok && candidates(net, static_cast<int>(i), d, *procs, batch.value_or(*procs)).empty()) {
            auto& e = diags.error(procs_loc,
                                  fmt::format("no split of {} processes fits layer '{}'{}{}", *procs, l.name,
                                              batch ? fmt::format(" with a mini-batch of {}", *batch) : "", from_flag));
            Diagnostics::note(e, l.loc, fmt::format("layer '{}' declared here", l.name));
            return false;  // the first such layer: the others would say the same
        }
    }
    return ok;
}

}  // namespace

std::optional<frontend::LoadedNetwork> Pipeline::network(const std::string& path, SourceManager& sources,
                                                         Diagnostics& diags) const {
    // The front end's passes print their own states.
    const bool front = dump_.after && *dump_.after <= Stage::shapes;
    return frontend::load_network(path, sources, diags,
                                  front ? stage_names()[static_cast<std::size_t>(*dump_.after)] : "");
}

std::optional<Checked> Pipeline::check(const std::string& net_path, const std::string& sched_path,
                                       SourceManager& sources, Diagnostics& diags, const BatchChoice& batch,
                                       bool trains) const {
    auto net = network(net_path, sources, diags);
    if (net && !frontend::check_loss(*net, trains ? Severity::error : Severity::warning, diags) && trains) net.reset();
    // The schedule's syntax is checked even when the network has errors: they are independent.
    std::optional<frontend::SchedFile> sched;
    if (!sched_path.empty()) sched = load_sched(sched_path, sources, diags);
    if (!net || (!sched_path.empty() && !sched)) return std::nullopt;
    Checked c{std::move(*net), std::move(sched), std::nullopt};
    if (c.sched_file) {
        c.schedule = schedule(c.net.net, *c.sched_file, diags);
        if (!c.schedule) return std::nullopt;
    }
    // The mini-batch the command runs: apply_schedule has checked the schedule's own, but --batch (or the
    // command's default) may differ.
    const bool own = c.schedule && c.schedule->batch;
    const std::optional<std::int64_t> runs = batch.flag ? batch.flag : own ? c.schedule->batch : batch.fallback;
    if (runs && (batch.flag || !own)) {
        const BatchOrigin origin{
            {},
            batch.flag
                ? fmt::format("the mini-batch is set by --batch {}", *runs)
                : fmt::format("the mini-batch is {} where neither --batch nor the schedule's 'batch' sets it", *runs)};
        if (!check_batch_size(c.net.net, *runs, origin, diags)) return std::nullopt;
        if (c.schedule && !check_splits(c.net.net, *c.sched_file, *c.schedule, runs, origin, diags))
            return std::nullopt;
    }
    if (c.schedule && !check_procs(c, batch.procs, runs, diags)) return std::nullopt;
    return c;
}

std::optional<Schedule> Pipeline::schedule(const frontend::Network& net, const frontend::SchedFile& file,
                                           Diagnostics& diags) const {
    auto s = apply_schedule(net, file, diags);
    if (s && dumps(Stage::schedule))
        print_after(Stage::schedule,
                    schedule_text(net, *s,
                                  fmt::format("{}: every layer's distribution as the schedule sets it",
                                              file.source ? file.source->path : std::string("<schedule>")),
                                  s->platform ? fmt::format("\"{}\"", *s->platform) : ""));
    return s;
}

void Pipeline::filled(const frontend::Network& net, const Schedule& schedule, const std::string& how,
                      const std::string& platform) const {
    if (dumps(Stage::filled)) print_after(Stage::filled, schedule_text(net, schedule, how, platform));
}

Plan Pipeline::plan(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, int rank,
                    int procs) const {
    Plan p = make_plan(net, schedule, batch, rank, procs);
    if (dumps(Stage::plan) && rank == dump_.rank) print_after(Stage::plan, plan_text(net, p));
    return p;
}

}  // namespace dsl::scheduler
