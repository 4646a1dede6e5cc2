// upsample: rows and columns (and depths) repeated (nearest) or interpolated (bilinear, trilinear) `scale`
// times; what an output reads depends on its global place, so its kernels take the views' places.
#include "rows.hpp"

#include <dsl/scheduler/tiles.hpp>

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

// The kernels' view of an upsampling whose input view is `x` and output view `y` (global boxes).
Upsample upsample_of(const Trainer::Impl& t, const Layer& l, const Box& x, const Box& y) {
    return Upsample{l.scale, l.linear_upsample(), t.global_dims(l.inputs[0]).space, Placement{x.origin(), y.origin()}};
}

class Upsampling final : public KindRules {
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
        DSL_INTERNAL_CHECK(t.k.upsample, "the kernel set has no kernels for upsampling");
        t.k.upsample->forward(upsample_of(t, l, read, out), x, y);
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)speaks;
        Impl::Tile& in = *s.operands[0];
        if (t.is_input(&in)) return;
        const Box& read = t.plan_of(index).read;
        t.tiles.input_gradient(in, read, [&](View dx) {
            t.k.upsample->backward(upsample_of(t, *s.layer, read, s.own().box), s.own().dy.interior(), dx);
        });
    }

    // Per output: its source (linear: its 2^rank sources, 2 FLOPs for each interpolation between them) read
    // and weighed; backward adds into them.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        const Layer& l = t.layer;
        const std::vector<scheduler::TimeField> f{
            {"x", t.x}, {"y", t.y}, {"scale", {l.scale}}, {"mode", {static_cast<std::int64_t>(l.mode)}}};
        const int rank = static_cast<int>(t.y.size()) - 2;
        const double per = l.linear_upsample() ? 2.0 * static_cast<double>((1 << rank) - 1) : 1.0;
        c.forward = t.run(t.kernel(Phase::forward), f, per * t.ny, (t.nx + t.ny) * word);
        if (!t.data_in) c.backward_data = t.run(t.kernel(Phase::backward), f, per * t.ny, (2 * t.nx + t.ny) * word);
    }

    // The tile at the tensor's first row and column, its input the whole of what it reads.
    void probe(KernelProbe& p) const override {
        if (!p.x.n || !p.y.n || !p.k.upsample) return;
        p.a = p.filled(p.x);
        p.b = p.filled(p.y);
        p.c = p.zeros(p.x);
        Upsample u;
        u.scale = p.field("scale").empty() ? 2 : p.field("scale")[0];
        u.linear = !p.field("mode").empty() &&
                   p.field("mode")[0] != static_cast<std::int64_t>(frontend::UpsampleMode::nearest);
        u.in = p.x.space;
        u.at = Placement{Index::filled(p.x.rank(), 0), Index::filled(p.y.rank(), 0)};
        if (p.phase == Phase::forward) p.run = [&p, u] { p.k.upsample->forward(u, p.a.interior(), p.b.interior()); };
        if (p.phase == Phase::backward) p.run = [&p, u] { p.k.upsample->backward(u, p.b.interior(), p.c.interior()); };
    }
};

}  // namespace

const KindRules& rows::upsample() {
    static const Upsampling row;
    return row;
}

}  // namespace dsl::backend
