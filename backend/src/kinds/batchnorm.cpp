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
        (void)index;
        const Layer& l = *s.layer;
        const ConstView x = s.operands[0]->y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        const auto c0 = static_cast<std::size_t>(s.filters.lo);
        float *mean_of = s.mean.data() + c0, *inv_std = s.inv_std.data() + c0;
        float *running_mean = s.running_mean.data() + c0, *running_var = s.running_var.data() + c0;
        if (t.recomputing) {
            // The step's statistics, kept from its forward: the same values, and running ones not moved twice.
        } else if (pass.training) {
            t.sums_a.assign(channels, 0.0);
            t.sums_b.assign(channels, 0.0);
            t.k.batchnorm->statistics(x, t.sums_a.data(), t.sums_b.data());
            t.group_sum(s, s.operands[0]->leader);
            const double count = group_count(t, s);
            for (std::size_t c = 0; c < channels; ++c) {
                const double mean = t.sums_a[c] / count;
                const double var = std::max(0.0, t.sums_b[c] / count - mean * mean);
                mean_of[c] = static_cast<float>(mean);
                inv_std[c] = static_cast<float>(1.0 / std::sqrt(var + l.eps));
                // PyTorch's running variance is unbiased.
                const double unbiased = count > 1 ? var * count / (count - 1) : var;
                running_mean[c] = static_cast<float>((1 - l.momentum) * running_mean[c] + l.momentum * mean);
                running_var[c] = static_cast<float>((1 - l.momentum) * running_var[c] + l.momentum * unbiased);
            }
        } else {
            for (std::size_t c = 0; c < channels; ++c) {
                mean_of[c] = running_mean[c];
                inv_std[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + l.eps));
            }
        }
        t.forward_fused(
            s, s.own().box, pass.training,
            [&](View relu, float slope) {
                return t.k.batchnorm->forward_relu(x, mean_of, inv_std, s.w.data(), s.b.data(), slope, relu);
            },
            [&] { t.k.batchnorm->forward(x, mean_of, inv_std, s.w.data(), s.b.data(), s.own().y.interior()); });
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        (void)index;
        Impl::Tile& in = *s.operands[0];
        const ConstView x = in.y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        const auto c0 = static_cast<std::size_t>(s.filters.lo);
        t.sums_a.assign(channels, 0.0);
        t.sums_b.assign(channels, 0.0);
        t.k.batchnorm->backward_statistics(x, s.own().dy.interior(), s.mean.data() + c0, s.inv_std.data() + c0,
                                           t.sums_a.data(), t.sums_b.data());
        t.scale_shift_gradients(s, t.sums_b, t.sums_a, speaks);
        if (t.is_input(&in)) return;
        t.group_sum(s, speaks);
        const double count = group_count(t, s);
        t.interior_gradient(in, [&](View dx) {
            t.k.batchnorm->backward(x, s.own().dy.interior(), s.mean.data() + c0, s.inv_std.data() + c0, s.w.data(),
                                    t.sums_a.data(), t.sums_b.data(), count, dx);
        });
    }

    bool runs_blocked() const override { return true; }

    // The scale and shift, and the statistics: the step's per channel, and the running ones.
    void initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const override {
        Normalization::initialize(t, s, index, stream);
        const auto c = static_cast<std::size_t>(s.layer->shape.dims[0]);
        s.mean.assign(c, 0.0f);
        s.inv_std.assign(c, 1.0f);
        s.running_mean.assign(c, 0.0f);
        s.running_var.assign(c, 1.0f);
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
