// Helpers the benchmarks share: loading a network, medians, the machine's load, and a Kernels wrapper that
// times every kernel call by method so a training step's time can be split by layer kind.
#pragma once

#include <dsl/backend/kernels.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/autoschedule.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dsl::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A path in the source tree (the networks in samples/, stdlib/ and bench/), unless `path` exists as given.
std::string source_path(const std::string& path);

// The network at `path`, checked; exits with the diagnostics on stderr when it does not load.
frontend::Network load(const std::string& path);

double median(std::vector<double> v);
double quantile(std::vector<double> v, double q);  // q in [0, 1], between the nearest two

std::string cpu_model();     // lscpu's "Model name"
std::string load_average();  // the first three fields of /proc/loadavg
int omp_threads();           // the threads oneDNN's OpenMP runtime will use

// The auto-scheduler's search of every field of `net` on `procs` processes under `model`, as `dsl schedule`
// runs it: within the model's memory limit, channel and filter parts up to `channel_parts`. Exits with the
// reason on stderr where no schedule fits.
scheduler::AutoResult search_open(const frontend::Network& net, const scheduler::Model& model, std::int64_t procs,
                                  std::int64_t batch, scheduler::SearchMethod method, std::int64_t channel_parts);

// An environment variable as an integer, or `fallback` when unset.
std::int64_t env_int(const char* name, std::int64_t fallback);

// Seconds and calls per kernel method ("conv.forward", "batchnorm.statistics", ...), accumulated by `timed`.
class KernelTimes {
public:
    struct Entry {
        double seconds = 0.0;
        std::int64_t calls = 0;
    };
    void add(const std::string& name, double seconds) {
        auto& e = entries_[name];
        e.seconds += seconds;
        ++e.calls;
    }
    void add_detail(const std::string& name, double seconds);
    void clear() { entries_.clear(), details_.clear(); }
    const std::map<std::string, Entry>& entries() const { return entries_; }
    // By method and tensor dims ("conv.forward 1x32x256x256"), when `detail` is set.
    const std::map<std::string, Entry>& details() const { return details_; }
    bool detail = false;
    double total() const;

private:
    std::map<std::string, Entry> entries_, details_;
};

// Kernels that forward every call to `inner` and add its wall time to `times`. The CPU kernels are
// synchronous (oneDNN waits on its stream; Halide returns when done), so a call's wall time is its cost.
// The returned object owns the wrappers; its `kernels` points into it.
struct TimedKernels {
    backend::Kernels kernels;
    std::vector<std::shared_ptr<void>> owned;
};
std::unique_ptr<TimedKernels> timed(backend::Kernels inner, KernelTimes& times);

}  // namespace dsl::bench
