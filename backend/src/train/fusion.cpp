// A ReLU fused into the layer it reads: where a convolution, a batch norm or a sum of two tensors is read by a
// ReLU alone, training's forward writes the ReLU's output in the same pass over memory as its own values (a
// convolution before its outputs leave the kernel), which then go unwritten. Nothing else would read them: the
// ReLU's backward reads its output (it is positive where its input is), a convolution's and batch norm's
// backward read their input, and add's reads none. The values are bit for bit the two layers' one after the
// other. Evaluation and prediction run them apart, since they may read any layer.
#include "trainer_impl.hpp"

namespace dsl::backend {

// Slot::fused_relu of each convolution, batch norm and add that its ReLU reads alone, as the plan's paths say
// (scheduler/src/paths.cpp): the ReLU comes next, reads their own tile (no copy in another split, nor a sum of
// partial ones) over the same box, and neither is recomputed (a recomputed ReLU would read what the fused
// forward never wrote); a layer kept in 16 bits only with a plain ReLU kept in the same type, whose rounded
// values are then those of the two apart (relu_fuses_keeping).
void Trainer::Impl::fuse_relus() {
    for (std::size_t r = 1; r < slots.size(); ++r)
        if (paths[r - 1].on(scheduler::PathKind::relu_fused)) slots[r - 1].fused_relu = static_cast<int>(r);
}

// Whether this forward writes slot s's ReLU in its place: a training step's, where s has one (fused_relu).
bool Trainer::Impl::writes_relu(const Slot& s, bool training) const { return s.fused_relu >= 0 && training; }

// Layer s's forward over `part` of its own tile: `alone` writes its output there. Where a ReLU reads it alone
// and the step trains, `fused` writes the ReLU's output over that part instead, given its view and slope, and
// says whether the kernels fused the two; where they did not (for this kernel set, or this problem), `alone`
// and the ReLU's kernel run one after the other into it. The ReLU has nothing left to do (writes_relu).
void Trainer::Impl::forward_fused(Slot& s, const Box& part, bool training,
                                  const std::function<bool(View, float)>& fused, const std::function<void()>& alone) {
    if (!writes_relu(s, training)) return alone();
    Slot& r = slots[static_cast<std::size_t>(s.fused_relu)];
    const View relu = view_of(r.own().y, r.own(), part);
    const float slope = activation_slope(*r.layer);
    if (!fused(relu, slope)) {
        alone();
        k.activation->forward(elementwise(*r.layer), view_of(s.own().y, s.own(), part), slope, relu);
    }
}

}  // namespace dsl::backend
