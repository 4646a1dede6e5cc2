// A convolution's weight gradient by blocks of filters: where the processes split the samples' space alone
// and share the layer's weights (Optimizer::place), each process computes the weight gradient of its share
// of the filters over the whole samples, from the layer's input and output gradient gathered whole in memory
// the processes share, rather than every filter's over its own tile, which the processes would then sum.
//
// Why: of a layer whose weights outweigh its activations (the deep end of a network: mesh_stack_512's 512 x
// 512 x 3 x 3 convolutions over 16 x 16 images), every process writing a whole weight gradient and reading
// the others' to sum them moves more memory than the multiply-adds leave time for: under H=2 on two cores the
// last block's convolutions took 10 to 20% longer in backward than on one process of two threads. Here each
// process writes the 1/P of the gradient that it updates, which nothing sums, and copies its tile of the
// activations in and the whole out. The multiply-adds are the same; each filter's gradient adds the whole
// samples' terms in one kernel call, as on one process.
#include "trainer_impl.hpp"

namespace dsl::backend {

// Whether layer `index` computes its weight gradient by blocks of filters: where the plan's paths say so (a
// convolution on the CPU's kernels, which pad a window themselves: Window::zeros_outside, whose weights the
// processes share, split over the samples' space alone, without periodic padding, each process's share of
// the filters whole blocks of 16, without loss scaling, which reads every process's whole gradient, and whose
// weights are at least as many floats as its input and output together: scheduler/src/paths.cpp), and its
// weights are in the memory they share and its tiles gathered there.
bool Trainer::Impl::weight_gradient_by_filters(int index) const {
    return paths[static_cast<std::size_t>(index)].on(scheduler::PathKind::filter_blocks) && optimizer.shares(index);
}

// The whole input and output gradient of each layer that computes its weight gradient by blocks of filters,
// in memory its processes share (collective: every process decides alike, in the same order).
void Trainer::Impl::place_filter_blocks() {
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (!paths[i].on(scheduler::PathKind::filter_blocks)) continue;
        Slot& s = slots[i];
        if (!optimizer.shares(static_cast<int>(i))) {
            paths[i].set(scheduler::PathKind::filter_blocks, false, "its weights are not shared on the node");
            continue;
        }
        const Tile& in = *s.operands[0];
        const Tile& own = s.own();
        const Dims x{in.box.n.size(), in.box.c.size(), global_dims(in.spec.layer).space};
        const Dims dy{own.box.n.size(), own.box.c.size(), global_dims(static_cast<int>(i)).space};
        std::shared_ptr<float> memory = comm.common_space(x.elements() + dy.elements());
        if (!memory) {
            paths[i].set(scheduler::PathKind::filter_blocks, false,
                         "the node's shared memory (/dev/shm) had no room for its tiles gathered whole");
            continue;
        }
        s.gathered = std::make_unique<Slot::Gathered>();
        s.gathered->memory = memory;
        s.gathered->x = Tensor::over(memory.get(), x, {}, in.lanes);
        s.gathered->dy = Tensor::over(memory.get() + x.elements(), dy, {}, own.lanes);
    }
}

// Layer `index`'s weight gradient for this process's share of its filters (the r-th of P equal parts, the
// share of the weights it updates: Optimizer::update), with its input's and output gradient's tiles gathered
// whole.
void Trainer::Impl::filter_block_weight_gradient(Slot& s, int index) {
    const Layer& l = *s.layer;
    Slot::Gathered& whole = *s.gathered;
    Tile& in = *s.operands[0];
    Tile& own = s.own();
    const auto part = [](Tensor& t, const Box& b) { return t.interior().sub(0, 0, b.origin(), b.dims()); };
    k.eltwise->copy(windowed_input(l, index, in.box), part(whole.x, in.box));
    k.eltwise->copy(own.dy.interior(), part(whole.dy, own.box));
    timeline.wait(Kind::wait_sum, [&] { comm.all(true); });  // every process's tiles are in

    Box out = own.box;
    const Dims& y = global_dims(index);
    for (int d = 0; d < out.space.rank(); ++d) out.space[d] = {0, y.space[d]};
    const Box read = scheduler::window_input(l, out, in.box.c);
    Window w = conv_window(s, in, read);
    w.zeros_outside = true;  // the padding beyond the input, which the kernels add
    Box x = read;            // what the outputs read of the input (not its last rows past a stride's reach)
    for (int d = 0; d < x.space.rank(); ++d) x.space[d] = x.space[d].meet({0, whole.x.dims().space[d]});
    const std::int64_t procs = comm.size(), filters = l.filters / procs, first = filters * comm.rank();
    const View dw = s.dw.interior();
    float* db = bias_gradient_of(s);
    conv_of(index).backward_weights(
        part(whole.x, x), whole.dy.interior().channels(first, filters),
        dw.sub(first, 0, Index::filled(dw.dims.space.rank(), 0), Dims{filters, dw.dims.c, dw.dims.space}),
        db ? db + first : nullptr, w);
    // No process writes the whole tensors again before every process has passed the update's meeting.
}

}  // namespace dsl::backend
