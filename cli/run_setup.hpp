// What `dsl run`, `dsl eval` and `dsl predict` share: the options that say what runs where (network,
// schedule, mini-batch, processes, kernels, device), the schedule a run executes, and starting the
// processes (mpirun, the GPU and its communicator) around a body that every process runs.
#pragma once

#include "data_options.hpp"
#include "report.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/comm.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/trainer.hpp>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsl::cli {

struct RunOptions {
    std::string net, sched;
    std::int64_t steps = 10, save_every = 0;
    std::int64_t keep = 2;  // --keep: the newest whole checkpoints a --save series keeps
    std::optional<std::int64_t> batch, procs;
    std::optional<double> lr, momentum, weight_decay;
    // Dynamic loss scaling's initial scale; 0 turns it off. Default: 65536 where a layer is float16.
    std::optional<double> loss_scale;
    std::optional<std::string> optimizer;
    std::uint64_t seed = 0;
    std::string log, save, load, kernels = "cpu", device, platform, gpu_comm = "auto", trace;
    std::optional<std::int64_t> trace_steps;
    bool auto_schedule = false, profile = false, tf32 = false;
    // stdout holds one JSON object (`dsl eval --json`): the schedule --auto-schedule chose goes to stderr.
    bool json = false;
    DataOptions data;
    // --prefetch K: the mini-batches of data from files read ahead of the step, on a thread (0: none).
    std::int64_t prefetch = 2;
    // --eval-every K with --eval-data (and --eval-samples): the evaluation figures every K steps.
    std::int64_t eval_every = 0;
    std::optional<std::int64_t> eval_samples;
    std::vector<std::string> eval_data;
    // --dump-after: the stage whose state is printed (scheduler::stage_names), empty for none.
    std::string dump_after;
    // `dsl run`'s: SIGTERM and SIGUSR1 stop it at the end of a step (stop_signals.hpp), and --timeout, the
    // seconds a process may make no progress before the watchdog ends the run (0: its default rule).
    bool stops_at_step = false;
    double timeout = 0.0;
};

// Output only on the first process: the others run silently.
struct Output {
    bool on = true;
    std::ostream& out() { return on ? std::cout : null; }
    std::ostream& err() { return on ? std::cerr : null; }
    std::ostream null{nullptr};
};

// The mini-batch size: --batch, the schedule's, or 4.
constexpr std::int64_t default_batch = 4;
std::int64_t run_batch(const Checked& c, const RunOptions& o);

// The schedule a run executes: the file's, with --procs where it leaves the count open, filled by the
// auto-scheduler with --auto-schedule; on one process without a file, everything on that process. Empty
// with the reason when it cannot run.
std::optional<scheduler::Schedule> run_schedule(const Checked& c, const RunOptions& o, std::string& why, Output& io);

// What a process of this machine holds in a run of `s`: its bytes, and why the layers together do not fit
// (empty when they do, or when the auto-scheduler chose `s`, which it fitted); and the model's step on this
// machine, in seconds. Nothing is judged on a GPU (the device's memory is the platform's business: explain
// says it).
struct MachineFit {
    double memory = 0.0;
    std::string unfit;
    double step = 0.0;
};
MachineFit machine_fit(const Checked& c, const RunOptions& o, const scheduler::Schedule& s);

// The stages of a run, printed (--dump-after) by the process that speaks (`io`): the network and its
// schedule by the one started by hand, the first process's plan by that process.
scheduler::Pipeline run_pipeline(const RunOptions& o, const Output& io);

// This process's trainer of a run of `schedule` on the processes of `comm`: the plan of its part
// (`pipeline`'s stage `plan`, after the filled schedule), executed by a Trainer. A schedule that splits
// the samples more ways than `config.batch` has is a UserError.
std::unique_ptr<backend::Trainer> make_trainer(const scheduler::Pipeline& pipeline, const frontend::Network& net,
                                               const scheduler::Schedule& schedule, backend::Kernels kernels,
                                               const backend::TrainConfig& config, backend::Comm& comm);

// Whether every process succeeded; where some did not, the first of them prints `message`, so that it is
// printed once.
bool agree(backend::Comm& comm, bool ok, const std::string& message);

// The checkpoint that `--load DIR` means (backend::checkpoint_folder), read by every process: the first
// decides which folder, so that a save into the series meanwhile cannot make them read different ones, and
// prints the note where it fell back from a damaged newest one. Nullopt with the reason on this process.
std::optional<backend::Checkpoint> load_shared(backend::Comm& comm, const std::string& dir, std::string& error);

// The body of a run on the processes `schedule` has: this process runs it (under mpirun, or alone), or,
// started by hand for several, starts them under mpirun with the same command line. Checks --device and
// --kernels first; a user error or a crash on one process ends them all, said once. Returns the exit code.
using RunBody = std::function<int(backend::Kernels kernels, backend::Comm& comm)>;
int on_processes(const RunOptions& o, const Checked& checked, const scheduler::Schedule& schedule, Output& io,
                 const RunBody& body);

// What `dsl run`, `dsl eval` and `dsl predict` share around their work: the network checked (said on the
// first process), the schedule it runs under, then `body` on that schedule's processes. Returns the exit code.
using TrainedBody = std::function<int(const Checked& checked, const scheduler::Schedule& schedule,
                                      backend::Kernels kernels, backend::Comm& comm, Output& io)>;
int run_trained(const RunOptions& o, const TrainedBody& body);

}  // namespace dsl::cli
