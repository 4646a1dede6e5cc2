// The element-wise kinds (relu, leaky_relu, sigmoid, tanh, gelu): y = f(x) forward, dx = dy * f'(x)
// backward, their function and FLOPs from the frontend's table (layer_kinds.hpp).
#include "rows.hpp"

#include <dsl/scheduler/recompute.hpp>

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

class Elementwise final : public KindRules {
public:
    explicit Elementwise(bool blocked) : blocked_(blocked) {}

    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index;
        const Layer& l = *s.layer;
        // Its input's forward wrote it already (fusion.cpp).
        if (t.writes_relu(t.slots[static_cast<std::size_t>(l.inputs[0])], pass.training)) return;
        t.k.activation->forward(elementwise(l), s.operands[0]->y.interior(), activation_slope(l), s.own().y.interior());
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)index, (void)speaks;
        const Layer& l = *s.layer;
        Impl::Tile& in = *s.operands[0];
        if (t.is_input(&in)) return;
        // A relu's output is positive where its input is: it reads that, which it keeps anyway.
        const ConstView x = scheduler::backward_reads_output(l) ? s.own().y.interior() : in.y.interior();
        t.tiles.interior_gradient(in, [&](View dx) {
            t.k.activation->backward(elementwise(l), x, s.own().dy.interior(), activation_slope(l), dx);
        });
    }

    // ReLUs run on blocked tiles (blocked_kernels.cpp); the other functions' kernels read planar ones.
    bool runs_blocked() const override { return blocked_; }

    // Their FLOPs per element, a read and a write (backward: two reads).
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        const double flops = t.layer.kind().flops;
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.y}}, flops * t.ny, 2 * t.ny * word);
        if (!t.data_in) c.backward_data = t.run(t.kernel(Phase::backward), {{"x", t.y}}, flops * t.ny, 3 * t.ny * word);
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        p.a = p.filled(p.x);
        p.b = p.filled(p.x);
        p.c = p.zeros(p.x);
        const frontend::Activation f = p.kind.activation;
        if (p.phase == Phase::forward)
            p.run = [&p, f] { p.k.activation->forward(f, p.a.interior(), 0.0f, p.c.interior()); };
        if (p.phase == Phase::backward)
            p.run = [&p, f] { p.k.activation->backward(f, p.a.interior(), p.b.interior(), 0.0f, p.c.interior()); };
    }

private:
    bool blocked_;
};

}  // namespace

const KindRules& rows::elementwise(frontend::OpKind op) {
    static const Elementwise relu_like(true), other(false);
    return op == frontend::OpKind::relu || op == frontend::OpKind::leaky_relu ? relu_like : other;
}

}  // namespace dsl::backend
