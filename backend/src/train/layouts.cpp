// Which tiles keep their channels in blocks of 16 (view.hpp), the layout oneDNN's convolutions run in, rather
// than planar. A convolution between planar tiles reorders its input, output and gradients into and out of
// that layout five times a step (forward: x and y; backward: dy, dx and x again), and on small images those
// passes were all of the step's time beyond the kernels' own (bench_step: mesh_tiny 14% over a plain oneDNN
// loop, mesh_stack_256 8%, against 0% and -3% with them skipped). Between convolutions, batch norm, ReLU and
// add, a blocked tile needs none of them: those kernels run on it as it is (blocked_kernels.cpp).
//
// A layer's tile is blocked where nothing else could see the difference:
// - the kernel set takes blocked views (Kernels::blocked) in the host's memory, and the step trains;
// - the layer is a convolution in float32, batch norm, add or a (leaky) ReLU, kept in float32 (not narrowed to
//   16 bits), and every reader is one of those too and reads its own tile (a recomputed tile is blocked alike,
//   in the memory it shares, so that recomputation changes no value);
// - it is its layer's only tile (no copy in another split), and its channels, all of the tensor's, fill
//   blocks of 16; its padding is zeros within its readers' reach;
// - batch norm, ReLU and add read and write tiles of one layout: where one of their tiles cannot be blocked,
//   none of them is (convolutions reorder between the two);
// - every process says so of its tile (they exchange halos, packed in the tiles' layout).
// A blocked tile has margins only where a neighbour's halo lies; at the tensor's border the convolutions pad
// it themselves (Window::zeros_outside). So a convolution's window over the whole tile is a dense view, which
// oneDNN reads and writes in place.
//
// Evaluation and prediction (TrainConfig::training false) keep planar tiles: a convolution of blocked tiles sums
// in another order than the NHWC kernel of planar ones (forward_nhwc_pd), and a prediction is to be the same
// bytes under every schedule.
#include "../kinds/kind.hpp"
#include "trainer_impl.hpp"

#include <dsl/scheduler/tiles.hpp>

#include <algorithm>

namespace dsl::backend {

std::vector<bool> Trainer::Impl::blocked_tiles() const {
    std::vector<bool> blocked(slots.size(), false);
    if (!k.blocked || !mem.host() || !config.training) return blocked;
    const auto kept_f32 = [&](std::size_t i) {
        const scheduler::LayerPlan& p = plan.layers[i];
        const Layer& l = *slots[i].layer;
        if (p.narrowed || p.stored || !rules_of(l.op).runs_blocked()) return false;
        return l.op != OpKind::conv || &conv_of(static_cast<int>(i)) == k.conv;
    };
    for (std::size_t i = 0; i < slots.size(); ++i) {
        const Slot& s = slots[i];
        if (!kept_f32(i) || s.tiles.size() != 1) continue;
        const Tile& t = s.own();
        const Dims& whole = plan.layers[i].whole;
        if (t.periodic || t.copy || whole.rank() < 2 || whole.rank() > 3 || whole.c % blocked_lanes != 0 ||
            t.box.c.size() != whole.c || t.reader_layers.empty())
            continue;
        bool readable = true;
        for (int r : t.reader_layers) {
            const auto j = static_cast<std::size_t>(r);
            const Slot& reader = slots[j];
            readable = readable && kept_f32(j);
            for (std::size_t input = 0; input < reader.operands.size(); ++input)
                if (reader.layer->inputs[input] == static_cast<int>(i))
                    readable = readable && reader.operands[input] == &t;
            if (!readable) break;
            if (reader.layer->op != OpKind::conv) continue;
            // The padding the convolution reads, within its window's reach (oneDNN pads no further).
            const Window w = conv_window(reader, t, plan.layers[j].read);
            readable = w.zeros.rank() == whole.rank();
            for (int d = 0; readable && d < w.zeros.rank(); ++d) {
                const std::int64_t reach = (w.kernel[d] - 1) * w.dilation[d] + 1;
                readable = w.zeros[d].before < reach && w.zeros[d].after < reach;
            }
        }
        blocked[i] = readable;
    }
    // Batch norm, ReLU and add: all of their tiles blocked, or none.
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t i = 0; i < slots.size(); ++i) {
            const Layer& l = *slots[i].layer;
            if (l.op == OpKind::conv || !rules_of(l.op).runs_blocked()) continue;
            std::vector<std::size_t> tiles{i};
            for (int in : l.inputs) tiles.push_back(static_cast<std::size_t>(in));
            const bool all = std::all_of(tiles.begin(), tiles.end(), [&](std::size_t j) { return blocked[j]; });
            for (std::size_t j : tiles) {
                changed = changed || (!all && blocked[j]);
                blocked[j] = blocked[j] && all;
            }
        }
    }
    // Where every process agrees: a halo travels between two tiles of one layout.
    std::vector<double> votes(blocked.size());
    for (std::size_t i = 0; i < blocked.size(); ++i) votes[i] = blocked[i] ? 1.0 : 0.0;
    comm.allreduce(votes.data(), static_cast<std::int64_t>(votes.size()));
    for (std::size_t i = 0; i < blocked.size(); ++i) blocked[i] = votes[i] == static_cast<double>(comm.size());
    return blocked;
}

// A blocked tile's margins: the plan's where a neighbour's halo lies, none at the tensor's border.
Margins Trainer::Impl::blocked_margins(const Tile& t) const {
    Margins m = t.need;
    const Dims& whole = global_dims(t.spec.layer);
    for (int d = 0; d < m.rank(); ++d) {
        if (t.box.space[d].lo <= 0) m[d].before = 0;
        if (t.box.space[d].hi >= whole.space[d]) m[d].after = 0;
    }
    return m;
}

}  // namespace dsl::backend
