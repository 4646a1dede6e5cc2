// fc: a fully connected layer over each sample's every input, flattened (PyTorch's Linear after a flatten);
// its weights {K, inputs} split in blocks of filters and of input channels under F and C parts.
#include "rows.hpp"

#include "../random/initial_values.hpp"

#include <dsl/scheduler/tiles.hpp>

#include <cmath>
#include <numeric>

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::Sizes;
using scheduler::word;

class Fc final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index, (void)pass;
        t.k.fc->forward(s.operands[0]->y.interior(), s.w.interior(), t.bias_of(s), s.own().y.interior());
    }

    // Its weight gradient first, whose sum then runs while the input's is computed.
    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        Impl::Tile& in = *s.operands[0];
        t.k.fc->backward_weights(in.y.interior(), s.own().dy.interior(), s.dw.interior(), t.bias_gradient_of(s));
        t.optimizer.start_sum(s, speaks);
        if (t.is_input(&in)) return;
        t.timeline.mark(Impl::Phase::backward, Kind::backward_data, index);
        t.tiles.interior_gradient(in,
                                  [&](View dx) { t.k.fc->backward_data(s.own().dy.interior(), s.w.interior(), dx); });
    }

    Kind first_backward_part(const Impl& t, const Slot& s) const override {
        (void)t, (void)s;
        return Kind::backward_weights;
    }

    // {K, every input of a sample}: PyTorch's default, uniform in +-1/sqrt(fan in), for the weights and the
    // bias.
    void initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const override {
        (void)index;
        const Layer& l = *s.layer;
        const Dims in = scheduler::extent_of(t.net.layers[static_cast<std::size_t>(l.inputs[0])], 1);
        const Dims wd{l.filters, in.c * in.points(), {}};
        const double bound = 1.0 / std::sqrt(static_cast<double>(wd.c * wd.points()));
        t.set_weights(
            s, wd,
            [=](std::int64_t i) {
                return static_cast<float>(bound * (2.0 * uniform(stream, static_cast<std::uint64_t>(i)) - 1.0));
            },
            bound, stream);
    }

    // Its filters' block by the inputs of its input channels' block (K is the input's channels times its
    // points, channel by channel).
    Block weight_block(const Impl& t, const Slot& s) const override {
        const Dims& d = s.whole;
        const bool split = s.holders != nullptr;
        const auto part = [&](const Range& r, std::int64_t whole) { return split ? r : Range{0, whole}; };
        const std::int64_t per_channel = d.c / t.global_dims(s.layer->inputs[0]).c;
        const Range c = part(s.inputs, d.c / per_channel);
        return Block{part(s.filters, d.n), {c.lo * per_channel, c.hi * per_channel}, d.c, 1, d.elements()};
    }

    std::vector<std::int64_t> weight_shape(const Dims& whole) const override { return {whole.n, whole.c}; }

    // Linear on the flattened input: weight [out, in], bias [out].
    std::vector<ExportedTensor> exported(const frontend::Layer& l, const frontend::Shape& input) const override {
        std::vector<ExportedTensor> out{{"weight", {l.filters, input.elements()}}};
        if (l.bias) out.push_back({"bias", {l.filters}});
        return out;
    }

    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        // Every input of a sample, flattened.
        const Sizes x{t.x[0], std::accumulate(t.x.begin() + 1, t.x.end(), std::int64_t{1}, std::multiplies<>())},
            y{t.y[0], t.y[1]};
        const double flops = 2.0 * scheduler::elements(x) * static_cast<double>(y[1]);
        const double bytes = (scheduler::elements(x) + scheduler::elements(y) + t.held_params) * word;
        c.forward = t.run(t.kernel(Phase::forward), {{"x", x}, {"y", y}}, flops, bytes);
        if (!t.data_in) c.backward_data = t.run(t.kernel(Phase::backward_data), {{"x", x}, {"y", y}}, flops, bytes);
        c.backward_weights = t.run(t.kernel(Phase::backward_weights), {{"x", x}, {"y", y}}, flops, bytes);
        // oneDNN's gemm kernels read and write every argument in place (onednn_kernels.cpp, OnednnFc): no
        // scratch in oneDNN's layouts.
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n || !p.y.n) return;
        p.a = p.filled(p.x);
        p.b = p.filled(p.y);
        p.wt = p.filled(Dims{p.y.c, p.x.c * p.x.points(), {}});
        p.c = p.zeros(p.wt.dims());
        p.p1 = p.zeros(vector_of(p.y.c));
        if (p.phase == Phase::forward)
            p.run = [&p] { p.k.fc->forward(p.a.interior(), p.wt.interior(), p.p1.data(), p.b.interior()); };
        if (p.phase == Phase::backward_data)
            p.run = [&p] { p.k.fc->backward_data(p.b.interior(), p.wt.interior(), p.a.interior()); };
        if (p.phase == Phase::backward_weights)
            p.run = [&p] { p.k.fc->backward_weights(p.a.interior(), p.b.interior(), p.c.interior(), p.p1.data()); };
    }
};

}  // namespace

const KindRules& rows::fc() {
    static const Fc row;
    return row;
}

}  // namespace dsl::backend
