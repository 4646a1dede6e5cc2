// maxpool and avgpool: a window over the input tile with the halo its neighbours send. Max pooling pads with
// -infinity (padding is never the window's maximum); average pooling pads with zeros and counts them in its
// divisor (PyTorch's count_include_pad).
#include "rows.hpp"

#include <dsl/scheduler/tiles.hpp>

#include <limits>

namespace dsl::backend {

namespace {

using scheduler::elements;
using scheduler::Phase;
using scheduler::Sizes;
using scheduler::word;

class Pool final : public KindRules {
public:
    explicit Pool(PoolKind kind) : kind_(kind) {}

    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)pass;
        t.windowed_layer(s, index);
    }

    void forward_part(Impl& t, Slot& s, const Box& out, bool again) const override {
        (void)again;
        const Layer& l = *s.layer;
        Impl::Tile& in = *s.operands[0];
        Impl::Tile& own = s.own();
        const View y = view_of(own.y, own, out);
        t.tiles.set_padding(in, padding());
        const Impl::WindowRead r = t.window_read(s, in, scheduler::window_input(l, out, in.box.c));
        t.k.pool->forward(kind_, view_of(in.y, in, r.box), y, r.window);
    }

    float padding() const override { return kind_ == PoolKind::max ? -std::numeric_limits<float>::infinity() : 0.0f; }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)speaks;
        const Layer& l = *s.layer;
        Impl::Tile& in = *s.operands[0];
        if (t.is_input(&in)) return;
        const Impl::WindowRead r = t.window_read(s, in, t.plan_of(index).read);
        const ConstView x = t.windowed_input(l, index, r.box);
        t.tiles.input_gradient(in, r.box,
                               [&](View dx) { t.k.pool->backward(kind_, x, s.own().dy.interior(), dx, r.window); });
    }

    // Its kernels take blocked tiles too (blocked_pool.cpp), and pad them at the tensor's border.
    bool runs_blocked() const override { return true; }

    // A read of the window per output; backward reads the input and the output's gradient and writes the
    // input's.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        c.forward = window_forward(t, t.y);
        if (!t.data_in)
            c.backward_data =
                t.run(t.kernel(Phase::backward), t.window_fields(t.y, false), t.nx, (2 * t.nx + t.ny) * word);
    }

    double part_forward(const scheduler::CostTerms& t, const scheduler::LayerCost& whole,
                        const Sizes& out) const override {
        (void)whole;
        return window_forward(t, out);
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n || !p.y.n) return;
        p.a = p.filled(p.x);
        p.b = p.filled(p.y);
        p.c = p.zeros(p.x);
        const PoolKind pk = kind_;
        if (p.phase == Phase::forward) p.run = [&p, pk] { p.k.pool->forward(pk, p.a.interior(), p.b.interior(), p.w); };
        if (p.phase == Phase::backward)
            p.run = [&p, pk] { p.k.pool->backward(pk, p.a.interior(), p.b.interior(), p.c.interior(), p.w); };
    }

private:
    // The forward kernel over outputs `out`: a FLOP per input it reads.
    static double window_forward(const scheduler::CostTerms& t, const Sizes& out) {
        const double in = elements(t.window_dims(out));
        return t.run(t.kernel(Phase::forward), t.window_fields(out, false), in, (in + elements(out)) * word, 0.0);
    }

    PoolKind kind_;
};

}  // namespace

const KindRules& rows::pool(frontend::OpKind op) {
    static const Pool max(PoolKind::max), average(PoolKind::average);
    return op == frontend::OpKind::maxpool ? max : average;
}

}  // namespace dsl::backend
