// The `check` report as a table or JSON, and what the verbs share of reporting: `--dump-after`, sizes, times.
#pragma once

#include <dsl/base/units.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/frontend/sched_ast.hpp>
#include <dsl/scheduler/pipeline.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dsl::cli {

// The stages, a checked network and schedule, and the mini-batch a command runs: scheduler/pipeline.hpp.
using scheduler::BatchChoice;
using scheduler::Checked;

// `--dump-after STAGE` on a verb's command line, into `after`: any stage of scheduler::stage_names up to
// `last` (a verb that reads only a network: `shapes`).
void add_dump_after(CLI::App& sub, std::string& after, scheduler::Stage last = scheduler::Stage::plan);
// The stage dump `--dump-after` asked (`rank`: the process whose plan is printed).
scheduler::StageDump stage_dump(const std::string& after, int rank = 0);

// The mini-batch size the report uses for tiles: the given one, the schedule's, or one sample per process.
std::int64_t report_batch(const Checked& c, std::optional<std::int64_t> batch);
std::int64_t report_batch(const std::optional<scheduler::Schedule>& s, std::optional<std::int64_t> batch);

// Indented JSON and a newline; bytes that are not UTF-8 (names in a malformed file) become U+FFFD.
std::string json_text(const nlohmann::json& j);
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
