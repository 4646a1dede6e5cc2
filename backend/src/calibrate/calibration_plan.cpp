// What a calibration measures (the kernels, communication and training steps a platform lacks for a network)
// and how long measuring it takes; and the layers no schedule can fit on a machine, which are not measured.
#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/kinds.hpp>

#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/model.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace dsl::backend {

namespace {

// A measuring process's start, and mpirun's (its daemon, MPI's setup), in seconds: what a tiny measurement
// takes on this project's two-core test machine.
constexpr double process_start = 0.1, mpirun_start = 0.4;

// How long measuring `n` takes, from the model's times now (measured where the platform has them, else its
// analytic figures): a kernel timed alone runs `warmup` calls, then `reps`, more until the timed ones add up
// to TimingRuns::min_seconds (at most 100 times as many); each message size of the communication, `warmup +
// reps` calls; the training steps, `warmup + reps` under each split (overlap off and on where it splits the
// rows and columns), and a run that alternates splits.
void estimate(CalibrationPlan& n, const frontend::Network& net, const scheduler::Platform& platform,
              const CalibrationSettings& o, const std::map<std::string, double>& per_call) {
    const double runs = o.warmup + o.reps, least = TimingRuns{}.min_seconds;
    for (const auto& [threads, keys] : n.kernels) {
        double t = process_start;
        for (const std::string& k : keys) {
            const auto it = per_call.find(k);
            const double call = it == per_call.end() ? 0.0 : it->second;
            t += o.warmup * call + std::max(o.reps * call, std::min(least, 100.0 * o.reps * call));
        }
        n.kernel_seconds[threads] = t;
    }
    for (std::int64_t procs : n.comm) {
        const scheduler::Model model(net, platform, procs, 1, kind_costs());
        double t = mpirun_start;
        // The sizes of time_communication: 8 bytes, 4 times more each, and the largest.
        std::vector<double> sizes;
        for (double b = 8; b <= static_cast<double>(o.max_message); b *= 4) sizes.push_back(b);
        if (sizes.empty() || sizes.back() != static_cast<double>(o.max_message))
            sizes.push_back(static_cast<double>(o.max_message));
        for (double bytes : sizes) {
            t += runs * model.allreduce(procs, bytes, false);
            if (n.exchanges && procs == n.comm.front()) t += runs * model.sendrecv(bytes, false);
        }
        n.comm_seconds[procs] = t;
    }
    for (const auto& [procs, batch] : n.profiles) {
        const scheduler::Model model(net, platform, procs, batch, kind_costs());
        // A step under the first split each layer can run, as a measure of every split's.
        double step = 0.0;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (net.layers[i].is_data()) continue;
            const auto c = scheduler::candidates(net, static_cast<int>(i),
                                                 {std::nullopt, false, scheduler::BatchNormStats::batch, std::nullopt},
                                                 procs, batch);
            if (!c.empty()) step += model.layer(static_cast<int>(i), c.front()).time();
        }
        double schedules = procs > 1 ? 1 : 0;  // the alternating run
        for (const scheduler::Split& split : scheduler::splits_of(procs, batch, net.spatial_rank()))
            schedules += split.spatial() ? 2 : 1;
        n.profile_seconds.push_back(mpirun_start + schedules * (process_start + runs * step));
    }
}

}  // namespace

double CalibrationPlan::seconds() const {
    double sum = 0.0;
    for (const auto& [threads, t] : kernel_seconds) sum += t;
    for (const auto& [procs, t] : comm_seconds) sum += t;
    for (double t : profile_seconds) sum += t;
    return sum;
}

CalibrationPlan plan_calibration(const frontend::Network& net, const scheduler::Platform& platform,
                                 const CalibrationSettings& o, bool missing_only) {
    auto has = [&](const std::string& key) { return missing_only && platform.times.count(key) > 0; };
    auto has_any = [&](const std::string& prefix, const std::string& suffix) {
        for (auto it = platform.times.lower_bound(prefix);
             missing_only && it != platform.times.end() && it->first.rfind(prefix, 0) == 0; ++it)
            if (it->first.ends_with(suffix)) return true;
        return false;
    };
    CalibrationPlan n;
    std::map<std::string, double> per_call;
    for (std::int64_t procs : o.procs) {
        for (std::int64_t batch : o.batches) {
            CalibrationSettings one = o;
            one.procs = {procs};
            one.batches = {batch};
            bool fresh = false;
            for (const auto& [threads, keys] : kernel_keys_by_threads(net, platform, one, &per_call))
                for (const std::string& k : keys)
                    if (!has(k)) n.kernels[threads].insert(k), fresh = true;
            const scheduler::Model model(net, platform, procs, batch, kind_costs());
            if (o.in_situ && (fresh || !has(model.update_key()))) n.profiles.emplace_back(procs, batch);
        }
        if (procs > 1 && !has_any(scheduler::allreduce_kernel + std::string(" "), fmt::format(" procs={}", procs)))
            n.comm.push_back(procs);
    }
    const auto first = std::find_if(o.procs.begin(), o.procs.end(), [](std::int64_t p) { return p > 1; });
    n.exchanges = first != o.procs.end() && !has_any(scheduler::sendrecv_kernel + std::string(" "), "");
    if (n.exchanges && (n.comm.empty() || n.comm.front() != *first)) n.comm.insert(n.comm.begin(), *first);
    estimate(n, net, platform, o, per_call);
    return n;
}

// Every process holds a layer's weights whole, with their gradient and the optimizer's state beside them, and
// a sample's output of a layer, however split, is held by the machine's processes together.
const frontend::Layer* unfit_layer(const frontend::Network& net, double memory, std::string& reason) {
    if (memory <= 0.0) return nullptr;
    for (const frontend::Layer& l : net.layers) {
        const double weights = 4.0 * 4.0 * static_cast<double>(l.params);  // weights, gradient, two moments
        const double output = static_cast<double>(l.activation_bytes);
        if (weights <= memory && output <= memory) continue;
        const bool by_weights = weights > memory;
        reason = fmt::format(
            "layer '{}' cannot fit this machine's memory ({:.1f} GiB) under any schedule: {} ({:.3g} GiB) {}; "
            "nothing is measured for it",
            l.name, memory / (1 << 30),
            by_weights ? fmt::format("its {} parameters with their gradients and optimizer state", l.params)
                       : "the output of one sample",
            (by_weights ? weights : output) / (1 << 30),
            by_weights ? "are held whole by every process" : "must be held by the machine's processes together");
        return &l;
    }
    return nullptr;
}

}  // namespace dsl::backend
