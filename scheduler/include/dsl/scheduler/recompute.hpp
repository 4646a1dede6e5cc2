// Recomputation's timeline, shared by the plan (which places the values in memory) and the model (which
// costs them): a recomputed layer's output is dropped after forward's last reader and made again in
// backward, with the recomputed layers it reads, just before the first layer whose backward reads it. A layer
// stored in 16 bits (precision=bfloat16 or float16) follows the same timeline: its float32 values live in
// shared memory while forward reads them, and are widened again from the 16-bit copy kept in between, just
// before the first backward that reads them (without its inputs: nothing is computed again).
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/distribution.hpp>

#include <cstddef>

#include <vector>

namespace dsl::scheduler {

// Whether a layer's output can be recomputed in backward: not data (read again, not recomputed) and not a
// loss (whose value backward does not read).
bool recomputable(const frontend::Layer& layer);

// Whether a layer's backward reads its own output rather than its input: relu, and leaky_relu of a slope of
// 0 or more, whose output is positive exactly where their input is. Their input need not be kept (or made
// again) for them, as PyTorch's ReLU keeps only its result.
bool backward_reads_output(const frontend::Layer& layer);

// Whether training may run `relu`, the reader of `layer`'s output, in `layer`'s forward pass, leaving
// `layer`'s own output unwritten: a ReLU whose backward reads its output, after a convolution, a batch norm or
// a sum of two (a sum of more rounds between its additions). The trainer (fuse_relus) and the model
// (Model::relu_fused) add what their tiles and schedules require.
bool relu_fuses_into(const frontend::Layer& layer, const frontend::Layer& relu);

// Steps of a training step's timeline: forward of layer i is step i; the backward of layer L - 1 - j is step
// L + j, and the layers recomputed before it run at that step too.
struct StepSpan {
    int first = 0, last = -1;  // both included; empty when last < first
    bool empty() const { return last < first; }
    bool meets(const StepSpan& o) const { return !empty() && !o.empty() && first <= o.last && o.first <= last; }
};

// The steps over which a gradient is in memory, from its span in backward's order (TilePlan::grad_first and
// grad_last: 0 is backward's first step) in a network of `layers` layers. A loss writes its input's gradient
// in forward (a first of -1), zeroed where it is accumulated when forward starts: from step 0.
inline StepSpan gradient_steps(int first, int last, int layers) {
    return {first < 0 ? 0 : layers + first, layers + last};
}

struct RecomputeTimeline {
    std::vector<bool> recomputed;          // per layer: dropped after forward and made again (recomputable layers)
    std::vector<bool> kept;                // per layer: asked to be recomputed, kept as a segment's start
    std::vector<bool> narrowed;            // per layer: kept in 16 bits (and not recomputed)
    std::vector<StepSpan> forward, again;  // per recomputed layer: in memory in forward, and again in backward
    // Per layer: the recomputed layers whose forward runs again (or the narrowed ones widened again) just before
    // its backward, in that order.
    std::vector<std::vector<int>> before;
    bool any() const;
    bool dropped(std::size_t i) const { return recomputed[i] || narrowed[i]; }
};

// Whether a ReLU that reads a layer alone may run in that layer's forward (the trainer's fusion.cpp), as far as
// what is kept of the two goes: neither is recomputed (a recomputed ReLU would read what the fused forward
// never wrote); and where the layer is kept in 16 bits (`narrowed`, of `precision`), so is the ReLU, in the same
// type, and it is a plain one (`plain`, slope 0): rounding keeps order and 0, so it commutes with max(x, 0), and
// the ReLU's 16-bit values are those of the two apart. A leaky ReLU's slope would multiply the unrounded values.
struct Keeping {
    bool recomputed = false, narrowed = false;
    Precision precision = Precision::float32;
};
inline bool relu_fuses_keeping(const Keeping& layer, const Keeping& relu, bool plain) {
    if (layer.recomputed || relu.recomputed) return false;
    return !layer.narrowed || (plain && relu.narrowed && relu.precision == layer.precision);
}

// The timeline of recomputing the layers `recompute` marks and of keeping those `narrow` marks in 16 bits
// (others, and those that are not recomputable, are ignored; recomputation wins where both are marked). A
// layer's values in forward live from its step to its last reader's (the end of forward when nobody reads
// them); in backward from when they are made again to their last reader's backward (or a recomputation that
// reads them).
RecomputeTimeline recompute_timeline(const frontend::Network& net, const std::vector<bool>& recompute,
                                     const std::vector<bool>& narrow = {});

// Segment checkpointing (Chen et al. 2016, PyTorch's checkpoint_sequential): of the layers asked to be
// recomputed, those whose values are kept after all, so that backward makes each run of dropped layers (a
// segment) again from the kept values before it, just before the segment's backward, and frees it as its
// backward goes, rather than every asked layer back to the data at once. Of candidate sets of kept layers (none;
// the ReLUs, whose backward reads their own output; a value every `budget` bytes of dropped values in the
// network's order, for budgets from all of them to a 32nd), the one whose step holds the least memory (the values
// kept, and the buffers that dropped values and gradients share); where that ties, the one that keeps the fewest
// (what was asked: keeping a layer that saves nothing is not what recompute=on means), then the one that
// recomputes the fewest bytes.
// `bytes`: each layer's output tile, the same on every process (the first process's), so that every process
// keeps the same layers.
std::vector<bool> segment_starts(const frontend::Network& net, const std::vector<bool>& asked,
                                 const std::vector<bool>& narrow, const std::vector<double>& bytes);

// The timeline for the layers' distributions (recompute=on, and a precision that narrows; `dist(i)` is layer
// i's), the asked layers kept where segment_starts says, of output tiles of `bytes` (see there).
template <typename DistOf>
RecomputeTimeline timeline_of(const frontend::Network& net, DistOf&& dist, const std::vector<double>& bytes) {
    std::vector<bool> asked(net.layers.size()), narrow(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        asked[i] = dist(i).recompute.value_or(false);
        narrow[i] = dist(i).narrowed();
    }
    const std::vector<bool> kept = segment_starts(net, asked, narrow, bytes);
    std::vector<bool> dropped(asked);
    for (std::size_t i = 0; i < dropped.size(); ++i) dropped[i] = asked[i] && !kept[i];
    RecomputeTimeline t = recompute_timeline(net, dropped, narrow);
    t.kept = kept;
    return t;
}

}  // namespace dsl::scheduler
