// A ReLU fused into the layer it reads: where a batch norm or a sum of two tensors is read by a ReLU alone,
// training's forward writes the ReLU's output in the same pass over memory as its own values, which then go
// unwritten. Nothing else would read them: the ReLU's backward reads its output (it is positive where its
// input is), batch norm's backward reads its input, and add's reads none. The values are bit for bit the two
// layers' one after the other. Evaluation and prediction run them apart, since they may read any layer.
#include "trainer_impl.hpp"

#include <dsl/scheduler/recompute.hpp>

namespace dsl::backend {

// Slot::fused_relu of each batch norm and add that its ReLU reads alone: the ReLU comes next, reads their own
// tile (no copy in another split) over the same box; neither is recomputed, in memory others share, or kept
// in 16 bits (a recomputed ReLU would read what the fused forward never wrote, and 16 bits round in between).
void Trainer::Impl::fuse_relus() {
    std::vector<bool> recomputed(slots.size(), false);
    for (std::size_t i = 0; i < slots.size(); ++i)
        for (int q : plan_of(static_cast<int>(i)).recompute_before) recomputed[static_cast<std::size_t>(q)] = true;
    const auto plain = [&](int i) {
        const Tile& t = slots[static_cast<std::size_t>(i)].own();
        return !recomputed[static_cast<std::size_t>(i)] && !plan_of(i).narrowed && t.forward_buffer < 0 &&
               t.backward_buffer < 0 && !t.partial;
    };
    for (int r = 1; r < static_cast<int>(slots.size()); ++r) {
        Slot& relu = slots[static_cast<std::size_t>(r)];
        Slot& before = slots[static_cast<std::size_t>(r - 1)];
        const Layer& l = *relu.layer;
        const OpKind op = before.layer->op;
        if (!scheduler::backward_reads_output(l) || l.inputs.size() != 1 || l.inputs[0] != r - 1) continue;
        if (op != OpKind::batchnorm && !(op == OpKind::add && before.layer->inputs.size() == 2)) continue;
        if (before.tiles.size() != 1 || before.own().readers != 1 || relu.operands[0] != &before.own()) continue;
        if (!(before.own().box == relu.own().box) || !plain(r - 1) || !plain(r)) continue;
        before.fused_relu = r;
    }
}

// The forward of a layer that its ReLU reads alone, in training: `both` writes the ReLU's output, given its
// slope, and says whether the kernels fused the two. False (the layer writes its own output, the ReLU runs
// after it) where nothing is fused.
bool Trainer::Impl::write_relu(Slot& s, bool training, const std::function<bool(View, float)>& both) {
    s.wrote_relu = false;
    if (s.fused_relu < 0 || !training || recomputing) return false;
    Slot& relu = slots[static_cast<std::size_t>(s.fused_relu)];
    s.wrote_relu = both(relu.own().y.interior(), activation_slope(*relu.layer));
    return s.wrote_relu;
}

}  // namespace dsl::backend
