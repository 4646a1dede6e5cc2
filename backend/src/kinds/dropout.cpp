// dropout: zeroes elements at random in training steps, by a mask that is a pure function of the seed, the
// layer, the step and each element's global place, so that every split draws the same mask and backward
// draws forward's again.
#include "rows.hpp"

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

// The mask of a dropout layer's own tile in the step whose first sample is `first`: its key is the seed's
// and the layer's, its step the mini-batch's index (first / batch, as `dsl run` numbers steps, so that a
// resumed run draws what an uninterrupted one does), its coordinates global.
DropoutMask dropout_mask(const Trainer::Impl& t, const Trainer::Impl::Slot& s, std::int64_t first) {
    const Trainer::Impl::Tile& own = *s.tiles.front();
    DropoutMask m;
    m.key = splitmix64(t.config.seed ^ 0x64726f706f7574ull) ^ name_hash(s.layer->name);  // "dropout"
    m.step = first / t.config.batch;
    m.n0 = first + own.box.n.lo;
    m.c0 = own.box.c.lo;
    m.at = own.box.origin();
    m.p = static_cast<float>(s.layer->p);
    return m;
}

class Dropout final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index;
        const ConstView x = s.operands[0]->y.interior();
        const View y = s.own().y.interior();
        if (t.dropping(pass.training))
            t.k.dropout->forward(x, dropout_mask(t, s, pass.first), y);
        else
            t.k.eltwise->copy(x, y);
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)index, (void)speaks;
        Impl::Tile& in = *s.operands[0];
        if (t.is_input(&in)) return;
        if (!t.dropping(t.step_training)) {
            t.tiles.add_gradient(in, s.own().dy.interior());
            return;
        }
        t.tiles.interior_gradient(
            in, [&](View dx) { t.k.dropout->backward(s.own().dy.interior(), dropout_mask(t, s, t.step_first), dx); });
    }

    // A hash per element (five splitmix rounds), a compare and a multiplication; a read and a write.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.y}}, 20 * t.ny, 2 * t.ny * word);
        if (!t.data_in) c.backward_data = t.run(t.kernel(Phase::backward), {{"x", t.y}}, 20 * t.ny, 2 * t.ny * word);
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        p.a = p.filled(p.x);
        p.c = p.zeros(p.x);
        DropoutMask m;
        m.p = 0.5f;
        m.at = Index::filled(p.x.rank(), 0);  // the tile at the tensor's origin
        if (p.phase == Phase::forward) p.run = [&p, m] { p.k.dropout->forward(p.a.interior(), m, p.c.interior()); };
        if (p.phase == Phase::backward) p.run = [&p, m] { p.k.dropout->backward(p.a.interior(), m, p.c.interior()); };
    }
};

}  // namespace

const KindRules& rows::dropout() {
    static const Dropout row;
    return row;
}

}  // namespace dsl::backend
