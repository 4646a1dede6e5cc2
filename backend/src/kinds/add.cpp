// add: the sum of its inputs, whose gradient goes to each of them whole.
#include "rows.hpp"

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

class Add final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index;
        std::vector<ConstView> xs;
        for (Impl::Tile* in : s.operands) xs.push_back(in->y.interior());
        const View y = s.own().y.interior();
        t.forward_fused(
            s, s.own().box, pass.training,
            [&](View relu, float slope) { return t.k.eltwise->add_relu(xs, slope, relu); },
            [&] { t.k.eltwise->add(xs, y); });
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)index, (void)speaks;
        for (Impl::Tile* in : s.operands)
            if (!t.is_input(in)) t.tiles.add_gradient(*in, s.own().dy.interior());
    }

    bool runs_blocked() const override { return true; }

    // k - 1 additions per element of k inputs; backward copies the gradient to each.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        const auto k = static_cast<std::int64_t>(t.layer.inputs.size());
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.y}, {"inputs", {k}}}, t.ny * static_cast<double>(k - 1),
                          t.ny * static_cast<double>(k + 1) * word);
        c.backward_data = t.run(t.kernel(Phase::backward), {{"x", t.y}, {"inputs", {k}}}, 0.0,
                                t.ny * 2.0 * static_cast<double>(k) * word);
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        const std::int64_t inputs = p.field("inputs").empty() ? 2 : p.field("inputs")[0];
        for (std::int64_t i = 0; i < inputs; ++i) p.many.push_back(p.filled(p.x));
        p.c = p.zeros(p.x);
        if (p.phase == Phase::forward)
            p.run = [&p] {
                std::vector<ConstView> xs;
                for (Tensor& t : p.many) xs.push_back(t.interior());
                p.k.eltwise->add(xs, p.c.interior());
            };
        if (p.phase == Phase::backward)
            p.run = [&p] {
                for (Tensor& t : p.many) p.k.eltwise->copy(p.c.interior(), t.interior());
            };
    }
};

}  // namespace

const KindRules& rows::add() {
    static const Add row;
    return row;
}

}  // namespace dsl::backend
