// deconv: a transposed convolution (PyTorch's ConvTranspose2d and 3d), each input spread over its window of
// outputs; what an output reads depends on its global place, so its kernels take the views' places. Its
// weights are {C, F, kernel}.
#include "rows.hpp"

#include "../random/initial_values.hpp"

#include <dsl/scheduler/layout_groups.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <cmath>

namespace dsl::backend {

namespace {

using scheduler::elements;
using scheduler::Phase;
using scheduler::Sizes;
using scheduler::word;

// The kernels' view of a transposed convolution whose input view is `x` and output view `y` (global boxes).
Deconv deconv_of(const Layer& l, const Box& x, const Box& y) {
    return Deconv{l.kernel, l.stride, l.pad, Placement{x.origin(), y.origin()}};
}

class Transposed final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)pass;
        t.windowed_layer(s, index);
    }

    void forward_part(Impl& t, Slot& s, const Box& out, bool again) const override {
        (void)again;
        const Layer& l = *s.layer;
        Impl::Tile& in = *s.operands[0];
        Impl::Tile& own = s.own();
        const Box read = scheduler::window_input(l, out, in.box.c);
        const View y = view_of(own.y, own, out);
        const ConstView x = view_of(in.y, in, read);
        DSL_INTERNAL_CHECK(t.k.deconv, "the kernel set has no kernels for transposed convolutions");
        t.k.deconv->forward(x, s.w.interior(), t.bias_of(s), y, deconv_of(l, read, out));
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        const Layer& l = *s.layer;
        Impl::Tile& in = *s.operands[0];
        const Box& read = t.plan_of(index).read;
        const Deconv d = deconv_of(l, read, s.own().box);
        if (!t.is_input(&in))
            t.tiles.input_gradient(
                in, read, [&](View dx) { t.k.deconv->backward_data(s.own().dy.interior(), s.w.interior(), dx, d); });
        t.timeline.mark(Impl::Phase::backward, Kind::backward_weights, index);
        const bool send_now = t.plan_of(index).scatters_early;
        if (send_now) t.exchanges.start_scatter(in);
        t.k.deconv->backward_weights(view_of(in.y, in, read), s.own().dy.interior(), s.dw.interior(),
                                     t.bias_gradient_of(s), d);
        if (send_now) t.exchanges.finish_scatter(in);
        t.optimizer.start_sum(s, speaks);
    }

    // The input's gradient first, unless the input is data: then its weights'.
    Kind first_backward_part(const Impl& t, const Slot& s) const override {
        return t.is_input(s.operands[0]) ? Kind::backward_weights : Kind::backward_data;
    }

    // PyTorch's ConvTranspose2d default: weights {C_in, C_out, kernel} and bias uniform in +-1/sqrt(fan in),
    // its fan in C_out times the kernel's taps (the weights' second dimension on).
    void initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const override {
        (void)index;
        const Layer& l = *s.layer;
        const Dims in = scheduler::extent_of(t.net.layers[static_cast<std::size_t>(l.inputs[0])], 1);
        const Dims wd{in.c, l.filters, l.kernel};
        const double bound = 1.0 / std::sqrt(static_cast<double>(wd.c * wd.points()));
        t.set_weights(
            s, wd,
            [=](std::int64_t i) {
                return static_cast<float>(bound * (2.0 * uniform(stream, static_cast<std::uint64_t>(i)) - 1.0));
            },
            bound, stream);
    }

    // {C, F, kernel} at its input channels and filters.
    Block weight_block(const Impl& t, const Slot& s) const override {
        (void)t;
        const Dims& d = s.whole;
        const bool split = s.holders != nullptr;
        const auto part = [&](const Range& r, std::int64_t whole) { return split ? r : Range{0, whole}; };
        return Block{part(s.inputs, d.n), part(s.filters, d.c), d.c, d.points(), d.elements()};
    }

    std::vector<std::int64_t> weight_shape(const Dims& whole) const override {
        return window_weight_shape(whole.n, whole.c, whole.space);
    }

    // ConvTranspose2d, ConvTranspose3d: weight [in, out, kernel...], bias [out].
    std::vector<ExportedTensor> exported(const frontend::Layer& l, const frontend::Shape& input) const override {
        check_kernel_rank(l, input);
        std::vector<ExportedTensor> out{{"weight", window_weight_shape(input.dims.at(0), l.filters, l.kernel)}};
        if (l.bias) out.push_back({"bias", {l.filters}});
        return out;
    }

    // Every input element times its window of filters, in each of the three passes.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        const Layer& l = t.layer;
        const std::vector<scheduler::TimeField> f{{"x", t.x},
                                                  {"y", t.y},
                                                  {"k", scheduler::spatial_field(l.kernel)},
                                                  {"s", scheduler::spatial_field(l.stride)},
                                                  {"p", scheduler::spatial_field(l.pad)}};
        const double flops = 2.0 * t.nx * static_cast<double>(l.filters * product(l.kernel));
        const double bytes = (t.nx + t.ny) * word;
        c.forward = t.run(t.kernel(Phase::forward), f, flops, bytes, t.ny);
        if (!t.data_in) c.backward_data = t.run(t.kernel(Phase::backward_data), f, flops, bytes, t.nx);
        c.backward_weights = t.run(t.kernel(Phase::backward_weights), f, flops, bytes, t.ny);
        // A convolution's passes with input and output exchanged (deconv_over_conv), blocked, over groups of
        // samples.
        const double weights = static_cast<double>(t.y[1] * t.x[1] * product(l.kernel)) * word;
        const double group =
            static_cast<double>(scheduler::layout_group(scheduler::dims_of(t.y), scheduler::dims_of(t.x))) /
            static_cast<double>(t.y[0]);
        const double x_in = scheduler::blocked(t.x, word) * group, y_in = scheduler::blocked(t.y, word) * group;
        t.layouts(c, x_in, weights, y_in);
        if (!t.data_in) t.layouts(c, y_in, weights, x_in);
        t.layouts(c, y_in, x_in, weights);
        // The span the input spreads over, whole windows from its first place to its last.
        Sizes span{t.x[0], t.y[1]};
        for (std::size_t d = 2; d < t.x.size(); ++d)
            span.push_back((t.x[d] - 1) * l.stride[static_cast<int>(d) - 2] + l.kernel[static_cast<int>(d) - 2]);
        c.scratch[3] = elements(span) * word;
    }

    bool halo_back_behind_weights() const override { return true; }

    void probe(KernelProbe& p) const override {
        if (!p.x.n || !p.y.n || !p.k.deconv) return;
        Deconv d;
        d.kernel = p.w.kernel;
        d.stride = p.w.stride;
        d.pad = p.spatial("p", Index::filled(p.w.kernel.rank(), 0));
        d.at = Placement{Index::filled(p.x.rank(), 0), Index::filled(p.y.rank(), 0)};
        p.a = p.filled(p.x);
        p.b = p.filled(p.y);
        p.wt = p.filled(Dims{p.x.c, p.y.c, p.w.kernel});
        p.c = p.zeros(p.wt.dims());
        p.p1 = p.zeros(vector_of(p.y.c));
        if (p.phase == Phase::forward)
            p.run = [&p, d] { p.k.deconv->forward(p.a.interior(), p.wt.interior(), p.p1.data(), p.b.interior(), d); };
        if (p.phase == Phase::backward_data)
            p.run = [&p, d] { p.k.deconv->backward_data(p.b.interior(), p.wt.interior(), p.a.interior(), d); };
        if (p.phase == Phase::backward_weights)
            p.run = [&p, d] {
                p.k.deconv->backward_weights(p.a.interior(), p.b.interior(), p.c.interior(), p.p1.data(), d);
            };
    }
};

}  // namespace

const KindRules& rows::deconv() {
    static const Transposed row;
    return row;
}

}  // namespace dsl::backend
