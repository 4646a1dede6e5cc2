// Timelines in the Chrome trace-event format, which Perfetto and chrome://tracing open: a training run's,
// measured on every process (`dsl run --trace`), and the performance model's prediction for the busiest
// process (`dsl explain --trace`). Both are made of the trainer's profile events (backend::ProfileEvent) and
// named by one function, so that the same thing has the same name in both.
#pragma once

#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/model.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dsl::cli {

// One process's events of one step, with the step's start and end, in seconds of its own clock.
struct TracedStep {
    std::int64_t step = 0;  // 1-based, as `dsl run` prints it
    double start = 0.0, end = 0.0;
    std::vector<backend::ProfileEvent> events;
};

// An event's name on a timeline: "conv1 forward", "conv1 backward data", "conv1 halo", "bn1 wait for sum",
// "conv1 allreduce", "update".
std::string event_name(const frontend::Network& net, const backend::ProfileEvent& e);

// A process's traced steps as numbers (to gather them on the first process), and back; `origin` (seconds of
// the process's clock, read by every process at once after a barrier) becomes time 0.
std::vector<double> pack_steps(const std::vector<TracedStep>& steps, double origin);
std::vector<TracedStep> unpack_steps(const std::vector<double>& packed);

// The model's timeline of one step for the busiest process, from time 0: each layer's forward (shuffle,
// exposed halo, compute, sums), then its backward in reverse order, each weight gradient's allreduce from the
// end of its layer's backward (as the model queues them), then the exposed allreduce and the update.
// `drift` (Model::drift) tells the waits for processes that drifted apart from the sums in a layer's sync.
TracedStep predicted_step(const frontend::Network& net, const scheduler::Prediction& p, double drift);

// The trace file: a process (pid) per entry of `processes`, named by `names`, each with threads for its
// steps, its compute (kernels and waits, one after another) and its communication (halo exchanges and
// shuffles, sums over processes, allreduces; spans that overlap go to lanes of their own). `about` goes into
// otherData, after {"generator": generator}.
std::string trace_text(const frontend::Network& net, const std::vector<std::vector<TracedStep>>& processes,
                       const std::vector<std::string>& names, const std::string& generator,
                       const nlohmann::json& about);

// Why a trace may not be written to `path`, or empty: it must be writable, and an existing file one that dsl
// wrote (or empty), never a file of the user's.
std::string trace_output_problem(const std::string& path);

}  // namespace dsl::cli
