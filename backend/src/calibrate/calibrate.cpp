// Timing kernels on the shapes a platform key names, and communication over MPI, for `dsl calibrate`.
#include <dsl/backend/calibrate.hpp>

#include <dsl/scheduler/kernel_names.hpp>
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

// One dimension per parameter (or per element of a per-sample tensor): {1, n}.
Dims vector_of(std::int64_t n) { return Dims{1, n, {}}; }

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

// Buffers in `mem` with small values, so nothing overflows or denormalizes.
Tensor filled_tensor(Memory& mem, Dims d, float scale = 0.01f) {
    std::vector<float> values(static_cast<std::size_t>(d.elements()));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = scale * static_cast<float>((i * 7919) % 201 - 100);
    Tensor t(d, {}, mem);
    mem.upload(values.data(), t.data(), t.size());
    return t;
}

Tensor constant(Memory& mem, Dims d, float value) {
    Tensor t(d, {}, mem);
    mem.fill(t.padded(), value);
    return t;
}

}  // namespace

std::optional<double> time_kernel(const std::string& key, Kernels k, DataSource& data, const frontend::Layer& input,
                                  const TimingRuns& runs, std::string& why) {
    const auto parsed = scheduler::parse_time_key(key);
    if (!parsed) {
        why = "malformed key";
        return std::nullopt;
    }
    using frontend::OpKind;
    using scheduler::Phase;
    // A layer kind's kernel ("conv.forward", "activation.backward": the kernel of the first kind with those
    // kernels, relu's, with slope 0), else one of no layer ("sgd").
    const auto layer_kernel = scheduler::parse_kernel_name(parsed->kernel);
    const frontend::LayerKind* kind = layer_kernel ? &frontend::kind_of(layer_kernel->kind) : nullptr;
    const OpKind op = kind ? kind->op : OpKind::label;
    const Phase phase = layer_kernel ? layer_kernel->phase : Phase::forward;
    auto field = [&](const char* name) -> const std::vector<std::int64_t>& { return parsed->field(name); };
    const Dims x = dims_of(field("x")), y = dims_of(field("y"));
    Window w;  // a field the key leaves out is 1 along each of the input's dimensions
    const Index ones = Index::filled(x.n ? x.rank() : w.kernel.rank(), 1);
    w.kernel = spatial_of(field("k"), ones);
    w.stride = spatial_of(field("s"), ones);
    w.dilation = spatial_of(field("d"), ones);
    std::function<void()> run;
    Memory& mem = k.mem();
    auto zeros = [&](Dims d) { return Tensor(d, {}, mem); };
    auto filled = [&](Dims d) { return filled_tensor(mem, d); };
    // The buffers live as long as `run`: tensors, parameters (p1, p2) in the kernels' memory; v1, v2 on the host.
    Tensor a, b, c, wt, p1, p2;
    std::vector<float> v1, v2;
    std::vector<double> s1, s2, s3, s4;
    std::vector<std::int32_t> labels;
    std::vector<Tensor> many;

    if (kind && kind->elementwise() && x.n) {
        a = filled(x);
        b = filled(x);
        c = zeros(x);
        const frontend::Activation f = kind->activation;
        if (phase == Phase::forward) run = [&, f] { k.activation->forward(f, a.interior(), 0.0f, c.interior()); };
        if (phase == Phase::backward)
            run = [&, f] { k.activation->backward(f, a.interior(), b.interior(), 0.0f, c.interior()); };
    } else if (op == OpKind::conv && x.n && y.n) {
        // A layer of precision=bfloat16 ("bf16=1") or float16 ("f16=1"): the kernels with 16-bit products,
        // where there are any.
        ConvKernels* conv = !field("bf16").empty() ? k.conv_bfloat16 : !field("f16").empty() ? k.conv_float16 : k.conv;
        if (!conv) {
            why = "no convolutions with 16-bit products here (they run in float32)";
            return std::nullopt;
        }
        a = filled(x);
        b = filled(y);
        wt = filled(Dims{y.c, x.c, w.kernel});
        c = zeros(Dims{y.c, x.c, w.kernel});
        if (phase == Phase::forward)
            run = [&, conv] { conv->forward(a.interior(), wt.interior(), nullptr, b.interior(), w); };
        if (phase == Phase::backward_data)
            run = [&, conv] { conv->backward_data(b.interior(), wt.interior(), a.interior(), w); };
        if (phase == Phase::backward_weights)
            run = [&, conv] { conv->backward_weights(a.interior(), b.interior(), c.interior(), nullptr, w); };
    } else if (op == OpKind::fc && x.n && y.n) {
        a = filled(x);
        b = filled(y);
        wt = filled(Dims{y.c, x.c * x.points(), {}});
        c = zeros(wt.dims());
        p1 = zeros(vector_of(y.c));
        if (phase == Phase::forward) run = [&] { k.fc->forward(a.interior(), wt.interior(), p1.data(), b.interior()); };
        if (phase == Phase::backward_data)
            run = [&] { k.fc->backward_data(b.interior(), wt.interior(), a.interior()); };
        if (phase == Phase::backward_weights)
            run = [&] { k.fc->backward_weights(a.interior(), b.interior(), c.interior(), p1.data()); };
    } else if (op == OpKind::batchnorm && x.n) {
        a = filled(x);
        b = filled(x);
        c = zeros(x);
        const auto ch = static_cast<std::size_t>(x.c);
        v1.assign(ch, 0.0f);                       // mean
        v2.assign(ch, 1.0f);                       // inverse standard deviation
        p1 = constant(mem, vector_of(x.c), 1.0f);  // gamma
        p2 = zeros(vector_of(x.c));                // beta
        s1.assign(ch, 0.0);
        s2.assign(ch, 0.0);
        const double count = static_cast<double>(x.n * x.points());
        if (phase == Phase::forward)
            run = [&] {
                k.batchnorm->statistics(a.interior(), s1.data(), s2.data());
                k.batchnorm->forward(a.interior(), v1.data(), v2.data(), p1.data(), p2.data(), c.interior());
            };
        if (phase == Phase::backward)
            run = [&] {
                k.batchnorm->backward_statistics(a.interior(), b.interior(), v1.data(), v2.data(), s1.data(),
                                                 s2.data());
                k.batchnorm->backward(a.interior(), b.interior(), v1.data(), v2.data(), p1.data(), s1.data(), s2.data(),
                                      count, c.interior());
            };
    } else if (op == OpKind::groupnorm && x.n && !field("g").empty() && field("g")[0] > 0 && x.c % field("g")[0] == 0) {
        const std::int64_t groups = field("g")[0];
        a = filled(x);
        b = filled(x);
        c = zeros(x);
        const auto stats = static_cast<std::size_t>(x.n * groups);
        v1.assign(stats, 0.0f);                    // mean
        v2.assign(stats, 1.0f);                    // inverse standard deviation
        p1 = constant(mem, vector_of(x.c), 1.0f);  // gamma
        p2 = zeros(vector_of(x.c));                // beta
        s1.assign(stats, 0.0);
        s2.assign(stats, 0.0);
        const double count = static_cast<double>(x.c / groups * x.points());
        if (phase == Phase::forward)
            run = [&, groups] {
                k.groupnorm->statistics(a.interior(), groups, s1.data(), s2.data());
                k.groupnorm->forward(a.interior(), groups, v1.data(), v2.data(), p1.data(), p2.data(), c.interior());
            };
        s3.assign(static_cast<std::size_t>(x.c), 0.0);  // d(beta), d(gamma)
        s4.assign(static_cast<std::size_t>(x.c), 0.0);
        if (phase == Phase::backward)
            run = [&, groups, count] {
                k.groupnorm->backward_statistics(a.interior(), b.interior(), groups, v1.data(), v2.data(), p1.data(),
                                                 s3.data(), s4.data(), s1.data(), s2.data());
                k.groupnorm->backward(a.interior(), b.interior(), groups, v1.data(), v2.data(), p1.data(), s1.data(),
                                      s2.data(), count, c.interior());
            };
    } else if (op == OpKind::dropout && x.n) {
        a = filled(x);
        c = zeros(x);
        DropoutMask m;
        m.p = 0.5f;
        m.at = Index::filled(x.rank(), 0);  // the tile at the tensor's origin
        if (phase == Phase::forward) run = [&, m] { k.dropout->forward(a.interior(), m, c.interior()); };
        if (phase == Phase::backward) run = [&, m] { k.dropout->backward(a.interior(), m, c.interior()); };
    } else if ((op == OpKind::maxpool || op == OpKind::avgpool) && x.n && y.n) {
        const PoolKind pk = op == OpKind::maxpool ? PoolKind::max : PoolKind::average;
        a = filled(x);
        b = filled(y);
        c = zeros(x);
        if (phase == Phase::forward) run = [&, pk] { k.pool->forward(pk, a.interior(), b.interior(), w); };
        if (phase == Phase::backward)
            run = [&, pk] { k.pool->backward(pk, a.interior(), b.interior(), c.interior(), w); };
    } else if (op == OpKind::upsample && x.n && y.n && k.upsample) {
        // The tile at the tensor's first row and column, its input the whole of what it reads.
        a = filled(x);
        b = filled(y);
        c = zeros(x);
        Upsample u;
        u.scale = field("scale").empty() ? 2 : field("scale")[0];
        u.linear =
            !field("mode").empty() && field("mode")[0] != static_cast<std::int64_t>(frontend::UpsampleMode::nearest);
        u.in = x.space;
        u.at = Placement{Index::filled(x.rank(), 0), Index::filled(y.rank(), 0)};
        if (phase == Phase::forward) run = [&, u] { k.upsample->forward(u, a.interior(), b.interior()); };
        if (phase == Phase::backward) run = [&, u] { k.upsample->backward(u, b.interior(), c.interior()); };
    } else if (op == OpKind::deconv && x.n && y.n && k.deconv) {
        Deconv d;
        d.kernel = w.kernel;
        d.stride = w.stride;
        d.pad = spatial_of(field("p"), Index::filled(w.kernel.rank(), 0));
        d.at = Placement{Index::filled(x.rank(), 0), Index::filled(y.rank(), 0)};
        a = filled(x);
        b = filled(y);
        wt = filled(Dims{x.c, y.c, w.kernel});
        c = zeros(wt.dims());
        p1 = zeros(vector_of(y.c));
        if (phase == Phase::forward)
            run = [&, d] { k.deconv->forward(a.interior(), wt.interior(), p1.data(), b.interior(), d); };
        if (phase == Phase::backward_data)
            run = [&, d] { k.deconv->backward_data(b.interior(), wt.interior(), a.interior(), d); };
        if (phase == Phase::backward_weights)
            run = [&, d] { k.deconv->backward_weights(a.interior(), b.interior(), c.interior(), p1.data(), d); };
    } else if (op == OpKind::global_avgpool && x.n) {
        a = filled(x);
        s1.assign(static_cast<std::size_t>(x.n * x.c), 0.0);
        v1.assign(static_cast<std::size_t>(x.n * x.c), 1.0f);
        if (phase == Phase::forward) run = [&] { k.pool->global_sum(a.interior(), s1.data()); };
        if (phase == Phase::backward) run = [&] { k.pool->broadcast(v1.data(), 0.5f, a.interior()); };
    } else if (op == OpKind::add && x.n) {
        const std::int64_t inputs = field("inputs").empty() ? 2 : field("inputs")[0];
        for (std::int64_t i = 0; i < inputs; ++i) many.push_back(filled(x));
        c = zeros(x);
        if (phase == Phase::forward)
            run = [&] {
                std::vector<ConstView> xs;
                for (Tensor& t : many) xs.push_back(t.interior());
                k.eltwise->add(xs, c.interior());
            };
        if (phase == Phase::backward)
            run = [&] {
                for (Tensor& t : many) k.eltwise->copy(c.interior(), t.interior());
            };
    } else if (op == OpKind::concat && y.n) {
        a = filled(y);
        c = zeros(y);
        if (phase == Phase::forward || phase == Phase::backward)
            run = [&] { k.eltwise->copy(a.interior(), c.interior()); };
    } else if (kind && kind->float_labels() && x.n) {  // the regression losses: mse's kernel
        a = filled(x);
        b = filled(x);
        c = zeros(x);
        if (phase == Phase::forward)
            run = [&] { k.loss->regression(kind->regression, a.interior(), b.interior(), 1.0f, c.interior()); };
    } else if (kind && kind->loss && x.n) {
        a = filled(x);
        c = zeros(x);
        const Dims ld{x.n, 1, x.space};
        labels.assign(static_cast<std::size_t>(ld.elements()), 0);
        if (phase == Phase::forward)
            run = [&, ld] {
                const LabelView lv = dense_view<const std::int32_t>(labels.data(), ld);
                k.loss->cross_entropy(a.interior(), lv, 1.0f, c.interior());
            };
    } else if (op == OpKind::input && x.n) {
        // Made on the host, then (on a GPU) sent to the device, as training does.
        a = Tensor(x);
        b = zeros(x);
        if (phase == Phase::forward)
            run = [&] {
                data.inputs(input, 0, Index::filled(x.rank(), 0), a.interior());
                mem.upload(a.data(), b.data(), a.size());
            };
    } else if (parsed->kernel == scheduler::sgd_kernel && !field("params").empty()) {
        const std::int64_t n = field("params")[0];
        p1 = constant(mem, vector_of(n), 0.5f);  // the weights, and their gradient
        p2 = zeros(vector_of(n));                // the momentum
        run = [&, n] { k.eltwise->sgd(p1.data(), p2.data(), p1.data(), n, 1e-9f, 0.9f, 0.0f); };
    } else if (parsed->kernel == scheduler::adam_kernel && !field("params").empty()) {
        const std::int64_t n = field("params")[0];
        p1 = constant(mem, vector_of(n), 0.5f);  // the weights, and their gradient
        p2 = zeros(vector_of(n));                // the first moments
        a = zeros(vector_of(n));                 // the second moments
        const AdamStep step = adam_step(false, 1e-9, 0.9, 0.999, 1e-8, 0.0, 1);
        run = [&, n, step] { k.eltwise->adam(p1.data(), p2.data(), a.data(), p1.data(), n, step); };
    }
    if (!run) {
        why = "no kernel of that name and shape";
        return std::nullopt;
    }
    return median_seconds(run, runs, mem, mem.host() ? 1 : 8);
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
    Trainer trainer(net, kernels, config, scheduler::make_plan(net, schedule, batch, comm.rank(), comm.size()), &comm);
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
