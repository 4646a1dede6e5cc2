// Channel and filter parallelism (a split's F and C parts): each process holds its block of a layer's
// parameters, a layer with filters its filters' block by its input channels' (its F part by its C part), a
// normalization its channels'; where each block lies in the whole parameters, and who holds the same one.
#include "trainer_impl.hpp"

#include <algorithm>

namespace dsl::backend {

// Which blocks each layer holds: its own tile's channels (its filters', or a normalization's), and its input
// tile's, where the split cuts its channels; and the process group of each block's holders, one per split
// and block, made in the order of the layers, the same on every process.
void Trainer::Impl::place_blocks() {
    std::vector<std::pair<std::pair<scheduler::Split, std::int64_t>, Comm*>> made;
    for (std::size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        const Layer& l = *s.layer;
        if (l.op == OpKind::label || l.is_loss() || l.is_data()) continue;
        const scheduler::Split& split = *plan.layers[i].dist.split;
        const scheduler::Coords at = scheduler::coords(split, plan.rank);
        s.filters = s.own().box.c;
        s.inputs = s.operands.empty() || !s.operands[0] ? s.filters : s.operands[0]->box.c;
        // Of the C processes that hold partial sums of a tile, the first adds the bias.
        s.adds_bias = !s.own().partial || at.c == 0;
        if (!scheduler::splits_channels(l, split) || l.params == 0) continue;
        const std::pair key{split, at.f * split.c + at.c};
        auto it = std::find_if(made.begin(), made.end(), [&](const auto& m) { return m.first == key; });
        if (it == made.end()) {
            groups.push_back(comm.split_buffers(static_cast<int>(key.second)));
            holder_groups.push_back(groups.back().get());
            it = made.emplace(made.end(), key, groups.back().get());
        }
        s.holders = it->second;
    }
}

// Whether some layer's parameters are split in blocks: the same answer on every process.
bool Trainer::Impl::splits_weights() const { return !holder_groups.empty(); }

// A layer's block of its whole weights (`s.whole`): a convolution's {F, C, kernel} and a transposed
// convolution's {C, F, kernel} at its filters and input channels; a fully connected layer's {F, K} at its
// filters and the inputs of its input channels (K is the input's channels times its points, channel by
// channel); a normalization's scale {1, C} at its channels. The whole of them where its channels are not split.
Block Trainer::Impl::weight_block(const Slot& s) const {
    const Dims& d = s.whole;
    const bool split = s.holders != nullptr;
    const auto part = [&](const Range& r, std::int64_t whole) { return split ? r : Range{0, whole}; };
    switch (s.layer->op) {
        case OpKind::conv: return Block{part(s.filters, d.n), part(s.inputs, d.c), d.c, d.points(), d.elements()};
        case OpKind::deconv: return Block{part(s.inputs, d.n), part(s.filters, d.c), d.c, d.points(), d.elements()};
        case OpKind::fc: {
            const std::int64_t per_channel = d.c / global_dims(s.layer->inputs[0]).c;
            const Range c = part(s.inputs, d.c / per_channel);
            return Block{part(s.filters, d.n), {c.lo * per_channel, c.hi * per_channel}, d.c, 1, d.elements()};
        }
        case OpKind::batchnorm:
        case OpKind::groupnorm: return Block{{0, 1}, part(s.filters, d.c), d.c, 1, d.elements()};
        default: DSL_INTERNAL_CHECK(false, "weight blocks of a layer without parameters");
    }
    return {};
}

// A layer's block of its bias {1, F} (or a normalization's shift {1, C}): its filters' (or channels').
Block Trainer::Impl::bias_block(const Slot& s) const {
    const std::int64_t whole = s.layer->op == OpKind::batchnorm || s.layer->op == OpKind::groupnorm
                                   ? s.whole.c
                                   : static_cast<std::int64_t>(s.layer->filters);
    return Block{{0, 1}, s.holders ? s.filters : Range{0, whole}, whole, 1, whole};
}

}  // namespace dsl::backend
