// Channel and filter parallelism (a split's F and C parts): each process holds its block of a layer's
// parameters, a layer with filters its filters' block by its input channels' (its F part by its C part), a
// normalization its channels'; where each block lies in the whole parameters, and who holds the same one.
#include "../kinds/kind.hpp"
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

// A layer's block of its whole weights (`s.whole`), as its kind lays them out (the whole of them where its
// channels are not split).
Block Trainer::Impl::weight_block(const Slot& s) const { return rules_of(s.layer->op).weight_block(*this, s); }

// A layer's block of its bias {1, F} (or a normalization's shift {1, C}): its filters' (or channels').
Block Trainer::Impl::bias_block(const Slot& s) const {
    const std::int64_t whole = rules_of(s.layer->op).bias_extent(s);
    return Block{{0, 1}, s.holders ? s.filters : Range{0, whole}, whole, 1, whole};
}

}  // namespace dsl::backend
