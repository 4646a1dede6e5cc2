// groupnorm: statistics per sample and group of channels, over every place of the sample (a volume's depth
// too), summed over the processes that hold the sample (the plan's sample group); biased variance, as
// PyTorch's.
#include "normalization.hpp"
#include "rows.hpp"

#include <algorithm>
#include <cmath>

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

// The elements of each (sample, group) over the whole tensor: C / G channels of every place.
double groupnorm_count(const Trainer::Impl& t, const Trainer::Impl::Slot& s) {
    const Dims& whole = t.global_dims(s.layer->inputs[0]);
    return static_cast<double>(whole.c / s.layer->groups * whole.points());
}

// The groups of a group norm's tile: all of them, or those of its block of channels (which never straddles
// one: the checker sees to it).
std::int64_t groups_of(const Trainer::Impl& t, const Trainer::Impl::Slot& s) {
    return s.layer->groups * s.filters.size() / t.global_dims(s.layer->inputs[0]).c;
}

class Groupnorm final : public Normalization {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)pass;
        const ConstView x = s.operands[0]->y.interior();
        const std::int64_t tile_groups = groups_of(t, s);
        const auto stats = static_cast<std::size_t>(x.dims.n * tile_groups);
        t.stats.start_sums(stats);
        t.k.groupnorm->statistics(x, tile_groups, t.stats.a(), t.stats.b());
        t.stats.sum(s.group, s.operands[0]->leader);
        t.stats.from_sums(index, 0, stats, groupnorm_count(t, s), s.layer->eps, -1.0);  // biased, as PyTorch's
        t.k.groupnorm->forward(x, tile_groups, t.stats.mean(index), t.stats.inv_std(index), s.w.data(), s.b.data(),
                               s.own().y.interior());
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        Impl::Tile& in = *s.operands[0];
        const ConstView x = in.y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        const std::int64_t tile_groups = groups_of(t, s);
        const auto stats = static_cast<std::size_t>(x.dims.n * tile_groups);
        const float *mean = t.stats.mean(index), *inv_std = t.stats.inv_std(index);
        std::vector<double> d_beta(channels, 0.0), d_gamma(channels, 0.0);
        t.stats.start_sums(stats);
        t.k.groupnorm->backward_statistics(x, s.own().dy.interior(), tile_groups, mean, inv_std, s.w.data(),
                                           d_beta.data(), d_gamma.data(), t.stats.a(), t.stats.b());
        t.scale_shift_gradients(s, d_gamma, d_beta, speaks);
        if (t.is_input(&in)) return;
        t.stats.sum(s.group, speaks);
        const double count = groupnorm_count(t, s);
        t.tiles.interior_gradient(in, [&](View dx) {
            t.k.groupnorm->backward(x, s.own().dy.interior(), tile_groups, mean, inv_std, s.w.data(), t.stats.a(),
                                    t.stats.b(), count, dx);
        });
    }

    // Batch norm's kernels' work; the statistics are per sample and group, summed over the sample's spatial
    // group; the weight gradients are allreduced as every layer's with parameters.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        const std::vector<std::int64_t> fields{t.layer.groups};
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.y}, {"g", fields}}, 4 * t.ny, 3 * t.ny * word);
        if (!t.data_in)
            c.backward_data = t.run(t.kernel(Phase::backward), {{"x", t.y}, {"g", fields}}, 6 * t.ny, 5 * t.ny * word);
        const double stats = 16.0 * static_cast<double>(t.y[0] * t.layer.groups);
        const bool spans = t.spans_nodes(t.sample_group);
        c.forward_sync = t.allreduce(t.sample_group, stats, spans);
        if (!t.data_in) c.backward_sync = t.allreduce(t.sample_group, stats, spans);
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n || p.field("g").empty() || p.field("g")[0] <= 0 || p.x.c % p.field("g")[0] != 0) return;
        const std::int64_t groups = p.field("g")[0];
        p.a = p.filled(p.x);
        p.b = p.filled(p.x);
        p.c = p.zeros(p.x);
        const auto stats = static_cast<std::size_t>(p.x.n * groups);
        p.v1.assign(stats, 0.0f);                   // mean
        p.v2.assign(stats, 1.0f);                   // inverse standard deviation
        p.p1 = p.constant(vector_of(p.x.c), 1.0f);  // gamma
        p.p2 = p.zeros(vector_of(p.x.c));           // beta
        p.s1.assign(stats, 0.0);
        p.s2.assign(stats, 0.0);
        const double count = static_cast<double>(p.x.c / groups * p.x.points());
        if (p.phase == Phase::forward)
            p.run = [&p, groups] {
                p.k.groupnorm->statistics(p.a.interior(), groups, p.s1.data(), p.s2.data());
                p.k.groupnorm->forward(p.a.interior(), groups, p.v1.data(), p.v2.data(), p.p1.data(), p.p2.data(),
                                       p.c.interior());
            };
        p.s3.assign(static_cast<std::size_t>(p.x.c), 0.0);  // d(beta), d(gamma)
        p.s4.assign(static_cast<std::size_t>(p.x.c), 0.0);
        if (p.phase == Phase::backward)
            p.run = [&p, groups, count] {
                p.k.groupnorm->backward_statistics(p.a.interior(), p.b.interior(), groups, p.v1.data(), p.v2.data(),
                                                   p.p1.data(), p.s3.data(), p.s4.data(), p.s1.data(), p.s2.data());
                p.k.groupnorm->backward(p.a.interior(), p.b.interior(), groups, p.v1.data(), p.v2.data(), p.p1.data(),
                                        p.s1.data(), p.s2.data(), count, p.c.interior());
            };
    }
};

}  // namespace

const KindRules& rows::groupnorm() {
    static const Groupnorm row;
    return row;
}

}  // namespace dsl::backend
