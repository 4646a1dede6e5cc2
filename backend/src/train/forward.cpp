// The forward pass: every layer in the network's order by its kind's row (backend/src/kinds/), windowed
// layers over their input's tile (with the plan's overlap of the halo exchange and the interior's compute),
// a recomputed layer's values where the plan puts them.
#include "../kinds/kind.hpp"
#include "trainer_impl.hpp"

namespace dsl::backend {

// `read` of a windowed layer's input tile (for its whole own tile, the plan's `read`; a convolution's of a
// blocked tile, window_read's box), its padding set.
ConstView Trainer::Impl::windowed_input(const Layer& l, int index, const Box& read) {
    Tile& in = *slots[static_cast<std::size_t>(index)].operands[0];
    tiles.set_padding(in, rules_of(l.op).padding());
    return view_of(in.y, in, read);
}

double Trainer::Impl::forward(DataSource& data, std::int64_t first, bool training) {
    step_first = first;
    step_training = training;
    step_data = &data;
    exchanges.begin_step();
    timeline.begin_step(slots.size());
    if (training) tiles.clear_gradients(-1);  // a loss writes its logits' gradient in forward
    double loss = 0.0;
    losses.clear();
    for (std::size_t i = 0; i < slots.size(); ++i) {
        const auto began = timeline.begin_layer();
        if (slots[i].layer->op != OpKind::label) timeline.mark(Phase::forward, Kind::forward, static_cast<int>(i));
        forward_layer(data, first, training, i, loss);
        timeline.end_layer(Phase::forward, static_cast<int>(i), began);
    }
    return loss;
}

void Trainer::Impl::forward_layer(DataSource& data, std::int64_t first, bool training, std::size_t i, double& loss) {
    Slot& s = slots[i];
    const Layer& l = *s.layer;
    const int index = static_cast<int>(i);
    // A recomputed layer's values go where the plan puts them in forward (backward moved them), and so do those
    // of a ReLU that this layer's forward writes (fusion.cpp), whose span starts here.
    if (!recomputing) {
        for (Tile* t : s.tiles)
            if (t->forward_buffer >= 0) bind(*t, t->forward_buffer);
        if (writes_relu(s, training))
            for (Tile* t : slots[static_cast<std::size_t>(s.fused_relu)].tiles)
                if (t->forward_buffer >= 0) bind(*t, t->forward_buffer);
    }
    const bool overlapped = overlaps(index);
    for (Tile* t : s.operands)
        if (t && !overlapped) ready(&data, first, *t);
    rules_of(l.op).forward(*this, s, index, ForwardPass{data, first, training, loss});
    // Rounded to its precision before anyone reads it, and kept so until backward widens it again (where no
    // backward reads it, the 16 bits go to scratch and only the rounding stays). A layer whose ReLU ran in its
    // forward wrote nothing of its own (fusion.cpp): the ReLU's output is rounded in its turn.
    if (plan_of(index).narrowed && !writes_relu(s, training)) {
        const View y = s.own().y.interior();
        mem.narrow(y, precision_of(index),
                   plan_of(index).stored
                       ? s.own().stored_bits()
                       : reinterpret_cast<std::uint16_t*>(tiles.scratch((y.dims.elements() + 1) / 2)));
    }
}

// A windowed layer's forward: over its whole tile once its input's halo is in, or overlapped with the halo's
// exchange where the plan says so.
void Trainer::Impl::windowed_layer(Slot& s, int index) {
    if (overlaps(index))
        overlapped_forward(s, index);
    else
        windowed_forward(s, s.own().box);
}

// The output of a windowed layer over `out` (global coordinates within its tile), from what its window
// reads of the input tile (its kind's row); `again`: the layer's kernel ran last, on another part (its weights
// unchanged).
void Trainer::Impl::windowed_forward(Slot& s, const Box& out, bool again) {
    rules_of(s.layer->op).forward_part(*this, s, out, again);
}

// Whether a convolution over a blocked tile computes its interior's outputs from a copy of the interior
// rather than over the whole tile (overlapped_forward): when the multiply-adds of computing the strips'
// outputs twice cost more than copying the interior's inputs and outputs through dense buffers. A float
// copied (read and written) costs about as many multiply-adds as the platform's analytic figures for one
// core say (stdlib/platforms/local.platform: 50 GFLOP/s, 8 GB/s: 25 multiply-adds a float). On mesh_stack_512
// under H=2, the convolutions at 1/16 and 1/32 of the image copy (the strips' multiply-adds 74 and 307 a
// float copied; their forward 0.3 and 1 ms shorter), those at 1/8 and larger do not (1 to 18).
bool Trainer::Impl::blocked_interior_copied(const Slot& s, const Tile& in, const scheduler::OverlapParts& parts) const {
    const Layer& l = *s.layer;
    if (l.op != OpKind::conv || parts.inner.empty()) return false;
    constexpr double multiply_adds_per_float = 25.0;
    const double channels_in = static_cast<double>(in.box.c.size()),
                 channels_out = static_cast<double>(s.own().box.c.size());
    double strips = 0.0;
    for (const Box& strip : parts.strips) strips += static_cast<double>(strip.points());
    const double twice = strips * channels_out * channels_in * static_cast<double>(product(l.kernel));
    const Box read = scheduler::window_input(l, parts.inner, in.box.c);
    const double copied = static_cast<double>(read.meet(in.box).points()) * channels_in +
                          static_cast<double>(parts.inner.points()) * channels_out;
    return copied * multiply_adds_per_float < twice;
}

// Posts the input's halo exchange, computes the outputs whose windows lie within what this process
// holds (its interior, and padding at the tensor's border), then, once the halo is in, the strips that read
// it (the plan's overlap).
void Trainer::Impl::overlapped_forward(Slot& s, int index) {
    const scheduler::OverlapParts& parts = plan_of(index).overlap;
    Tile& in = *s.operands[0];
    tiles.set_padding(in, rules_of(s.layer->op).padding());
    exchanges.start_gather(in);
    // Of a blocked tile, a part's view is not dense, and oneDNN would copy the interior in and its outputs out
    // (blocked_interior_copied). Where that costs more than computing the strips twice, the interior's outputs
    // are computed with the rest, by a window over the whole tile (the one view of it that oneDNN reads in
    // place), from the last step's halo, and the strips again once this step's is in. (Computing everything
    // once, after the halo, took 1.009 and 1.017 of one process's step on two threads on mesh_stack_512 under
    // H=2, against 1.036 and 1.047 this way, bench/scaling.sh threads: but it overlaps nothing.)
    const Box& first = in.lanes == 1 || blocked_interior_copied(s, in, parts) ? parts.inner : s.own().box;
    bool again = !first.empty();
    if (again) windowed_forward(s, first);
    exchanges.finish_gather(in);
    for (const Box& strip : parts.strips) {
        windowed_forward(s, strip, again);
        again = true;
    }
}

}  // namespace dsl::backend
