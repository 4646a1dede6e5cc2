// Calibration: the measured times the performance model reads from a platform file. Kernels are timed on
// buffers of the shapes a platform time key names (the local tiles candidate schedules would give), through
// the same kernels training uses; communication between processes of a run; each layer in training steps.
// What a calibration measures and how long that takes, and the work of its measuring processes, are here
// too; `dsl calibrate` starts those processes and writes the platform file.
#pragma once

#include <dsl/backend/comm.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/platform.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dsl::backend {

struct TimingRuns {
    int warmup = 2;  // runs before timing: primitive creation, first touch
    int reps = 10;   // timed runs, ten as in the reference paper, which takes their mean; we take the median,
                     // which a shared machine's interruptions do not move
    // Kernels timed alone make more runs, up to 100 times `reps`, until the timed ones add up to this many
    // seconds: ten runs of a 10-microsecond kernel fit in one interruption, and their median would be that
    // interruption's. (Communication runs `reps`: every process must make as many calls as its peers.)
    double min_seconds = 0.05;
};

// The seconds of one call of the kernel that a time key names ("conv.forward d=1x1 k=3x3 s=2x2
// threads=1 x=4x18x65x65 y=4x16x32x32": see Model::kernel_keys), on this process's threads. `data` and
// `input` make the tiles of an input layer ("input.forward"). nullopt with `why` for a key it cannot time.
std::optional<double> time_kernel(const std::string& key, Kernels kernels, DataSource& data,
                                  const frontend::Layer& input, const TimingRuns& runs, std::string& why);

// Allreduces over every process of `comm` and, with `exchanges`, point-to-point exchanges between processes
// 0 and 1 (both sending and receiving at once, as halos go), for message sizes from 8 bytes by powers of
// 4, and `max_bytes`. Collective: every process calls it. The result, on process 0, is keyed as the platform
// file keys them: "allreduce bytes=N procs=P", "sendrecv bytes=N". The buffers are in `mem` (a GPU's,
// with a GPU run's communicator).
std::vector<std::pair<std::string, double>> time_communication(Comm& comm, std::int64_t max_bytes,
                                                               const TimingRuns& runs, bool exchanges,
                                                               Memory& mem = host_memory());

// Each layer in real training steps under `schedule`: the median over `runs.reps` steps (after
// `runs.warmup`) of its forward and backward compute (their time less the waits for other processes) and of
// those waits, each averaged over the processes, and of the update after backward. Collective over `comm` (the
// schedule's processes).
struct LayerSeconds {
    double forward = 0.0, backward = 0.0;
    double forward_wait = 0.0, backward_wait = 0.0;
};
struct StepSeconds {
    std::vector<LayerSeconds> layers;
    double update = 0.0;    // the SGD step, with the wait for the weight gradients' allreduces
    double resident = 0.0;  // bytes resident in the largest process after the steps, the trainer alive
};
StepSeconds profile_layers(const frontend::Network& net, const scheduler::Schedule& schedule, std::int64_t batch,
                           Kernels kernels, Comm& comm, DataSource& data, const TimingRuns& runs);

// The latency and bandwidth of a linear fit, time = latency + bytes / bandwidth, to measured exchanges.
std::pair<double, double> fit_link(const std::vector<std::pair<double, double>>& bytes_seconds);

// What a calibration measures, and how: the process counts and mini-batches, the runs of each timing, the
// largest message, and the device whose kernels and communication are measured.
struct CalibrationSettings {
    std::vector<std::int64_t> procs, batches{4};
    int reps = 10, warmup = 2;
    std::int64_t max_message = 64 << 20;
    bool exchanges = false;          // a communication worker's: point-to-point exchanges too
    bool in_situ = true;             // each layer in training steps too, not the kernels alone
    bool bfloat16 = false;           // the convolutions' kernels with bfloat16 products too (precision=bfloat16)
    bool float16 = false;            // and with float16 products (precision=float16: the GPU's)
    bool gpu = false;                // the GPU's kernels and communication, not the CPU's
    std::int64_t gpu_workspace = 0;  // a worker's: the convolutions' scratch limit (the platform's workspace)

    TimingRuns runs() const { return {warmup, reps}; }
};

// The kernels the model would look up for every candidate distribution of every layer, by the threads a
// process has at each process count; with `seconds`, each key's time per call as the model has it now
// (measured, or analytic): its layer's compute under that distribution, shared among the layer's kernels.
std::map<int, std::set<std::string>> kernel_keys_by_threads(const frontend::Network& net,
                                                            const scheduler::Platform& base,
                                                            const CalibrationSettings& s,
                                                            std::map<std::string, double>* seconds = nullptr);

// What a calibration measures: kernels by thread count, communication on process counts (exchanges on the
// first), and training steps under every split for pairs of process count and mini-batch.
struct CalibrationPlan {
    std::map<int, std::set<std::string>> kernels;
    std::vector<std::int64_t> comm;
    bool exchanges = false;
    std::vector<std::pair<std::int64_t, std::int64_t>> profiles;
    bool empty() const { return kernels.empty() && comm.empty() && profiles.empty(); }

    // How long each part takes, roughly: by thread count, by process count of `comm`, by pair of `profiles`.
    std::map<int, double> kernel_seconds;
    std::map<std::int64_t, double> comm_seconds;
    std::vector<double> profile_seconds;
    double seconds() const;
};

// Everything `s` asks for; with `missing_only`, what `platform` lacks of it: kernel times, allreduces on a
// process count, exchanges, and the training steps of a count and mini-batch whose kernels are new to it or
// whose update it has not measured. With the time each part takes, from the model's times now.
CalibrationPlan plan_calibration(const frontend::Network& net, const scheduler::Platform& platform,
                                 const CalibrationSettings& s, bool missing_only);

// The first layer whose tiles cannot fit a machine's memory (`memory` bytes, all of it) under any schedule,
// with the reason, or null: measuring such a layer would only run out of memory, or run for ever.
const frontend::Layer* unfit_layer(const frontend::Network& net, double memory, std::string& reason);

// This machine as the model sees it during calibration: `p` with its cores (or GPUs) on one node.
scheduler::Platform calibrated_machine(scheduler::Platform p, bool gpu);

// A measuring process's kernels: the CPU's, or those of the GPU of its local rank (selecting it).
Kernels measuring_kernels(const CalibrationSettings& s);
// Its communicator over MPI: on a GPU, over NCCL where each process has a GPU of its own.
std::unique_ptr<Comm> measuring_comm(const CalibrationSettings& s);

// Times calibration keys on a measuring process's kernels: a kernel worker's, one key after another.
class KernelTimer {
public:
    // A UserError when `net` has no input layer, whose tiles "input.forward" times.
    KernelTimer(const frontend::Network& net, const CalibrationSettings& s);
    // time_kernel on this timer's kernels: the seconds of one call, or nullopt with `why`.
    std::optional<double> time(const std::string& key, std::string& why);

private:
    std::unique_ptr<DataSource> data_;
    const frontend::Layer* input_ = nullptr;
    TimingRuns runs_;
    Kernels kernels_;
};

// Training steps under every split of `comm`'s processes (overlap off and on where it matters), on a
// mini-batch of `s.batches.front()`, each layer's compute profiled and keyed as the model looks it up (a layer
// that a split cannot run takes its first candidate instead); from them the factors of training over the
// kernels alone, the drift, the update, a shuffle's cost beyond its transfer and ("workspace") the memory a
// process holds beyond what the model counts. `so_far` is the platform measured so far (kernels,
// communication), for the model's own estimates. The times on process 0, nothing on the others. Collective
// over `comm`.
std::vector<std::pair<std::string, double>> step_profiles(const frontend::Network& net, scheduler::Platform so_far,
                                                          const CalibrationSettings& s, Kernels kernels, Comm& comm);

// A measuring process's results as it hands them to the command: a line per time, "key<TAB>seconds".
std::string results_text(const std::vector<std::pair<std::string, double>>& times);
// The results a measuring process wrote to `path`; nothing where it wrote none.
std::map<std::string, double> read_results(const std::string& path);

// The FLOP/s a single-thread convolution key's time shows; nullopt for any other key.
std::optional<double> conv_rate(const std::string& key, double seconds);

}  // namespace dsl::backend
