// bench_step: one training step (forward, backward, SGD) through dsl's Trainer with cpu_kernels(), against the
// same network written as a plain loop over oneDNN primitives; prints ms per step, the interpreter's
// overhead, and where each one's step time goes by kernel kind.
#include "common.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/scheduler/pipeline.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <optional>

namespace {

using namespace dsl;
using namespace dsl::bench;
using dnnl::memory;
using frontend::Layer;
using frontend::OpKind;

// The network's data made once and copied into the input tile on every step, as a loader would: the
// synthetic generator costs a hash and a sine per element, which is no part of a training step.
class CachedData final : public backend::DataSource {
public:
    CachedData(const frontend::Network& net, KernelTimes& times)
        : times_(times), inner_(backend::make_data_source(net, 0, "", "", error_)) {}

    void inputs(const Layer& input, std::int64_t first, const backend::Index& at, backend::View t) override {
        const auto start = Clock::now();
        auto& c = inputs_[input.name];
        if (c.empty()) {
            c.resize(static_cast<std::size_t>(t.dims.elements()));
            inner_->inputs(input, first, at, backend::dense_view(c.data(), t.dims));
        }
        const float* p = c.data();
        const std::int64_t row = backend::row_length(t.dims);
        backend::for_each_row(t, [&](std::int64_t, std::int64_t, const backend::Index&, float* r) {
            std::memcpy(r, p, static_cast<std::size_t>(row) * sizeof(float));
            p += row;
        });
        times_.add("data (copy into the input tile)", seconds_since(start));
    }
    void labels(const Layer& label, std::int64_t first, const backend::Index& at,
                backend::BasicView<std::int32_t> t) override {
        const auto start = Clock::now();
        auto& c = labels_[label.name];
        if (c.empty()) {
            c.resize(static_cast<std::size_t>(t.dims.elements()));
            inner_->labels(label, first, at, backend::dense_view(c.data(), t.dims));
        }
        std::copy(c.begin(), c.end(), t.base);  // label tiles are dense
        times_.add("data (copy into the input tile)", seconds_since(start));
    }

private:
    KernelTimes& times_;
    std::string error_;
    std::unique_ptr<backend::DataSource> inner_;
    std::map<std::string, std::vector<float>> inputs_;
    std::map<std::string, std::vector<std::int32_t>> labels_;
};

// The same network as a plain program over oneDNN primitives, every primitive and buffer created once:
// activations stay in the layouts the primitives choose (blocked), with a reorder only where two disagree.
// Supports chains of conv, batchnorm, relu and a pixel cross-entropy loss (the mesh-like stacks).
class Baseline {
public:
    Baseline(const frontend::Network& net, std::int64_t batch, const CachedData* /*unused*/ = nullptr)
        : net_(net), batch_(batch) {}

    // Empty when the network is supported; otherwise why not.
    std::string build();

    double step(KernelTimes* times);  // forward, backward, SGD; returns the mean loss

private:
    struct Step {
        std::string kind;
        std::function<void()> run;
    };
    using Steps = std::vector<Step>;
    struct Layering;
    std::string input(const Layering& b);
    std::string label(const Layering& b);
    std::string conv(const Layering& b);
    std::string batchnorm(const Layering& b);
    std::string relu(const Layering& b);
    std::string pixel_cross_entropy(const Layering& b);
    struct Param {
        memory w, dw;
        std::vector<float> m;
    };

    memory::dims dims_of(const Layer& l) const {
        const auto& d = l.shape.dims;
        return {batch_, d[0], d[1], d[2]};
    }

    // `m` in layout `want`: m itself, or a new buffer that a reorder (added to `steps`) fills from it.
    memory to(const memory& m, const memory::desc& want, Steps& steps) {
        if (m.get_desc() == want) return m;
        memory out(want, engine_);
        dnnl::reorder r(m, out);
        steps.push_back({"reorder", [this, r, src = memory(m), out]() mutable { r.execute(stream_, src, out); }});
        return out;
    }
    // What a primitive producing layout `produced` should write so that `target` ends up with the result:
    // target itself, or a new buffer that a reorder (added to `post`) copies into target.
    memory into(const memory& target, const memory::desc& produced, Steps& post) {
        if (target.get_desc() == produced) return target;
        memory tmp(produced, engine_);
        dnnl::reorder r(tmp, target);
        post.push_back({"reorder", [this, r, tmp, dst = memory(target)]() mutable { r.execute(stream_, tmp, dst); }});
        return tmp;
    }
    void prim(Steps& steps, const std::string& kind, dnnl::primitive p, std::unordered_map<int, memory> args) {
        steps.push_back({kind, [this, p, args]() { p.execute(stream_, args); }});
    }
    memory param(const memory::desc& d, float scale, float value, std::uint32_t seed) {
        memory w(d, engine_), dw(d, engine_);
        auto* p = static_cast<float*>(w.get_data_handle());
        const std::size_t count = d.get_size() / sizeof(float);
        std::uint32_t s = seed * 2654435761u + 1;
        for (std::size_t i = 0; i < count; ++i) {
            s = s * 1664525u + 1013904223u;
            p[i] = value + scale * (static_cast<float>(s >> 8) * 0x1.0p-24f * 2.0f - 1.0f);
        }
        std::memset(dw.get_data_handle(), 0, d.get_size());
        params_.push_back({w, dw, std::vector<float>(count, 0.0f)});
        return w;
    }

    const frontend::Network& net_;
    std::int64_t batch_;
    dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream_{engine_};
    std::vector<memory> y_, dy_;
    std::vector<Steps> forward_, backward_;  // per layer
    std::vector<Param> params_;
    std::vector<float> input_stage_;       // the data, copied into the input on every step
    std::vector<std::int32_t> labels_;     // dense [N, H, W]
    std::vector<float> logits_, dlogits_;  // plain NCHW copies for the loss loop
    double loss_ = 0.0;
    float lr_ = 0.01f, momentum_ = 0.9f, decay_ = 0.0001f;
};

// A layer's part of the baseline: its forward steps, and its backward's (reorders before and after the main
// primitives).
struct Baseline::Layering {
    std::size_t i, in;  // the layer, and its first input
    const Layer& l;
    bool input_is_data;
    const backend::SyntheticData& data;
    Steps &fwd, &pre, &main, &post;
};

std::string Baseline::build() {
    // The kinds the baseline writes by hand, a builder each.
    using Builder = std::string (Baseline::*)(const Layering&);
    static const std::vector<std::pair<OpKind, Builder>> builders{
        {OpKind::input, &Baseline::input}, {OpKind::label, &Baseline::label},
        {OpKind::conv, &Baseline::conv},   {OpKind::batchnorm, &Baseline::batchnorm},
        {OpKind::relu, &Baseline::relu},   {OpKind::pixel_cross_entropy, &Baseline::pixel_cross_entropy},
    };
    const auto& layers = net_.layers;
    std::vector<int> readers(layers.size(), 0);
    for (const Layer& l : layers)
        for (int in : l.inputs) ++readers[static_cast<std::size_t>(in)];
    y_.resize(layers.size());
    dy_.resize(layers.size());
    forward_.resize(layers.size());
    backward_.resize(layers.size());
    lr_ = static_cast<float>(net_.train.lr.value_or(0.01));
    momentum_ = static_cast<float>(net_.train.momentum.value_or(0.9));
    decay_ = static_cast<float>(net_.train.weight_decay.value_or(0.0));
    const auto data = backend::synthetic_for(net_, 0);

    for (std::size_t i = 0; i < layers.size(); ++i) {
        const Layer& l = layers[i];
        for (int in : l.inputs)
            if (readers[static_cast<std::size_t>(in)] > 1) return "a tensor with several readers: " + l.name;
        Steps pre, main, post;  // this layer's backward, run in this order
        const auto in = l.inputs.empty() ? std::size_t{0} : static_cast<std::size_t>(l.inputs[0]);
        const bool input_is_data = !l.inputs.empty() && layers[in].op == OpKind::input;
        const auto builder =
            std::find_if(builders.begin(), builders.end(), [&](const auto& b) { return b.first == l.op; });
        if (builder == builders.end())
            return std::string("layer kind '") + frontend::op_name(l.op) + "' (" + l.name + ")";
        const std::string unsupported =
            (this->*builder->second)(Layering{i, in, l, input_is_data, data, forward_[i], pre, main, post});
        if (!unsupported.empty()) return unsupported;
        backward_[i].insert(backward_[i].end(), pre.begin(), pre.end());
        backward_[i].insert(backward_[i].end(), main.begin(), main.end());
        backward_[i].insert(backward_[i].end(), post.begin(), post.end());
    }
    return {};
}

// The data, made once and copied into the input tile every step.
std::string Baseline::input(const Layering& b) {
    const auto i = b.i;
    const auto& l = b.l;
    const auto& data = b.data;
    auto& fwd = b.fwd;
    const auto f32 = memory::data_type::f32;
    const auto d = dims_of(l);
    y_[i] = memory({d, f32, memory::format_tag::nchw}, engine_);
    input_stage_.resize(static_cast<std::size_t>(d[0] * d[1] * d[2] * d[3]));
    data.fill_inputs(0, 0, backend::Index{0, 0},
                     backend::dense_view(input_stage_.data(), Dims{d[0], d[1], {d[2], d[3]}}));
    fwd.push_back({"data (copy into the input tile)", [this, i] {
                       std::memcpy(y_[i].get_data_handle(), input_stage_.data(), input_stage_.size() * sizeof(float));
                   }});
    return {};
}

// A label per pixel, made once.
std::string Baseline::label(const Layering& b) {
    const auto& l = b.l;
    const auto& data = b.data;
    const auto& d = l.shape.dims;
    if (d.size() != 2) return "a label that is not a map of pixels: " + l.name;
    labels_.resize(static_cast<std::size_t>(batch_ * d[0] * d[1]));
    data.fill_labels(0, backend::Index{0, 0}, backend::dense_view(labels_.data(), Dims{batch_, 1, {d[0], d[1]}}));
    return {};
}

// A convolution: forward, backward weights and (unless its input is the data) backward data.
std::string Baseline::conv(const Layering& b) {
    const auto i = b.i;
    const auto in = b.in;
    const auto& l = b.l;
    const auto input_is_data = b.input_is_data;
    auto& fwd = b.fwd;
    auto& pre = b.pre;
    auto& main = b.main;
    auto& post = b.post;
    const auto& layers = net_.layers;
    const auto f32 = memory::data_type::f32;
    const memory::dims x = dims_of(layers[in]), y = dims_of(l);
    const memory::dims w{l.filters, x[1], l.kernel[0], l.kernel[1]};
    const memory::dims strides{l.stride[0], l.stride[1]}, dil{l.dilation[0] - 1, l.dilation[1] - 1};
    const memory::dims pad_l{l.pad[0], l.pad[1]};
    memory::dims pad_r(2);
    for (int d = 0; d < 2; ++d)
        pad_r[static_cast<std::size_t>(d)] = (y[2 + d] - 1) * strides[static_cast<std::size_t>(d)] +
                                             (dil[static_cast<std::size_t>(d)] + 1) * (w[2 + d] - 1) + 1 - x[2 + d] -
                                             pad_l[static_cast<std::size_t>(d)];
    const auto any = memory::format_tag::any;
    const memory::desc src(x, f32, any), wd(w, f32, any), dst(y, f32, any),
        bias({l.filters}, f32, memory::format_tag::x);
    const auto alg = dnnl::algorithm::convolution_direct;
    const auto fd = l.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wd, bias, dst,
                                                             strides, dil, pad_l, pad_r)
                           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, wd, dst,
                                                             strides, dil, pad_l, pad_r);
    const dnnl::convolution_forward::primitive_desc pd(fd, engine_);
    const memory xs = to(y_[in], pd.src_desc(), fwd);
    const float fan_in = static_cast<float>(x[1] * w[2] * w[3]);
    const memory wm = param(pd.weights_desc(), std::sqrt(3.0f / fan_in), 0.0f, static_cast<std::uint32_t>(i));
    const memory& dwm = params_.back().dw;
    std::optional<memory> bm, dbm;
    if (l.bias) bm = param(bias, 0.01f, 0.0f, static_cast<std::uint32_t>(i + 1000)), dbm = params_.back().dw;
    y_[i] = memory(pd.dst_desc(), engine_);
    dy_[i] = memory(pd.dst_desc(), engine_);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xs}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, y_[i]}};
    if (bm) args[DNNL_ARG_BIAS] = *bm;
    prim(fwd, "conv.forward", dnnl::convolution_forward(pd), args);

    const auto bwd = l.bias
                         ? dnnl::convolution_backward_weights::desc(alg, src, wd, bias, dst, strides, dil, pad_l, pad_r)
                         : dnnl::convolution_backward_weights::desc(alg, src, wd, dst, strides, dil, pad_l, pad_r);
    const dnnl::convolution_backward_weights::primitive_desc wpd(bwd, engine_, pd);
    std::unordered_map<int, memory> wargs{{DNNL_ARG_SRC, to(xs, wpd.src_desc(), pre)},
                                          {DNNL_ARG_DIFF_DST, to(dy_[i], wpd.diff_dst_desc(), pre)},
                                          {DNNL_ARG_DIFF_WEIGHTS, into(dwm, wpd.diff_weights_desc(), post)}};
    if (dbm) wargs[DNNL_ARG_DIFF_BIAS] = *dbm;
    prim(main, "conv.backward_weights", dnnl::convolution_backward_weights(wpd), wargs);
    if (!input_is_data) {
        const dnnl::convolution_backward_data::desc dd(alg, src, wd, dst, strides, dil, pad_l, pad_r);
        const dnnl::convolution_backward_data::primitive_desc dpd(dd, engine_, pd);
        prim(main, "conv.backward_data", dnnl::convolution_backward_data(dpd),
             {{DNNL_ARG_DIFF_DST, to(dy_[i], dpd.diff_dst_desc(), pre)},
              {DNNL_ARG_WEIGHTS, to(wm, dpd.weights_desc(), pre)},
              {DNNL_ARG_DIFF_SRC, into(dy_[in], dpd.diff_src_desc(), post)}});
    }
    return {};
}

// Batch norm with scale and shift, statistics over the mini-batch.
std::string Baseline::batchnorm(const Layering& b) {
    const auto i = b.i;
    const auto in = b.in;
    const auto& l = b.l;
    const auto input_is_data = b.input_is_data;
    auto& fwd = b.fwd;
    auto& pre = b.pre;
    auto& main = b.main;
    auto& post = b.post;
    const memory::desc d = y_[in].get_desc();
    const auto flags = dnnl::normalization_flags::use_scale_shift;
    const auto eps = static_cast<float>(l.eps);
    const dnnl::batch_normalization_forward::primitive_desc pd({dnnl::prop_kind::forward_training, d, eps, flags},
                                                               engine_);
    // Scale 1, shift 0 (the layout is [2, C]: the first C are the scales).
    const memory ss = param(pd.weights_desc(), 0.0f, 0.0f, 0);
    std::fill_n(static_cast<float*>(ss.get_data_handle()), l.shape.dims[0], 1.0f);
    const memory& dss = params_.back().dw;
    const memory mean(pd.mean_desc(), engine_), var(pd.variance_desc(), engine_);
    y_[i] = memory(pd.dst_desc(), engine_);
    dy_[i] = memory(pd.dst_desc(), engine_);
    prim(fwd, "batchnorm.forward", dnnl::batch_normalization_forward(pd),
         {{DNNL_ARG_SRC, y_[in]},
          {DNNL_ARG_SCALE_SHIFT, ss},
          {DNNL_ARG_MEAN, mean},
          {DNNL_ARG_VARIANCE, var},
          {DNNL_ARG_DST, y_[i]}});
    const dnnl::batch_normalization_backward::primitive_desc bpd(
        {dnnl::prop_kind::backward, pd.dst_desc(), d, eps, flags}, engine_, pd);
    // The data's gradient is computed even when the input is the data: oneDNN has no flag to skip it.
    const memory dx = input_is_data ? memory(d, engine_) : dy_[in];
    prim(main, "batchnorm.backward", dnnl::batch_normalization_backward(bpd),
         {{DNNL_ARG_SRC, y_[in]},
          {DNNL_ARG_MEAN, mean},
          {DNNL_ARG_VARIANCE, var},
          {DNNL_ARG_SCALE_SHIFT, ss},
          {DNNL_ARG_DIFF_DST, to(dy_[i], bpd.diff_dst_desc(), pre)},
          {DNNL_ARG_DIFF_SRC, into(dx, bpd.diff_src_desc(), post)},
          {DNNL_ARG_DIFF_SCALE_SHIFT, into(dss, bpd.diff_weights_desc(), post)}});
    return {};
}

// ReLU, into a buffer of its own.
std::string Baseline::relu(const Layering& b) {
    const auto i = b.i;
    const auto in = b.in;
    const auto input_is_data = b.input_is_data;
    auto& fwd = b.fwd;
    auto& pre = b.pre;
    auto& main = b.main;
    auto& post = b.post;
    const memory::desc d = y_[in].get_desc();
    const dnnl::eltwise_forward::primitive_desc pd(
        {dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, d, 0.0f, 0.0f}, engine_);
    y_[i] = memory(pd.dst_desc(), engine_);
    dy_[i] = memory(pd.dst_desc(), engine_);
    prim(fwd, "activation.forward", dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, y_[in]}, {DNNL_ARG_DST, y_[i]}});
    if (input_is_data) return {};
    const dnnl::eltwise_backward::primitive_desc bpd({dnnl::algorithm::eltwise_relu, d, d, 0.0f, 0.0f}, engine_, pd);
    prim(main, "activation.backward", dnnl::eltwise_backward(bpd),
         {{DNNL_ARG_SRC, y_[in]},
          {DNNL_ARG_DIFF_DST, to(dy_[i], bpd.diff_dst_desc(), pre)},
          {DNNL_ARG_DIFF_SRC, into(dy_[in], bpd.diff_src_desc(), post)}});
    return {};
}

// Softmax cross-entropy per pixel, a plain loop over NCHW copies of the logits and their gradient.
std::string Baseline::pixel_cross_entropy(const Layering& b) {
    const auto in = b.in;
    auto& fwd = b.fwd;
    auto& main = b.main;
    const auto& layers = net_.layers;
    const auto f32 = memory::data_type::f32;
    const memory::dims d = dims_of(layers[in]);
    const memory::desc plain(d, f32, memory::format_tag::nchw);
    const memory lp = to(y_[in], plain, fwd);
    const memory dlp = into(dy_[in], plain, main);
    const double count = static_cast<double>(d[0] * d[2] * d[3]);
    fwd.push_back({"loss.cross_entropy", [this, lp, dlp, d, count] {
                       const auto* x = static_cast<const float*>(lp.get_data_handle());
                       auto* g = static_cast<float*>(dlp.get_data_handle());
                       const std::int64_t k = d[1], plane = d[2] * d[3];
                       const auto scale = static_cast<float>(1.0 / count);
                       double sum = 0.0;
                       for (std::int64_t n = 0; n < d[0]; ++n)
                           for (std::int64_t p = 0; p < plane; ++p) {
                               const float* xp = x + n * k * plane + p;
                               float* gp = g + n * k * plane + p;
                               float mx = xp[0];
                               for (std::int64_t c = 1; c < k; ++c) mx = std::max(mx, xp[c * plane]);
                               double z = 0.0;
                               for (std::int64_t c = 0; c < k; ++c) z += std::exp(xp[c * plane] - mx);
                               const std::int32_t label = labels_[static_cast<std::size_t>(n * plane + p)];
                               sum += std::log(z) - (xp[label * plane] - mx);
                               for (std::int64_t c = 0; c < k; ++c)
                                   gp[c * plane] = static_cast<float>(
                                       (std::exp(xp[c * plane] - mx) / z - (c == label ? 1.0 : 0.0)) * scale);
                           }
                       loss_ = sum / count;
                   }});
    return {};
}

double Baseline::step(KernelTimes* times) {
    auto run = [&](Step& s) {
        if (!times) return s.run();
        const auto t0 = Clock::now();
        s.run();
        stream_.wait();
        times->add(s.kind, seconds_since(t0));
    };
    for (auto& steps : forward_)
        for (Step& s : steps) run(s);
    for (auto it = backward_.rbegin(); it != backward_.rend(); ++it)
        for (Step& s : *it) run(s);
    stream_.wait();
    const auto t0 = Clock::now();
    for (Param& p : params_) {
        auto* w = static_cast<float*>(p.w.get_data_handle());
        const auto* g = static_cast<const float*>(p.dw.get_data_handle());
        float* m = p.m.data();
        const std::size_t count = p.m.size();
        for (std::size_t j = 0; j < count; ++j) {
            m[j] = momentum_ * m[j] + g[j] + decay_ * w[j];
            w[j] -= lr_ * m[j];
        }
    }
    if (times) times->add("eltwise.sgd", seconds_since(t0));
    return loss_;
}

struct Case {
    std::string net;
    std::int64_t batch;
};

void print_breakdown(const char* title, const KernelTimes& t, int steps, double step_ms) {
    std::cout << fmt::format("  {} (ms per step, one profiled run of {} steps; each call timed)\n", title, steps);
    std::vector<std::pair<std::string, KernelTimes::Entry>> rows(t.entries().begin(), t.entries().end());
    std::sort(rows.begin(), rows.end(), [](auto& lhs, auto& rhs) { return lhs.second.seconds > rhs.second.seconds; });
    for (const auto& [name, e] : rows)
        std::cout << fmt::format("    {:<34} {:>9.2f} ms {:>5.1f}%  {:>4} calls\n", name, 1e3 * e.seconds / steps,
                                 100.0 * e.seconds / steps / (step_ms / 1e3), e.calls / steps);
    if (step_ms > 0)
        std::cout << fmt::format("    {:<34} {:>9.2f} ms {:>5.1f}%\n", "rest (interpreter, untimed)",
                                 step_ms - 1e3 * t.total() / steps,
                                 100.0 - 100.0 * t.total() / steps / (step_ms / 1e3));
}

void run_case(const Case& c, int warmup, int runs, double seconds) {
    const frontend::Network net = load(c.net);
    std::cout << fmt::format("\n== {}  batch {}  ({:.2f} GFLOP forward per step, {:.2f} M params)\n", c.net, c.batch,
                             static_cast<double>(net.total_flops() * c.batch) / 1e9,
                             static_cast<double>(net.total_params()) / 1e6);
    backend::TrainConfig cfg;
    cfg.batch = c.batch;
    cfg.lr = net.train.lr.value_or(0.01);
    cfg.momentum = net.train.momentum.value_or(0.9);
    cfg.weight_decay = net.train.weight_decay.value_or(0.0);
    KernelTimes dsl_times, data_times;
    dsl_times.detail = env_int("BENCH_DETAIL", 0) != 0;
    CachedData data(net, data_times);
    const scheduler::Plan plan = scheduler::Pipeline().plan(net, {}, cfg.batch, 0, 1);  // one process
    backend::Trainer plain_trainer(net, backend::cpu_kernels(), cfg, plan);
    auto tk = timed(backend::cpu_kernels(), dsl_times);
    backend::Trainer timed_trainer(net, tk->kernels, cfg, plan);

    Baseline base(net, c.batch);
    const std::string unsupported = base.build();
    if (!unsupported.empty()) std::cout << "  (no oneDNN baseline: it does not handle " << unsupported << ")\n";

    for (int i = 0; i < warmup; ++i) {
        plain_trainer.step(data, 0);
        if (unsupported.empty()) base.step(nullptr);
    }
    // Alternated pairs (a dsl step, then a oneDNN step), so that a change in the machine's load hits both alike:
    // at least `runs` of them, and as many as fill `seconds` of dsl's steps, so that a network whose steps take
    // milliseconds is timed over as long as one whose steps take a tenth of a second. The overhead is the
    // median of the pairs' ratios, which a drift in the machine's speed over the run moves less than the ratio
    // of the two medians.
    std::vector<double> dsl_ms, base_ms, ratios;
    double dsl_loss = 0, base_loss = 0, spent_ms = 0;
    constexpr int max_pairs = 1000;
    for (int i = 0; i < runs || (spent_ms < 1e3 * seconds && i < max_pairs); ++i) {
        auto t0 = Clock::now();
        dsl_loss = plain_trainer.step(data, 0);
        dsl_ms.push_back(1e3 * seconds_since(t0));
        spent_ms += dsl_ms.back();
        if (!unsupported.empty()) continue;
        t0 = Clock::now();
        base_loss = base.step(nullptr);
        base_ms.push_back(1e3 * seconds_since(t0));
        ratios.push_back(dsl_ms.back() / base_ms.back());
    }
    const auto pairs = dsl_ms.size();
    const double d = median(dsl_ms);
    std::cout << fmt::format(
        "  dsl Trainer (cpu_kernels)   {:>9.2f} ms/step  (median of {}; min {:.2f}, max {:.2f}); "
        "loss {:.4f}\n",
        d, pairs, *std::min_element(dsl_ms.begin(), dsl_ms.end()), *std::max_element(dsl_ms.begin(), dsl_ms.end()),
        dsl_loss);
    if (unsupported.empty()) {
        std::cout << fmt::format(
            "  plain oneDNN loop           {:>9.2f} ms/step  (median of {}; min {:.2f}, max {:.2f}); "
            "loss {:.4f}\n",
            median(base_ms), pairs, *std::min_element(base_ms.begin(), base_ms.end()),
            *std::max_element(base_ms.begin(), base_ms.end()), base_loss);
        std::cout << fmt::format(
            "  interpreter overhead        {:>+9.1f} %  (dsl / oneDNN - 1, median of the {} pairs; quartiles {:+.1f} "
            "and {:+.1f} %; target <= 5%)\n",
            100.0 * (median(ratios) - 1.0), pairs, 100.0 * (quantile(ratios, 0.25) - 1.0),
            100.0 * (quantile(ratios, 0.75) - 1.0));
    }

    // Profiled runs: every kernel call timed, after the timing ones so they do not disturb them.
    const int profiled = std::max(1, runs / 2);
    timed_trainer.step(data, 0);
    dsl_times.clear(), data_times.clear();
    auto t0 = Clock::now();
    for (int i = 0; i < profiled; ++i) timed_trainer.step(data, 0);
    const double timed_ms = 1e3 * seconds_since(t0) / profiled;
    for (const auto& [name, e] : data_times.entries())
        for (std::int64_t k = 0; k < e.calls; ++k) dsl_times.add(name, e.seconds / static_cast<double>(e.calls));
    print_breakdown(fmt::format("dsl, by kernel method; {:.2f} ms per profiled step", timed_ms).c_str(), dsl_times,
                    profiled, timed_ms);
    if (dsl_times.detail) {
        std::vector<std::pair<std::string, KernelTimes::Entry>> rows(dsl_times.details().begin(),
                                                                     dsl_times.details().end());
        std::sort(rows.begin(), rows.end(),
                  [](auto& lhs, auto& rhs) { return lhs.second.seconds > rhs.second.seconds; });
        rows.resize(std::min<std::size_t>(rows.size(), 15));
        std::cout << "  dsl, the 15 costliest (method, tensor dims NxCxHxW), ms per step:\n";
        for (const auto& [name, e] : rows)
            std::cout << fmt::format("    {:<44} {:>9.2f} ms  {:>3} calls\n", name, 1e3 * e.seconds / profiled,
                                     e.calls / profiled);
    }
    if (unsupported.empty()) {
        KernelTimes base_times;
        t0 = Clock::now();
        for (int i = 0; i < profiled; ++i) base.step(&base_times);
        const double base_timed_ms = 1e3 * seconds_since(t0) / profiled;
        print_breakdown(fmt::format("oneDNN loop, by primitive; {:.2f} ms per profiled step", base_timed_ms).c_str(),
                        base_times, profiled, base_timed_ms);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<Case> cases;
    for (int i = 1; i + 1 < argc; i += 2) cases.push_back({argv[i], std::atoll(argv[i + 1])});
    if (argc > 1 && argc % 2 == 0) {
        std::cerr << "usage: bench_step [NET BATCH]...   (env BENCH_RUNS, BENCH_SECONDS, BENCH_WARMUP, BENCH_DETAIL)\n";
        return 2;
    }
    if (cases.empty())
        cases = {{"samples/mesh_tiny.net", 8}, {"bench/mesh_stack_256.net", 2}, {"bench/mesh_stack_512.net", 1}};
    const int runs = static_cast<int>(env_int("BENCH_RUNS", 7)), warmup = static_cast<int>(env_int("BENCH_WARMUP", 2));
    const auto seconds = static_cast<double>(env_int("BENCH_SECONDS", 2));
    std::cout << fmt::format(
        "bench_step: {}; {} OpenMP threads; load average {}; {} warm-up steps, then at least {} timed pairs and {} s "
        "of dsl's steps each\n",
        cpu_model(), omp_threads(), load_average(), warmup, runs, seconds);
    for (const Case& c : cases) run_case(c, warmup, runs, seconds);
    std::cout << fmt::format("\nload average at the end: {}\n", load_average());
}
