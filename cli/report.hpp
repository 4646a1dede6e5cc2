// Loading a network and its schedule through every pass, and the `check` report as a table or JSON.
#pragma once

#include <dsl/frontend/passes.hpp>
#include <dsl/frontend/sched_ast.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dsl::cli {

// The stages a network and its schedule go through, in order, each named as `--dump-after` names it: the
// front end's (load_network: parse, imports, elaborate, shapes), the schedule bound to the network
// (load_and_check), the schedule with the fields it leaves open filled by the auto-scheduler (planning.hpp's
// `plan`), and one process's execution plan (scheduler::make_plan, which `dsl run` makes on every process
// before it trains).
inline const std::vector<std::string> stages{"parse", "imports", "elaborate", "shapes", "schedule", "filled", "plan"};

struct Checked {
    frontend::LoadedNetwork net;
    std::optional<frontend::SchedFile> sched_file;
    std::optional<scheduler::Schedule> schedule;
};

// The mini-batch a command runs, which the schedule must fit: `flag` (--batch), else the schedule's `batch`,
// else `fallback` (none: the command takes one sample per process, which every split fits); and `procs`
// (--procs), where the schedule leaves the process count open.
struct BatchChoice {
    std::optional<std::int64_t> flag, fallback, procs;
};

// Runs the front end on `net_path` and, when `sched_path` is not empty, parses and applies the schedule and
// checks it against the mini-batch `batch` chooses, at the schedule's lines; prints the state after the stage
// `dump_after` names, up to `schedule`. A network without a loss is an
// error where the command `trains` it, else a warning. Errors go to `diags`; nullopt when there was any.
std::optional<Checked> load_and_check(const std::string& net_path, const std::string& sched_path,
                                      SourceManager& sources, Diagnostics& diags, const std::string& dump_after,
                                      const BatchChoice& batch = {}, bool trains = false);

// Reads and parses one `.sched` file.
std::optional<frontend::SchedFile> load_sched(const std::string& path, SourceManager& sources, Diagnostics& diags);

// The mini-batch size the report uses for tiles: the given one, the schedule's, or one sample per process.
std::int64_t report_batch(const Checked& c, std::optional<std::int64_t> batch);
std::int64_t report_batch(const std::optional<scheduler::Schedule>& s, std::optional<std::int64_t> batch);

// Indented JSON and a newline; bytes that are not UTF-8 (names in a malformed file) become U+FFFD.
std::string json_text(const nlohmann::json& j);
std::string human_bytes(double bytes);  // "12.5 MiB"
// A time to wait, as a person reads it: "4.2 s", "37 s", "3 min 05 s", "2 h 07 min".
std::string duration_text(double seconds);

// A split as JSON: {"N": n, "C" and "F" where they are not 1, and the parts of each spatial axis of a network
// of spatial rank `rank` by its letter}: an image network's {"N", "H", "W"}, a volume network's {"N", "D",
// "H", "W"}.
nlohmann::json split_json(const scheduler::Split& split, int rank);
// A layer's halo along each spatial dimension of a network of spatial rank `rank` (0 where it reads no
// neighbourhood).
nlohmann::json halo_json(const frontend::Layer& layer, int rank);

std::string check_table(const Checked& c, std::int64_t batch);
nlohmann::json check_json(const Checked& c, std::int64_t batch);

}  // namespace dsl::cli
