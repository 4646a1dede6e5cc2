// Channel and filter parallelism (a split's F and C parts): a layer with filters computes with its block of
// the whole weights every process keeps (its filters' block of F by its input channels' block of C), and
// places its weight gradients in the whole ones, zero elsewhere; where each process's blocks lie.
#include "trainer_impl.hpp"

namespace dsl::backend {

// Which blocks each layer uses: its own tile's channels (its filters', or a normalization's), and its input
// tile's, where the split cuts its channels.
void Trainer::Impl::place_blocks() {
    for (std::size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        const Layer& l = *s.layer;
        if (l.op == OpKind::label || l.is_loss() || l.is_data()) continue;
        s.channel_split = scheduler::splits_channels(l, *plan.layers[i].dist.split);
        s.filters = s.own().box.c;
        s.inputs = s.operands.empty() || !s.operands[0] ? s.filters : s.operands[0]->box.c;
        // Of the C processes that hold partial sums of a tile, the first adds the bias.
        s.adds_bias = !s.own().partial || scheduler::coords(*plan.layers[i].dist.split, plan.rank).c == 0;
        if (!s.channel_split || s.w.size() == 0 || l.op == OpKind::batchnorm || l.op == OpKind::groupnorm) continue;
        const Dims d = weight_block(s, s.w).dims;
        s.block = Tensor(d, {}, mem);
        s.dblock = Tensor(d, {}, mem);
    }
}

// The block of a whole weight tensor `w` (the weights, or their gradient) that this process computes with:
// a convolution's {F, C, kernel} and a transposed convolution's {C, F, kernel} at its filters and input
// channels; a fully connected layer's {F, K} at its filters and the inputs of its input channels (K is the
// input's channels times its points, channel by channel).
View Trainer::Impl::weight_block(Slot& s, Tensor& w) const {
    const View v = w.interior();
    const Dims& d = v.dims;
    const Index origin = Index::filled(d.rank(), 0);
    const Range f = s.filters, c = s.inputs;
    switch (s.layer->op) {
        case OpKind::conv: return v.sub(f.lo, c.lo, origin, Dims{f.size(), c.size(), d.space});
        case OpKind::deconv: return v.sub(c.lo, f.lo, origin, Dims{c.size(), f.size(), d.space});
        case OpKind::fc: {
            const std::int64_t per_channel = d.c / global_dims(s.layer->inputs[0]).c;
            return v.sub(f.lo, c.lo * per_channel, origin, Dims{f.size(), c.size() * per_channel, {}});
        }
        default: DSL_INTERNAL_CHECK(false, "weight blocks of a layer without filters");
    }
    return v;
}

// The weights a layer computes with: all of them, or (under F and C parts) its block, copied once a step.
ConstView Trainer::Impl::weights_of(Slot& s) {
    if (!s.channel_split) return s.w.interior();
    if (s.block_step != step_index) {
        k.eltwise->copy(weight_block(s, s.w), s.block.interior());
        s.block_step = step_index;
    }
    return s.block.interior();
}

// The bias a layer with filters adds: none, its filters' part, or none on the C processes after the first.
const float* Trainer::Impl::bias_of(Slot& s) const {
    if (!s.layer->bias || !s.adds_bias) return nullptr;
    return s.b.data() + (s.channel_split ? s.filters.lo : 0);
}

}  // namespace dsl::backend
