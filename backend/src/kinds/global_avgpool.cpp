// global_avgpool: each sample's channels averaged over every place, summed over the processes that hold the
// sample; backward spreads each mean's gradient evenly.
#include "rows.hpp"

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

class GlobalAvgpool final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index, (void)pass;
        const Layer& l = *s.layer;
        const ConstView x = s.operands[0]->y.interior();
        t.stats.start_sums(static_cast<std::size_t>(x.dims.n * x.dims.c));
        t.k.pool->global_sum(x, t.stats.a());
        t.stats.sum_a(s.group);
        const std::vector<double>& sums = t.stats.sums_a();
        const double area = static_cast<double>(t.global_dims(l.inputs[0]).points());
        t.scratch_values.resize(sums.size());
        for (std::size_t j = 0; j < sums.size(); ++j) t.scratch_values[j] = static_cast<float>(sums[j] / area);
        t.k.pool->broadcast(t.scratch_values.data(), 1.0f, s.own().y.interior());  // y is {n, c, 1, 1}
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)index, (void)speaks;
        const Layer& l = *s.layer;
        Impl::Tile& in = *s.operands[0];
        if (t.is_input(&in)) return;
        t.to_host(s.own().dy.interior(), t.scratch_values);  // {n, c, 1, 1}: values[n * C + c]
        const std::int64_t area = t.global_dims(l.inputs[0]).points();
        t.tiles.interior_gradient(
            in, [&](View dx) { t.k.pool->broadcast(t.scratch_values.data(), 1.0f / static_cast<float>(area), dx); });
    }

    // A read of the input tile each way; the sums over the sample's spatial group.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.x}}, t.nx, t.nx * word);
        if (!t.data_in) c.backward_data = t.run(t.kernel(Phase::backward), {{"x", t.x}}, t.nx, t.nx * word);
        c.forward_sync =
            t.allreduce(t.sample_group, 8.0 * static_cast<double>(t.x[0] * t.x[1]), t.spans_nodes(t.sample_group));
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        p.a = p.filled(p.x);
        p.s1.assign(static_cast<std::size_t>(p.x.n * p.x.c), 0.0);
        p.v1.assign(static_cast<std::size_t>(p.x.n * p.x.c), 1.0f);
        if (p.phase == Phase::forward) p.run = [&p] { p.k.pool->global_sum(p.a.interior(), p.s1.data()); };
        if (p.phase == Phase::backward) p.run = [&p] { p.k.pool->broadcast(p.v1.data(), 0.5f, p.a.interior()); };
    }
};

}  // namespace

const KindRules& rows::global_avgpool() {
    static const GlobalAvgpool row;
    return row;
}

}  // namespace dsl::backend
