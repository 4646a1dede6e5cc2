// Timing kernels on the shapes a platform key names, and communication over MPI, for `dsl calibrate`.
#include <dsl/backend/calibrate.hpp>

#include "../kinds/kind.hpp"
#include "kernel_probe.hpp"

#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/pipeline.hpp>
#include <dsl/scheduler/platform.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

namespace dsl::backend {

namespace {

using Clock = std::chrono::steady_clock;
// A key's sizes [n, c, spatial...] as dims; nothing (n 0) where they are not.
Dims dims_of(const std::vector<std::int64_t>& d) {
    if (d.size() < 2 || d.size() > 2 + static_cast<std::size_t>(max_space)) return {};
    Dims out{d[0], d[1], Index::filled(static_cast<int>(d.size()) - 2, 0)};
    for (int k = 0; k < out.rank(); ++k) out.space[k] = d[static_cast<std::size_t>(k) + 2];
    return out;
}

// A key's per-dimension field (a window's kernel, stride...), or `otherwise` where it has none.
Index spatial_of(const std::vector<std::int64_t>& v, const Index& otherwise) {
    if (v.empty() || v.size() > static_cast<std::size_t>(max_space)) return otherwise;
    Index out = Index::filled(static_cast<int>(v.size()), 0);
    for (int k = 0; k < out.rank(); ++k) out[k] = v[static_cast<std::size_t>(k)];
    return out;
}

// The median of `reps` timed calls (or more, to `min_seconds` in all) after `warmup` untimed ones; a call
// ends when the kernels it started in `mem` (a GPU's, which runs them after the call returns) have. Each
// timing is of `queued` calls back to back, over `queued`: a GPU's kernels queue 8, since in a step the host
// queues the next kernels while the GPU runs these, so a kernel costs its run, not its launch and the wait for
// its end (about 25 microseconds on an H100, as long as a ReLU of 8 million values).
double median_seconds(const std::function<void()>& f, const TimingRuns& runs, Memory& mem, int queued = 1) {
    for (int i = 0; i < runs.warmup; ++i) f();
    mem.synchronize();
    std::vector<double> t;
    const std::size_t reps = static_cast<std::size_t>(std::max(1, runs.reps)), most = 100 * reps;
    for (double timed = 0.0; t.size() < reps || (timed < runs.min_seconds && t.size() < most);) {
        const auto t0 = Clock::now();
        for (int i = 0; i < queued; ++i) f();
        mem.synchronize();
        t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / queued);
        timed += t.back() * queued;
    }
    std::sort(t.begin(), t.end());
    return t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
}

}  // namespace

// Small values, so nothing overflows or denormalizes.
Tensor KernelProbe::filled(Dims d) const {
    std::vector<float> values(static_cast<std::size_t>(d.elements()));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.01f * static_cast<float>((i * 7919) % 201 - 100);
    Tensor t(d, {}, mem);
    mem.upload(values.data(), t.data(), t.size());
    return t;
}

Tensor KernelProbe::constant(Dims d, float value) const {
    Tensor t(d, {}, mem);
    mem.fill(t.padded(), value);
    return t;
}

Index KernelProbe::spatial(const char* name, const Index& otherwise) const {
    return spatial_of(field(name), otherwise);
}

std::optional<double> time_kernel(const std::string& key, Kernels k, DataSource& data, const frontend::Layer& input,
                                  const TimingRuns& runs, std::string& why) {
    const auto parsed = scheduler::parse_time_key(key);
    if (!parsed) {
        why = "malformed key";
        return std::nullopt;
    }
    using scheduler::Phase;
    // A layer kind's kernel ("conv.forward", "activation.backward": the kernel of the first kind with those
    // kernels, relu's, with slope 0), set up by its kind's row; else one of no layer ("sgd").
    const auto layer_kernel = scheduler::parse_kernel_name(parsed->kernel);
    const frontend::LayerKind& kind = frontend::kind_of(layer_kernel ? layer_kernel->kind : frontend::OpKind::label);
    Memory& mem = k.mem();
    KernelProbe p(k, mem, data, input, *parsed, kind, layer_kernel ? layer_kernel->phase : Phase::forward);
    p.x = dims_of(p.field("x"));
    p.y = dims_of(p.field("y"));
    const Index ones = Index::filled(p.x.n ? p.x.rank() : p.w.kernel.rank(), 1);
    p.w.kernel = p.spatial("k", ones);
    p.w.stride = p.spatial("s", ones);
    p.w.dilation = p.spatial("d", ones);
    if (layer_kernel) {
        rules_of(kind.op).probe(p);
    } else if (parsed->kernel == scheduler::sgd_kernel && !p.field("params").empty()) {
        const std::int64_t n = p.field("params")[0];
        p.p1 = p.constant(vector_of(n), 0.5f);  // the weights, and their gradient
        p.p2 = p.zeros(vector_of(n));           // the momentum
        p.run = [&p, n] { p.k.eltwise->sgd(p.p1.data(), p.p2.data(), p.p1.data(), n, 1e-9f, 0.9f, 0.0f); };
    } else if (parsed->kernel == scheduler::adam_kernel && !p.field("params").empty()) {
        const std::int64_t n = p.field("params")[0];
        p.p1 = p.constant(vector_of(n), 0.5f);  // the weights, and their gradient
        p.p2 = p.zeros(vector_of(n));           // the first moments
        p.a = p.zeros(vector_of(n));            // the second moments
        const AdamStep step = adam_step(false, 1e-9, 0.9, 0.999, 1e-8, 0.0, 1);
        p.run = [&p, n, step] { p.k.eltwise->adam(p.p1.data(), p.p2.data(), p.a.data(), p.p1.data(), n, step); };
    }
    if (!p.run) {
        why = p.why.empty() ? "no kernel of that name and shape" : p.why;
        return std::nullopt;
    }
    return median_seconds(p.run, runs, mem, mem.host() ? 1 : 8);
}

std::vector<std::pair<std::string, double>> time_communication(Comm& comm, std::int64_t max_bytes,
                                                               const TimingRuns& runs, bool exchanges, Memory& mem) {
    std::vector<std::pair<std::string, double>> out;
    std::vector<std::int64_t> sizes;
    for (std::int64_t b = 8; b <= max_bytes; b *= 4) sizes.push_back(b);
    if (sizes.empty() || sizes.back() != max_bytes) sizes.push_back(max_bytes);
    const int me = comm.rank();
    // Every process must time as many exchanges as its peers: a count, never a time each decides alone.
    TimingRuns counted = runs;
    counted.min_seconds = 0.0;
    Buffer send(mem), receive(mem);
    send.resize(max_bytes / 4 + 1);
    receive.resize(send.size());
    // Point to point: 0 and 1 exchange at once, while the others wait at the barrier (an allreduce).
    if (exchanges && comm.size() > 1)
        for (std::int64_t b : sizes) {
            const std::int64_t count = std::max<std::int64_t>(1, b / 4);
            double seconds = 0.0;
            if (me < 2) {
                const int peer = 1 - me;
                seconds = median_seconds(
                    [&] {
                        comm.start_exchange({Message{peer, send.data(), count}}, {Message{peer, receive.data(), count}},
                                            7);
                        comm.finish_exchange();
                    },
                    counted, mem);
            }
            double barrier = 0.0;
            comm.allreduce(&barrier, 1);
            if (me == 0) out.emplace_back(scheduler::time_key(scheduler::sendrecv_kernel, {{"bytes", {b}}}), seconds);
        }
    // Allreduces over every process, as the weight gradients' (non-blocking, then waited for), in the memory
    // the trainer places them in where the communicator has it (Comm::summing_space).
    if (comm.size() > 1) {
        const std::shared_ptr<float> summed =
            mem.host() ? comm.summing_space(static_cast<std::int64_t>(send.size())) : nullptr;
        float* data = summed ? summed.get() : send.data();
        for (std::int64_t b : sizes) {
            const std::int64_t count = std::max<std::int64_t>(1, b / 4);
            const double seconds = median_seconds(
                [&] {
                    comm.start_allreduce(data, count);
                    comm.finish_allreduces();
                },
                counted, mem);
            double barrier = 0.0;
            comm.allreduce(&barrier, 1);
            if (me == 0)
                out.emplace_back(
                    scheduler::time_key(scheduler::allreduce_kernel, {{"bytes", {b}}, {"procs", {comm.size()}}}),
                    seconds);
        }
    }
    return out;
}

StepSeconds profile_layers(const frontend::Network& net, const scheduler::Schedule& schedule, std::int64_t batch,
                           Kernels kernels, Comm& comm, DataSource& data, const TimingRuns& runs) {
    TrainConfig config;
    config.batch = batch;
    config.lr = 1e-6;                        // the values do not matter, only that they stay finite
    config.optimizer = net.train.optimizer;  // its update is timed (step.update)
    Trainer trainer(net, kernels, config, scheduler::Pipeline().plan(net, schedule, batch, comm.rank(), comm.size()),
                    &comm);
    for (int i = 0; i < runs.warmup; ++i) trainer.step(data, 0);
    trainer.profile(true);
    const std::size_t layers = net.layers.size();
    // Per layer: forward and backward compute, their waits; then the update.
    std::vector<std::vector<double>> samples(4 * layers + 1);
    for (int i = 0; i < std::max(1, runs.reps); ++i) {
        trainer.step(data, 0);
        const StepProfile& p = trainer.last_profile();
        for (std::size_t l = 0; l < layers; ++l) {
            const LayerTime& t = p.layers[l];
            samples[4 * l].push_back(std::max(0.0, t.forward - t.forward_wait));
            samples[4 * l + 1].push_back(std::max(0.0, t.backward - t.backward_wait));
            samples[4 * l + 2].push_back(t.forward_wait);
            samples[4 * l + 3].push_back(t.backward_wait);
        }
        samples[4 * layers].push_back(p.update);
    }
    // Medians, then means over the processes: along a step every process spends about the same time,
    // computing or waiting, so a layer's mean compute and mean wait add up, layer by layer, to the step.
    std::vector<double> sums;
    for (auto& v : samples) {
        std::sort(v.begin(), v.end());
        sums.push_back(v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
    }
    comm.allreduce(sums.data(), static_cast<std::int64_t>(sums.size()));
    const double procs = comm.size();
    StepSeconds out;
    out.layers.resize(layers);
    for (std::size_t l = 0; l < layers; ++l)
        out.layers[l] = {sums[4 * l] / procs, sums[4 * l + 1] / procs, sums[4 * l + 2] / procs,
                         sums[4 * l + 3] / procs};
    out.update = sums[4 * layers] / procs;
    long pages = 0, resident = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    out.resident = comm.max(static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)));
    return out;
}

std::pair<double, double> fit_link(const std::vector<std::pair<double, double>>& points) {
    // Least squares of seconds on bytes.
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& [x, y] : points) n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
    if (n < 2) return {points.empty() ? 0.0 : points.front().second, 1e9};
    const double slope = (n * sxy - sx * sy) / std::max(1e-300, n * sxx - sx * sx);
    const double intercept = (sy - slope * sx) / n;
    // The latency is the smallest message's time where the fit's intercept is off (it can go negative).
    const double smallest = std::min_element(points.begin(), points.end())->second;
    return {intercept > 0 ? std::min(intercept, smallest) : smallest, slope > 0 ? 1.0 / slope : 1e12};
}

}  // namespace dsl::backend
