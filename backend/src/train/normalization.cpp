// Batch norm (statistics per channel over the layer's group) and group norm (per sample and group of
// channels, over the processes that hold the sample: the plan's sample group), forward beside backward; the
// sums are in double.
#include "trainer_impl.hpp"

#include <algorithm>
#include <cmath>

namespace dsl::backend {

// The number of elements per channel that a batch-norm group sums over.
double Trainer::Impl::group_count(const Slot& s) const {
    const Box& b = s.operands[0]->box;
    const Dims& whole = global_dims(s.layer->inputs[0]);
    if (!s.group) return static_cast<double>(b.points());
    const auto kind = plan_of(s.own().spec.layer).group.kind;
    if (kind != scheduler::GroupPlan::Kind::samples) return static_cast<double>(whole.n * whole.points());
    return static_cast<double>(b.n.size() * whole.points());  // a sample group
}

void Trainer::Impl::batchnorm_forward(Slot& s, bool training) {
    const Layer& l = *s.layer;
    const ConstView x = s.operands[0]->y.interior();
    const auto channels = static_cast<std::size_t>(x.dims.c);
    const auto c0 = static_cast<std::size_t>(s.filters.lo);
    float *mean_of = s.mean.data() + c0, *inv_std = s.inv_std.data() + c0;
    float *running_mean = s.running_mean.data() + c0, *running_var = s.running_var.data() + c0;
    if (recomputing) {
        // The step's statistics, kept from its forward: the same values, and running ones not moved twice.
    } else if (training) {
        sums_a.assign(channels, 0.0);
        sums_b.assign(channels, 0.0);
        k.batchnorm->statistics(x, sums_a.data(), sums_b.data());
        group_sum(s, s.operands[0]->leader);
        const double count = group_count(s);
        for (std::size_t c = 0; c < channels; ++c) {
            const double mean = sums_a[c] / count;
            const double var = std::max(0.0, sums_b[c] / count - mean * mean);
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
    forward_fused(
        s, s.own().box, training,
        [&](View relu, float slope) {
            return k.batchnorm->forward_relu(x, mean_of, inv_std, s.w.data(), s.b.data(), slope, relu);
        },
        [&] { k.batchnorm->forward(x, mean_of, inv_std, s.w.data(), s.b.data(), s.own().y.interior()); });
}

// Sums sums_a and sums_b over the slot's group; a replica that does not speak adds nothing.
void Trainer::Impl::group_sum(Slot& s, bool speaks) {
    if (!s.group) return;
    if (!speaks) std::fill(sums_a.begin(), sums_a.end(), 0.0), std::fill(sums_b.begin(), sums_b.end(), 0.0);
    std::vector<double> both(sums_a);
    both.insert(both.end(), sums_b.begin(), sums_b.end());
    wait(
        Kind::wait_sum, [&] { s.group->allreduce(both.data(), static_cast<std::int64_t>(both.size())); },
        static_cast<std::int64_t>(both.size() * sizeof(double)));
    std::copy_n(both.begin(), sums_a.size(), sums_a.begin());
    std::copy(both.begin() + static_cast<std::ptrdiff_t>(sums_a.size()), both.end(), sums_b.begin());
}

// This tile's part of a normalization's d(gamma) and d(beta), per channel of its block, into the scale's and
// shift's gradients; the allreduce over the block's holders adds the rest.
void Trainer::Impl::scale_shift_gradients(Slot& s, const std::vector<double>& d_gamma,
                                          const std::vector<double>& d_beta, bool speaks) {
    const std::size_t channels = d_beta.size();
    scratch_values.resize(2 * channels);
    for (std::size_t c = 0; c < channels; ++c) {
        scratch_values[c] = static_cast<float>(d_beta[c]);
        scratch_values[channels + c] = static_cast<float>(d_gamma[c]);
    }
    const auto count = static_cast<std::int64_t>(channels);
    mem.upload(scratch_values.data(), s.db.data(), count);
    mem.upload(scratch_values.data() + channels, s.dw.data(), count);
    allreduce_gradients(s, speaks);
}

void Trainer::Impl::batchnorm_backward(Slot& s, bool speaks) {
    Tile& in = *s.operands[0];
    const ConstView x = in.y.interior();
    const auto channels = static_cast<std::size_t>(x.dims.c);
    const auto c0 = static_cast<std::size_t>(s.filters.lo);
    sums_a.assign(channels, 0.0);
    sums_b.assign(channels, 0.0);
    k.batchnorm->backward_statistics(x, s.own().dy.interior(), s.mean.data() + c0, s.inv_std.data() + c0, sums_a.data(),
                                     sums_b.data());
    scale_shift_gradients(s, sums_b, sums_a, speaks);
    if (is_input(&in)) return;
    group_sum(s, speaks);
    const double count = group_count(s);
    interior_gradient(in, [&](View dx) {
        k.batchnorm->backward(x, s.own().dy.interior(), s.mean.data() + c0, s.inv_std.data() + c0, s.w.data(),
                              sums_a.data(), sums_b.data(), count, dx);
    });
}

// The elements of each (sample, group) over the whole tensor: C / G channels of every row and column.
double Trainer::Impl::groupnorm_count(const Slot& s) const {
    const Dims& whole = global_dims(s.layer->inputs[0]);
    return static_cast<double>(whole.c / s.layer->groups * whole.points());
}

// The groups of a group norm's tile: all of them, or those of its block of channels (which never straddles
// one: the checker sees to it).
std::int64_t Trainer::Impl::groups_of(const Slot& s) const {
    return s.layer->groups * s.filters.size() / global_dims(s.layer->inputs[0]).c;
}

void Trainer::Impl::groupnorm_forward(Slot& s) {
    const ConstView x = s.operands[0]->y.interior();
    const std::int64_t tile_groups = groups_of(s);
    const auto stats = static_cast<std::size_t>(x.dims.n * tile_groups);
    sums_a.assign(stats, 0.0);
    sums_b.assign(stats, 0.0);
    k.groupnorm->statistics(x, tile_groups, sums_a.data(), sums_b.data());
    group_sum(s, s.operands[0]->leader);
    const double count = groupnorm_count(s);
    s.mean.resize(stats);
    s.inv_std.resize(stats);
    for (std::size_t g = 0; g < stats; ++g) {
        const double mean = sums_a[g] / count;
        const double var = std::max(0.0, sums_b[g] / count - mean * mean);  // biased, as PyTorch's
        s.mean[g] = static_cast<float>(mean);
        s.inv_std[g] = static_cast<float>(1.0 / std::sqrt(var + s.layer->eps));
    }
    k.groupnorm->forward(x, tile_groups, s.mean.data(), s.inv_std.data(), s.w.data(), s.b.data(), s.own().y.interior());
}

void Trainer::Impl::groupnorm_backward(Slot& s, bool speaks) {
    Tile& in = *s.operands[0];
    const ConstView x = in.y.interior();
    const auto channels = static_cast<std::size_t>(x.dims.c);
    const std::int64_t tile_groups = groups_of(s);
    const auto stats = static_cast<std::size_t>(x.dims.n * tile_groups);
    std::vector<double> d_beta(channels, 0.0), d_gamma(channels, 0.0);
    sums_a.assign(stats, 0.0);
    sums_b.assign(stats, 0.0);
    k.groupnorm->backward_statistics(x, s.own().dy.interior(), tile_groups, s.mean.data(), s.inv_std.data(), s.w.data(),
                                     d_beta.data(), d_gamma.data(), sums_a.data(), sums_b.data());
    scale_shift_gradients(s, d_gamma, d_beta, speaks);
    if (is_input(&in)) return;
    group_sum(s, speaks);
    const double count = groupnorm_count(s);
    interior_gradient(in, [&](View dx) {
        k.groupnorm->backward(x, s.own().dy.interior(), tile_groups, s.mean.data(), s.inv_std.data(), s.w.data(),
                              sums_a.data(), sums_b.data(), count, dx);
    });
}

}  // namespace dsl::backend
