// batchnorm: statistics per channel over the layer's group (the mini-batch, a sample group or the tile, as
// the schedule's bn= says), summed in double; running statistics for evaluation, as PyTorch keeps them.
#include "normalization.hpp"
#include "rows.hpp"

#include <algorithm>
#include <cmath>

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

// The number of elements per channel that a batch-norm group sums over.
double group_count(const Trainer::Impl& t, const Trainer::Impl::Slot& s) {
    const Box& b = s.operands[0]->box;
    const Dims& whole = t.global_dims(s.layer->inputs[0]);
    if (!s.group) return static_cast<double>(b.points());
    const auto kind = t.plan_of(s.own().spec.layer).group.kind;
    if (kind != scheduler::GroupPlan::Kind::samples) return static_cast<double>(whole.n * whole.points());
    return static_cast<double>(b.n.size() * whole.points());  // a sample group
}

class Batchnorm final : public Normalization {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        const Layer& l = *s.layer;
        const ConstView x = s.operands[0]->y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        const auto c0 = static_cast<std::size_t>(s.filters.lo);
        if (t.recomputing) {
            // The step's statistics, kept from its forward: the same values, and running ones not moved twice.
        } else if (pass.training) {
            t.stats.start_sums(channels);
            t.k.batchnorm->statistics(x, t.stats.a(), t.stats.b());
            t.stats.sum(s.group, s.operands[0]->leader);
            t.stats.from_sums(index, c0, channels, group_count(t, s), l.eps, l.momentum);
        } else {
            t.stats.from_running(index, c0, channels, l.eps);
        }
        const float *mean = t.stats.mean(index) + c0, *inv_std = t.stats.inv_std(index) + c0;
        t.forward_fused(
            s, s.own().box, pass.training,
            [&](View relu, float slope) {
                return t.k.batchnorm->forward_relu(x, mean, inv_std, s.w.data(), s.b.data(), slope, relu);
            },
            [&] { t.k.batchnorm->forward(x, mean, inv_std, s.w.data(), s.b.data(), s.own().y.interior()); });
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        Impl::Tile& in = *s.operands[0];
        const ConstView x = in.y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        const auto c0 = static_cast<std::size_t>(s.filters.lo);
        const float *mean = t.stats.mean(index) + c0, *inv_std = t.stats.inv_std(index) + c0;
        t.stats.start_sums(channels);
        t.k.batchnorm->backward_statistics(x, s.own().dy.interior(), mean, inv_std, t.stats.a(), t.stats.b());
        t.scale_shift_gradients(s, t.stats.sums_b(), t.stats.sums_a(), speaks);
        if (t.is_input(&in)) return;
        t.stats.sum(s.group, speaks);
        const double count = group_count(t, s);
        t.tiles.interior_gradient(in, [&](View dx) {
            t.k.batchnorm->backward(x, s.own().dy.interior(), mean, inv_std, s.w.data(), t.stats.a(), t.stats.b(),
                                    count, dx);
        });
    }

    bool runs_blocked() const override { return true; }

    // The scale and shift, and the statistics: the step's per channel, and the running ones.
    void initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const override {
        Normalization::initialize(t, s, index, stream);
        t.stats.start_running(index, static_cast<std::size_t>(s.layer->shape.dims[0]));
    }

    // Its scale and shift, the running statistics, and the steps they have seen (num_batches_tracked).
    std::vector<ExportedTensor> exported(const frontend::Layer& l, const frontend::Shape& input) const override {
        std::vector<ExportedTensor> out = Normalization::exported(l, input);
        const std::int64_t channels = input.dims.at(0);
        out.push_back({"running_mean", {channels}});
        out.push_back({"running_var", {channels}});
        out.push_back({"num_batches_tracked", {}, true});
        return out;
    }

    // Statistics per channel, summed (forward and backward) over the group bn= gives.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.y}}, 4 * t.ny, 3 * t.ny * word);
        c.backward_data = t.run(t.kernel(Phase::backward), {{"x", t.y}}, 6 * t.ny, 5 * t.ny * word);
        const double stats = 16.0 * static_cast<double>(t.y[1]);  // sums and sums of squares, doubles
        const scheduler::BatchNormStats mode = t.dist.bn.value_or(scheduler::BatchNormStats::batch);
        // Under F and C parts, only the processes that hold the same channels sum them.
        const std::int64_t channel_groups = scheduler::splits_channels(t.layer, t.split) ? t.split.c * t.split.f : 1;
        const std::int64_t group = mode == scheduler::BatchNormStats::batch     ? t.procs / channel_groups
                                   : mode == scheduler::BatchNormStats::spatial ? t.sample_group
                                                                                : 1;
        const bool spans = mode == scheduler::BatchNormStats::batch ? t.procs_span : t.spans_nodes(group);
        c.forward_sync = t.allreduce(group, stats, spans);
        if (!t.data_in) c.backward_sync = t.allreduce(group, stats, spans);
    }

    // The scale's and the shift's gradients, a channel each.
    double gradient_allreduce(const scheduler::CostTerms& t) const override {
        return 2.0 * t.allreduce(t.holders, static_cast<double>(t.y[1]) * word, t.holders_span);
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        p.a = p.filled(p.x);
        p.b = p.filled(p.x);
        p.c = p.zeros(p.x);
        const auto ch = static_cast<std::size_t>(p.x.c);
        p.v1.assign(ch, 0.0f);                      // mean
        p.v2.assign(ch, 1.0f);                      // inverse standard deviation
        p.p1 = p.constant(vector_of(p.x.c), 1.0f);  // gamma
        p.p2 = p.zeros(vector_of(p.x.c));           // beta
        p.s1.assign(ch, 0.0);
        p.s2.assign(ch, 0.0);
        const double count = static_cast<double>(p.x.n * p.x.points());
        if (p.phase == Phase::forward)
            p.run = [&p] {
                p.k.batchnorm->statistics(p.a.interior(), p.s1.data(), p.s2.data());
                p.k.batchnorm->forward(p.a.interior(), p.v1.data(), p.v2.data(), p.p1.data(), p.p2.data(),
                                       p.c.interior());
            };
        if (p.phase == Phase::backward)
            p.run = [&p, count] {
                p.k.batchnorm->backward_statistics(p.a.interior(), p.b.interior(), p.v1.data(), p.v2.data(),
                                                   p.s1.data(), p.s2.data());
                p.k.batchnorm->backward(p.a.interior(), p.b.interior(), p.v1.data(), p.v2.data(), p.p1.data(),
                                        p.s1.data(), p.s2.data(), count, p.c.interior());
            };
    }
};

}  // namespace

const KindRules& rows::batchnorm() {
    static const Batchnorm row;
    return row;
}

}  // namespace dsl::backend
