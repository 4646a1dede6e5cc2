// The stages a network and its schedule go through, in order, and the one driver that runs them: every verb,
// calibration and the benches load a network, bind a schedule, fill what it leaves open and make a process's
// plan through a Pipeline, which prints the state after the stage that `--dump-after` names.
//
//   parse, imports, elaborate, shapes   the network (frontend::load_network's passes)
//   schedule                            the schedule bound to it and checked (apply_schedule), as written
//   filled                              the schedule a command runs: what it left open filled by the
//                                       auto-scheduler, or as it is where nothing was open
//   plan                                one process's execution plan (make_plan)
#pragma once

#include <dsl/base/diagnostics.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/frontend/sched_ast.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsl::scheduler {

enum class Stage { parse, imports, elaborate, shapes, schedule, filled, plan };

// The stages as `--dump-after` names them, in order.
const std::vector<std::string>& stage_names();
std::optional<Stage> stage_named(const std::string& name);

// A network and, where the command was given one, its schedule: as written and as bound.
struct Checked {
    frontend::LoadedNetwork net;
    std::optional<frontend::SchedFile> sched_file;
    std::optional<Schedule> schedule;
};

// The mini-batch a command runs, which the schedule must fit: `flag` (--batch), else the schedule's `batch`,
// else `fallback` (none: the command takes one sample per process, which every split fits); and `procs`
// (--procs), where the schedule leaves the process count open.
struct BatchChoice {
    std::optional<std::int64_t> flag, fallback, procs;
};

// What `--dump-after` asks: the stage after which the state is printed to stderr (none: nothing), and for
// `plan`, the process whose plan.
struct StageDump {
    std::optional<Stage> after;
    int rank = 0;
};

class Pipeline {
public:
    explicit Pipeline(StageDump dump = {}) : dump_(dump) {}

    // The stages up to `shapes`: the network at `path`. Errors go to `diags`; nullopt when there was any.
    std::optional<frontend::LoadedNetwork> network(const std::string& path, SourceManager& sources,
                                                   Diagnostics& diags) const;

    // The stages up to `schedule`: the network and, when `sched_path` is not empty, the schedule parsed, bound
    // and checked at its lines against the mini-batch and process count `batch` chooses. A network without a
    // loss is an error where the command `trains` it, else a warning. nullopt when there were errors.
    std::optional<Checked> check(const std::string& net_path, const std::string& sched_path, SourceManager& sources,
                                 Diagnostics& diags, const BatchChoice& batch = {}, bool trains = false) const;

    // The stage `schedule` alone: `file` bound to `net` (apply_schedule), for a command that compares several.
    std::optional<Schedule> schedule(const frontend::Network& net, const frontend::SchedFile& file,
                                     Diagnostics& diags) const;

    // The stage `filled`: `schedule` is what the command runs, `how` says where its fields came from (a
    // comment line), `platform` the platform it was filled for (its .sched text; empty: none).
    void filled(const frontend::Network& net, const Schedule& schedule, const std::string& how,
                const std::string& platform = "") const;

    // The stage `plan`: process `rank` of `procs`'s plan of a mini-batch of `batch` under `schedule`.
    Plan plan(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, int rank, int procs) const;

    // The stage `plan` for a command that makes no plan of its own (it predicts, or writes a schedule): the plan
    // of the process `--dump-after` names, made only where it asks for it.
    void show_plan(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, int procs) const {
        if (dumps(Stage::plan)) plan(net, schedule, batch, dump_.rank, procs);
    }

    // Whether the state after `stage` is printed.
    bool dumps(Stage stage) const { return dump_.after == stage; }

private:
    StageDump dump_;
};

// Reads and parses one `.sched` file; a file that cannot be read is an error naming it.
std::optional<frontend::SchedFile> load_sched(const std::string& path, SourceManager& sources, Diagnostics& diags);

}  // namespace dsl::scheduler
