// The backward pass: every layer in reverse, each first recomputing what the plan recomputes for it, then
// collecting its gradient from its readers and writing its inputs' (and its weights', whose allreduce starts
// at once) by its kind's row (backend/src/kinds/).
#include "../kinds/kind.hpp"
#include "trainer_impl.hpp"

namespace dsl::backend {

void Trainer::Impl::backward() {
    for (int index = static_cast<int>(slots.size()) - 1; index >= 0; --index) {
        const auto began = timeline.begin_layer();
        const Slot& s = slots[static_cast<std::size_t>(index)];
        if (!s.layer->is_data())
            timeline.mark(Phase::backward, rules_of(s.layer->op).first_backward_part(*this, s), index);
        recompute_for(index);
        backward_layer(index);
        timeline.end_layer(Phase::backward, index, began);
    }
}

// Runs again the forward of the recomputed layers whose values the backward of layer `index` reads (the
// plan's order: each after those it reads), and widens the narrowed ones from their 16 bits, into the memory
// the plan gives them in backward, and fills their tiles' halos and copies as forward did. Every process
// runs the same ones in the same order, so their exchanges meet.
void Trainer::Impl::recompute_for(int index) {
    const std::vector<int>& layers = plan_of(index).recompute_before;
    if (layers.empty()) return;
    DSL_INTERNAL_CHECK(step_data, "recomputation without the step's data");
    recomputing = true;
    double unused = 0.0;
    for (int q : layers) {
        Slot& s = slots[static_cast<std::size_t>(q)];
        for (Tile* t : s.tiles) bind(*t, t->backward_buffer);
        if (plan_of(q).narrowed)
            mem.widen(s.own().stored_bits(), precision_of(q), s.own().y.interior());
        else
            forward_layer(*step_data, step_first, step_training, static_cast<std::size_t>(q), unused);
    }
    recomputing = false;
    for (int q : layers)
        for (Tile* t : slots[static_cast<std::size_t>(q)].tiles) exchanges.gather(*t);
}

void Trainer::Impl::backward_layer(int index) {
    Slot& s = slots[static_cast<std::size_t>(index)];
    const Layer& l = *s.layer;
    tiles.clear_gradients(static_cast<int>(slots.size()) - 1 - index);
    // Every reader has written its part of this layer's gradient: gather it from the margins and copies
    // where the readers left it.
    if (!l.is_data()) {
        tiles.zero_unwritten(s.own());  // no reader wrote it; halos and copies' gradients add to it
        for (Tile* t : s.tiles) exchanges.scatter(*t);
    }
    optimizer.progress();  // the weight-gradient allreduces started so far
    timeline.observe_allreduces(false);
    const bool speaks = l.op == OpKind::label ? true : s.own().leader;
    rules_of(l.op).backward(*this, s, index, speaks);
}

}  // namespace dsl::backend
