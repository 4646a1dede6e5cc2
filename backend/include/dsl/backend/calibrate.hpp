// Calibration: the measured times the performance model reads from a platform file. Kernels are timed on
// buffers of the shapes a platform time key names (the local tiles candidate schedules would give), through
// the same kernels training uses; communication between processes of a run.
#pragma once

#include <dsl/backend/comm.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/network.hpp>

#include <cstdint>
#include <optional>
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

}  // namespace dsl::backend
