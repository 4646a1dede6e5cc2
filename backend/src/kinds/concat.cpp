// concat: its inputs' channels one after the other; each input's gradient is its channels of the output's.
#include "rows.hpp"

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

class Concat final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index, (void)pass;
        // Each input's channels that fall in this tile's (all of them, or a block under F and C parts).
        const View y = s.own().y.interior();
        const Range own = s.own().box.c;
        std::int64_t c0 = 0;
        for (Impl::Tile* in : s.operands) {
            const ConstView x = in->y.interior();
            const std::int64_t lo = std::max(own.lo, c0), hi = std::min(own.hi, c0 + x.dims.c);
            if (lo < hi) t.k.eltwise->copy(x.channels(lo - c0, hi - lo), y.channels(lo - own.lo, hi - lo));
            c0 += x.dims.c;
        }
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)index, (void)speaks;
        // Each input's channels that fall in this tile's; a copy's others stay zero.
        const Range own = s.own().box.c;
        std::int64_t c0 = 0;
        for (Impl::Tile* in : s.operands) {
            const std::int64_t channels = in->box.c.size();
            const std::int64_t lo = std::max(own.lo, c0), hi = std::min(own.hi, c0 + channels);
            if (!t.is_input(in) && lo < hi) {
                Box part = in->box;
                part.c = {lo - c0, hi - c0};
                t.tiles.input_gradient(*in, part, [&](View dx) {
                    t.k.eltwise->copy(s.own().dy.interior().channels(lo - own.lo, hi - lo), dx);
                });
            }
            c0 += channels;
        }
    }

    // A copy each way.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        c.forward = t.run(t.kernel(Phase::forward), {{"y", t.y}}, 0.0, 2 * t.ny * word);
        c.backward_data = t.run(t.kernel(Phase::backward), {{"y", t.y}}, 0.0, 2 * t.ny * word);
    }

    void probe(KernelProbe& p) const override {
        if (!p.y.n) return;
        p.a = p.filled(p.y);
        p.c = p.zeros(p.y);
        if (p.phase == Phase::forward || p.phase == Phase::backward)
            p.run = [&p] { p.k.eltwise->copy(p.a.interior(), p.c.interior()); };
    }
};

}  // namespace

const KindRules& rows::concat() {
    static const Concat row;
    return row;
}

}  // namespace dsl::backend
