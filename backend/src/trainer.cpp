// The interpreter: allocates each layer's tiles (with the margins its readers need), initializes the
// parameters from the seed, and runs forward, backward and SGD through the kernel interfaces.
#include <dsl/backend/trainer.hpp>

#include "splitmix.hpp"

#include <dsl/frontend/diagnostics.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsl::backend {

using frontend::Layer;
using frontend::OpKind;

namespace {

// Deterministic initialization: every parameter element is a pure function of (seed, layer name, index),
// so that any process can make any part of any parameter without communicating.
std::uint64_t name_hash(const std::string& s) {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

// Uniform in (0, 1).
double uniform(std::uint64_t stream, std::uint64_t i) {
    return (static_cast<double>(splitmix64(stream ^ splitmix64(i)) >> 11) + 0.5) * 0x1.0p-53;
}

double normal(std::uint64_t stream, std::uint64_t i) {
    const double u1 = uniform(stream, 2 * i), u2 = uniform(stream, 2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Activations are [N, C, H, W]; a vector [N, K] is {n, k, 1, 1}; labels [N, H, W] are {n, 1, h, w}.
Dims dims_of(const frontend::Shape& s, std::int64_t batch) {
    const auto& d = s.dims;
    switch (d.size()) {
        case 0: return Dims{batch, 1, 1, 1};
        case 1: return Dims{batch, d[0], 1, 1};
        case 2: return Dims{batch, 1, d[0], d[1]};
        default: return Dims{batch, d[0], d[1], d[2]};
    }
}

bool windowed(OpKind op) { return op == OpKind::conv || op == OpKind::maxpool || op == OpKind::avgpool; }

Window window_of(const Layer& l) {
    Window w;
    w.kernel = l.kernel;
    w.stride = l.stride;
    w.dilation = l.op == OpKind::conv ? l.dilation : frontend::Pair{1, 1};
    return w;
}

// The part of an input's padded buffer that a windowed layer reads: from `pad` before the interior, as far
// as its last output reads.
struct Region {
    std::int64_t y = 0, x = 0;  // offsets into the padded view
    Dims dims;
};

}  // namespace

struct Trainer::Impl {
    struct Slot {
        const Layer* layer = nullptr;
        Tensor y, dy;
        Margins need;  // what its readers need around the interior
        float margin_fill = 0.0f;
        std::vector<std::int32_t> labels;
        int readers = 0;
        bool zero_grad = false;  // the gradient is accumulated, or some of it is never written

        // Parameters: weights (or batch-norm scale) and bias (or shift), their gradients and momenta.
        Tensor w, dw, mw;
        std::vector<float> b, db, mb;
        // Batch norm.
        std::vector<float> mean, inv_std, running_mean, running_var;
    };

    const frontend::Network& net;
    Kernels k;
    TrainConfig config;
    std::vector<Slot> slots;
    std::vector<double> sums_a, sums_b;  // per-channel reductions
    std::vector<float> scratch_values;
    std::vector<float> scratch;  // gradients of tensors with several readers, before they are added

    Impl(const frontend::Network& n, Kernels kernels, TrainConfig c) : net(n), k(kernels), config(c) {
        slots.resize(net.layers.size());
        for (std::size_t i = 0; i < net.layers.size(); ++i) slots[i].layer = &net.layers[i];
        plan_margins();
        allocate();
        initialize();
    }

    Slot& input_of(const Layer& l, std::size_t i = 0) { return slots[static_cast<std::size_t>(l.inputs[i])]; }

    Region region(const Layer& l) {
        const Slot& in = input_of(l);
        const Window w = window_of(l);
        const Dims out = dims_of(l.shape, config.batch);
        const Dims d = in.y.dims();
        return Region{in.need.top - l.pad[0], in.need.left - l.pad[1],
                      Dims{d.n, d.c, w.input_extent(0, out.h), w.input_extent(1, out.w)}};
    }

    void plan_margins() {
        for (const Layer& l : net.layers) {
            for (int in : l.inputs) ++slots[static_cast<std::size_t>(in)].readers;
            if (!windowed(l.op)) continue;
            Slot& in = input_of(l);
            const Dims d = dims_of(in.layer->shape, config.batch);
            const Dims out = dims_of(l.shape, config.batch);
            const Window w = window_of(l);
            in.need.top = std::max(in.need.top, l.pad[0]);
            in.need.left = std::max(in.need.left, l.pad[1]);
            in.need.bottom = std::max(in.need.bottom, w.input_extent(0, out.h) - l.pad[0] - d.h);
            in.need.right = std::max(in.need.right, w.input_extent(1, out.w) - l.pad[1] - d.w);
        }
    }

    void allocate() {
        for (Slot& s : slots) {
            const Layer& l = *s.layer;
            const Dims d = dims_of(l.shape, config.batch);
            if (l.op == OpKind::label) {
                s.labels.assign(static_cast<std::size_t>(d.elements()), 0);
                continue;
            }
            s.y = Tensor(d, s.need);
            if (l.op != OpKind::input) s.dy = Tensor(d, s.need);
        }
        // A gradient read by several layers is summed; one whose reader covers only part of it (a strided
        // window that never reaches the last rows) must be zero where it is not written.
        for (const Layer& l : net.layers) {
            for (int in : l.inputs) {
                Slot& s = slots[static_cast<std::size_t>(in)];
                if (s.readers > 1) s.zero_grad = true;
                if (windowed(l.op)) {
                    const Region r = region(l);
                    const Margins& m = s.need;
                    if (r.y > 0 || r.x > 0 || r.y + r.dims.h < m.top + s.y.dims().h ||
                        r.x + r.dims.w < m.left + s.y.dims().w)
                        s.zero_grad = true;
                }
            }
        }
    }

    void initialize() {
        for (Slot& s : slots) {
            const Layer& l = *s.layer;
            const std::uint64_t stream = splitmix64(config.seed) ^ name_hash(l.name);
            if (l.op == OpKind::conv || l.op == OpKind::fc) {
                const Dims in = dims_of(input_of(l).layer->shape, 1);
                const Dims wd = l.op == OpKind::conv ? Dims{l.filters, in.c, l.kernel[0], l.kernel[1]}
                                                     : Dims{l.filters, in.c * in.h * in.w, 1, 1};
                s.w = Tensor(wd);
                s.dw = Tensor(wd);
                s.mw = Tensor(wd);
                const double fan_in = static_cast<double>(wd.c * wd.h * wd.w);
                // torchvision's ResNet: Kaiming normal, fan out, for convolutions; PyTorch's default
                // (uniform, +-1/sqrt(fan in)) for fully connected layers and every bias.
                const double std_out = std::sqrt(2.0 / static_cast<double>(wd.n * wd.h * wd.w));
                const double bound = 1.0 / std::sqrt(fan_in);
                for (std::int64_t i = 0; i < s.w.size(); ++i)
                    s.w.data()[i] = static_cast<float>(l.op == OpKind::conv
                                                           ? std_out * normal(stream, static_cast<std::uint64_t>(i))
                                                           : bound * (2.0 * uniform(stream, static_cast<std::uint64_t>(i)) - 1.0));
                if (l.bias) {
                    s.b.resize(static_cast<std::size_t>(l.filters));
                    for (std::size_t i = 0; i < s.b.size(); ++i)
                        s.b[i] = static_cast<float>(bound * (2.0 * uniform(~stream, i) - 1.0));
                    s.db.assign(s.b.size(), 0.0f);
                    s.mb.assign(s.b.size(), 0.0f);
                }
            } else if (l.op == OpKind::batchnorm) {
                const auto c = static_cast<std::size_t>(l.shape.dims[0]);
                s.w = Tensor(Dims{1, l.shape.dims[0], 1, 1});
                s.w.fill(1.0f);
                s.dw = Tensor(s.w.dims());
                s.mw = Tensor(s.w.dims());
                s.b.assign(c, 0.0f);
                s.db.assign(c, 0.0f);
                s.mb.assign(c, 0.0f);
                s.mean.assign(c, 0.0f);
                s.inv_std.assign(c, 1.0f);
                s.running_mean.assign(c, 0.0f);
                s.running_var.assign(c, 1.0f);
            }
        }
    }

    // Margins hold padding: zero for most readers, -infinity for max pooling.
    void set_margins(Slot& s, float v) {
        if (s.margin_fill == v) return;
        s.y.fill_margins(v);
        s.margin_fill = v;
    }

    ConstView windowed_input(const Layer& l) {
        Slot& in = input_of(l);
        set_margins(in, l.op == OpKind::maxpool ? -std::numeric_limits<float>::infinity() : 0.0f);
        const Region r = region(l);
        return in.y.padded().sub(0, 0, r.y, r.x, r.dims);
    }

    double forward(DataSource& data, std::int64_t first, bool training) {
        double loss = 0.0;
        for (Slot& s : slots) {
            const Layer& l = *s.layer;
            switch (l.op) {
                case OpKind::input: data.inputs(l, first, 0, 0, s.y.interior()); break;
                case OpKind::label: {
                    const Dims d = dims_of(l.shape, config.batch);
                    data.labels(l, first, 0, 0, BasicView<std::int32_t>{s.labels.data(), d, d.c * d.h * d.w,
                                                                        d.h * d.w, d.w});
                    break;
                }
                case OpKind::conv:
                    k.conv->forward(windowed_input(l), s.w.interior(), l.bias ? s.b.data() : nullptr, s.y.interior(),
                                    window_of(l));
                    break;
                case OpKind::maxpool:
                case OpKind::avgpool:
                    k.pool->forward(l.op == OpKind::maxpool ? PoolKind::max : PoolKind::average, windowed_input(l),
                                    s.y.interior(), window_of(l));
                    break;
                case OpKind::batchnorm: batchnorm_forward(s, training); break;
                case OpKind::relu: k.activation->forward(input_of(l).y.interior(), 0.0f, s.y.interior()); break;
                case OpKind::leaky_relu:
                    k.activation->forward(input_of(l).y.interior(), static_cast<float>(l.slope), s.y.interior());
                    break;
                case OpKind::global_avgpool: {
                    const ConstView x = input_of(l).y.interior();
                    sums_a.assign(static_cast<std::size_t>(x.dims.n * x.dims.c), 0.0);
                    k.pool->global_sum(x, sums_a.data());
                    const View y = s.y.interior();
                    const double area = static_cast<double>(x.dims.h * x.dims.w);
                    for (std::int64_t n = 0; n < x.dims.n; ++n)
                        for (std::int64_t c = 0; c < x.dims.c; ++c)
                            y.at(n, c, 0, 0) = static_cast<float>(sums_a[static_cast<std::size_t>(n * x.dims.c + c)] / area);
                    break;
                }
                case OpKind::fc:
                    k.fc->forward(input_of(l).y.interior(), s.w.interior(), l.bias ? s.b.data() : nullptr,
                                  s.y.interior());
                    break;
                case OpKind::add: {
                    std::vector<ConstView> xs;
                    for (std::size_t i = 0; i < l.inputs.size(); ++i) xs.push_back(input_of(l, i).y.interior());
                    k.eltwise->add(xs, s.y.interior());
                    break;
                }
                case OpKind::concat: {
                    std::int64_t c0 = 0;
                    for (std::size_t i = 0; i < l.inputs.size(); ++i) {
                        const ConstView x = input_of(l, i).y.interior();
                        k.eltwise->copy(x, s.y.interior().sub(0, c0, 0, 0, x.dims));
                        c0 += x.dims.c;
                    }
                    break;
                }
                case OpKind::softmax_cross_entropy:
                case OpKind::pixel_cross_entropy: loss += loss_layer(s, training); break;
            }
        }
        return loss;
    }

    double loss_layer(Slot& s, bool training) {
        const Layer& l = *s.layer;
        Slot& logits = input_of(l, 0);
        const Slot& labels = input_of(l, 1);
        const Dims ld = dims_of(labels.layer->shape, config.batch);
        const LabelView lv{labels.labels.data(), ld, ld.c * ld.h * ld.w, ld.h * ld.w, ld.w};
        const double count = static_cast<double>(ld.n * ld.h * ld.w);
        View grad;
        if (training) grad = logits.dy.interior();  // the loss is the only reader of its logits
        DSL_INTERNAL_CHECK(!training || logits.readers == 1, "a loss's logits feed another layer");
        return k.loss->cross_entropy(logits.y.interior(), lv, static_cast<float>(1.0 / count), grad) / count;
    }

    void batchnorm_forward(Slot& s, bool training) {
        const Layer& l = *s.layer;
        const ConstView x = input_of(l).y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        if (training) {
            sums_a.assign(channels, 0.0);
            sums_b.assign(channels, 0.0);
            k.batchnorm->statistics(x, sums_a.data(), sums_b.data());
            const double count = static_cast<double>(x.dims.n * x.dims.h * x.dims.w);
            for (std::size_t c = 0; c < channels; ++c) {
                const double mean = sums_a[c] / count;
                const double var = std::max(0.0, sums_b[c] / count - mean * mean);
                s.mean[c] = static_cast<float>(mean);
                s.inv_std[c] = static_cast<float>(1.0 / std::sqrt(var + l.eps));
                // PyTorch's running variance is unbiased.
                const double unbiased = count > 1 ? var * count / (count - 1) : var;
                s.running_mean[c] = static_cast<float>((1 - l.momentum) * s.running_mean[c] + l.momentum * mean);
                s.running_var[c] = static_cast<float>((1 - l.momentum) * s.running_var[c] + l.momentum * unbiased);
            }
        } else {
            for (std::size_t c = 0; c < channels; ++c) {
                s.mean[c] = s.running_mean[c];
                s.inv_std[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.running_var[c]) + l.eps));
            }
        }
        k.batchnorm->forward(x, s.mean.data(), s.inv_std.data(), s.w.data(), s.b.data(), s.y.interior());
    }

    // Writes an input's gradient through `compute(target)`: straight into the input's gradient tile when
    // this layer is its only reader, else into scratch that is then added to it.
    template <typename Compute>
    void input_gradient(Slot& in, std::int64_t y, std::int64_t x, Dims dims, Compute&& compute) {
        const View target = in.dy.padded().sub(0, 0, y, x, dims);
        if (in.readers == 1) {
            compute(target);
            return;
        }
        scratch.resize(static_cast<std::size_t>(dims.elements()));
        const View computed = dense_view(scratch.data(), dims);
        compute(computed);
        // Only the part over the interior is a gradient here; the part over the margins is padding's.
        const Margins& m = in.need;
        const Dims interior = in.dy.dims();
        const std::int64_t y0 = std::max(y, m.top), y1 = std::min(y + dims.h, m.top + interior.h);
        const std::int64_t x0 = std::max(x, m.left), x1 = std::min(x + dims.w, m.left + interior.w);
        if (y1 <= y0 || x1 <= x0) return;
        const Dims overlap{dims.n, dims.c, y1 - y0, x1 - x0};
        k.eltwise->accumulate(computed.sub(0, 0, y0 - y, x0 - x, overlap),
                              in.dy.padded().sub(0, 0, y0, x0, overlap));
    }

    template <typename Compute>
    void interior_gradient(Slot& in, Compute&& compute) {
        input_gradient(in, in.need.top, in.need.left, in.dy.dims(), std::forward<Compute>(compute));
    }

    void backward() {
        for (Slot& s : slots)
            if (s.zero_grad && s.dy.size() > 0) s.dy.fill(0.0f);
        for (auto it = slots.rbegin(); it != slots.rend(); ++it) {
            Slot& s = *it;
            const Layer& l = *s.layer;
            switch (l.op) {
                case OpKind::input:
                case OpKind::label:
                case OpKind::softmax_cross_entropy:
                case OpKind::pixel_cross_entropy: break;  // the loss wrote its gradient in forward
                case OpKind::conv: {
                    const Window w = window_of(l);
                    const ConstView x = windowed_input(l);
                    k.conv->backward_weights(x, s.dy.interior(), s.dw.interior(), l.bias ? s.db.data() : nullptr, w);
                    if (input_of(l).layer->op == OpKind::input) break;
                    const Region r = region(l);
                    input_gradient(input_of(l), r.y, r.x, r.dims,
                                   [&](View dx) { k.conv->backward_data(s.dy.interior(), s.w.interior(), dx, w); });
                    break;
                }
                case OpKind::maxpool:
                case OpKind::avgpool: {
                    if (input_of(l).layer->op == OpKind::input) break;
                    const ConstView x = windowed_input(l);
                    const Region r = region(l);
                    input_gradient(input_of(l), r.y, r.x, r.dims, [&](View dx) {
                        k.pool->backward(l.op == OpKind::maxpool ? PoolKind::max : PoolKind::average, x,
                                         s.dy.interior(), dx, window_of(l));
                    });
                    break;
                }
                case OpKind::batchnorm: batchnorm_backward(s); break;
                case OpKind::relu:
                case OpKind::leaky_relu: {
                    const float slope = l.op == OpKind::relu ? 0.0f : static_cast<float>(l.slope);
                    interior_gradient(input_of(l), [&](View dx) {
                        k.activation->backward(input_of(l).y.interior(), s.dy.interior(), slope, dx);
                    });
                    break;
                }
                case OpKind::global_avgpool: {
                    const ConstView dy = s.dy.interior();
                    scratch_values.resize(static_cast<std::size_t>(dy.dims.n * dy.dims.c));
                    for (std::int64_t n = 0; n < dy.dims.n; ++n)
                        for (std::int64_t c = 0; c < dy.dims.c; ++c)
                            scratch_values[static_cast<std::size_t>(n * dy.dims.c + c)] = dy.at(n, c, 0, 0);
                    const Dims xd = input_of(l).dy.dims();
                    interior_gradient(input_of(l), [&](View dx) {
                        k.pool->broadcast(scratch_values.data(), 1.0f / static_cast<float>(xd.h * xd.w), dx);
                    });
                    break;
                }
                case OpKind::fc: {
                    k.fc->backward_weights(input_of(l).y.interior(), s.dy.interior(), s.dw.interior(),
                                           l.bias ? s.db.data() : nullptr);
                    if (input_of(l).layer->op == OpKind::input) break;
                    interior_gradient(input_of(l),
                                      [&](View dx) { k.fc->backward_data(s.dy.interior(), s.w.interior(), dx); });
                    break;
                }
                case OpKind::add:
                    for (std::size_t i = 0; i < l.inputs.size(); ++i) {
                        if (input_of(l, i).layer->op == OpKind::input) continue;
                        interior_gradient(input_of(l, i), [&](View dx) { k.eltwise->copy(s.dy.interior(), dx); });
                    }
                    break;
                case OpKind::concat: {
                    std::int64_t c0 = 0;
                    for (std::size_t i = 0; i < l.inputs.size(); ++i) {
                        Slot& in = input_of(l, i);
                        const Dims d = in.y.dims();
                        if (in.layer->op != OpKind::input)
                            interior_gradient(in, [&](View dx) { k.eltwise->copy(s.dy.interior().sub(0, c0, 0, 0, d), dx); });
                        c0 += d.c;
                    }
                    break;
                }
            }
        }
    }

    void batchnorm_backward(Slot& s) {
        const Layer& l = *s.layer;
        const ConstView x = input_of(l).y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        sums_a.assign(channels, 0.0);
        sums_b.assign(channels, 0.0);
        k.batchnorm->backward_statistics(x, s.dy.interior(), s.mean.data(), s.inv_std.data(), sums_a.data(),
                                         sums_b.data());
        for (std::size_t c = 0; c < channels; ++c) {
            s.db[c] = static_cast<float>(sums_a[c]);
            s.dw.data()[c] = static_cast<float>(sums_b[c]);
        }
        if (input_of(l).layer->op == OpKind::input) return;
        const double count = static_cast<double>(x.dims.n * x.dims.h * x.dims.w);
        interior_gradient(input_of(l), [&](View dx) {
            k.batchnorm->backward(x, s.dy.interior(), s.mean.data(), s.inv_std.data(), s.w.data(), sums_a.data(),
                                  sums_b.data(), count, dx);
        });
    }

    void update() {
        const auto lr = static_cast<float>(config.lr), momentum = static_cast<float>(config.momentum),
                   decay = static_cast<float>(config.weight_decay);
        for (Slot& s : slots) {
            if (s.w.size() == 0) continue;
            k.eltwise->sgd(s.w.data(), s.mw.data(), s.dw.data(), s.w.size(), lr, momentum, decay);
            if (!s.b.empty())
                k.eltwise->sgd(s.b.data(), s.mb.data(), s.db.data(), static_cast<std::int64_t>(s.b.size()), lr,
                               momentum, decay);
        }
    }
};

Trainer::Trainer(const frontend::Network& net, Kernels kernels, TrainConfig config)
    : impl_(std::make_unique<Impl>(net, kernels, config)) {}

Trainer::~Trainer() = default;

double Trainer::step(DataSource& data, std::int64_t first) {
    const double loss = impl_->forward(data, first, true);
    impl_->backward();
    impl_->update();
    return loss;
}

double Trainer::evaluate(DataSource& data, std::int64_t first) { return impl_->forward(data, first, false); }

std::vector<StateTensor> Trainer::state() {
    std::vector<StateTensor> out;
    auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float* data, std::int64_t size) {
        out.push_back(StateTensor{name, std::move(shape), data, size});
    };
    for (auto& s : impl_->slots) {
        const Layer& l = *s.layer;
        if (s.w.size() == 0) continue;
        const Dims d = s.w.dims();
        std::vector<std::int64_t> wshape;
        if (l.op == OpKind::conv) wshape = {d.n, d.c, d.h, d.w};
        if (l.op == OpKind::fc) wshape = {d.n, d.c};
        if (l.op == OpKind::batchnorm) wshape = {d.c};
        const std::vector<std::int64_t> bshape{static_cast<std::int64_t>(s.b.size())};
        const auto bsize = static_cast<std::int64_t>(s.b.size());
        add(l.name + ".weight", wshape, s.w.data(), s.w.size());
        if (!s.b.empty()) add(l.name + ".bias", bshape, s.b.data(), bsize);
        if (l.op == OpKind::batchnorm) {
            add(l.name + ".running_mean", bshape, s.running_mean.data(), bsize);
            add(l.name + ".running_var", bshape, s.running_var.data(), bsize);
        }
        add(l.name + ".weight.momentum", wshape, s.mw.data(), s.mw.size());
        if (!s.b.empty()) add(l.name + ".bias.momentum", bshape, s.mb.data(), bsize);
    }
    return out;
}

std::int64_t Trainer::memory_bytes() const {
    std::int64_t floats = 0;
    for (const auto& s : impl_->slots) {
        floats += s.y.size() + s.dy.size() + s.w.size() + s.dw.size() + s.mw.size();
        floats += static_cast<std::int64_t>(s.b.size() * 3 + s.mean.size() * 4 + s.labels.size());
    }
    return 4 * floats;
}

}  // namespace dsl::backend
