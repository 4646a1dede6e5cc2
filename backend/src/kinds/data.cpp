// Data layers: an input, made (or read) where it is needed, halo included; a label, which the loss that reads
// it takes from the data source over its logits' tile.
#include "rows.hpp"

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

class Input final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index;
        t.make_input(pass.data, s.own(), pass.first);
    }

    // The cost of the data source: a write of the tile, and its copy to the kernels.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.y}}, 0.0, t.ny * word * 2.0);
    }

    // Made on the host, then (on a GPU) sent to the device, as training does.
    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        p.a = Tensor(p.x);
        p.b = p.zeros(p.x);
        if (p.phase == Phase::forward)
            p.run = [&p] {
                p.data.inputs(p.input, 0, Index::filled(p.x.rank(), 0), p.a.interior());
                p.mem.upload(p.a.data(), p.b.data(), p.a.size());
            };
    }
};

class Label final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)t, (void)s, (void)index, (void)pass;
    }
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override { (void)t, (void)c; }
};

}  // namespace

const KindRules& rows::input() {
    static const Input row;
    return row;
}

const KindRules& rows::label() {
    static const Label row;
    return row;
}

}  // namespace dsl::backend
