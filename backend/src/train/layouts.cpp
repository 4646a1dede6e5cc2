// Which tiles keep their channels in blocks of 16 (view.hpp), the layout oneDNN's convolutions run in, rather
// than planar. A convolution between planar tiles reorders its input, output and gradients into and out of
// that layout five times a step (forward: x and y; backward: dy, dx and x again), and on small images those
// passes were all of the step's time beyond the kernels' own (bench_step: mesh_tiny 14% over a plain oneDNN
// loop, mesh_stack_256 8%, against 0% and -3% with them skipped). Between convolutions, batch norm, ReLU and
// add, a blocked tile needs none of them, nor does pooling: those kernels run on it as it is (blocked_kernels.cpp,
// blocked_pool.cpp).
//
// A layer's tile is blocked where nothing else could see the difference (decided with the plan's other paths,
// scheduler/src/paths.cpp, which says why where it is not):
// - the kernel set takes blocked views (Kernels::blocked) in the host's memory, and the step trains;
// - the layer is a convolution, batch norm, add, a (leaky) ReLU or a pooling (its kind's row says so:
//   runs_blocked), and every reader is one of those too and reads its own tile (a recomputed tile is blocked alike,
//   in the memory it shares, so that recomputation changes no value);
// - it is its layer's only tile (no copy in another split), and its channels, all of the tensor's, fill
//   blocks of 16;
// - batch norm, ReLU, add and pooling read and write tiles of one layout: where one of their tiles cannot be blocked,
//   none of them is (convolutions reorder between the two);
// - every process decides alike, from what is the same on every process (they exchange halos, packed in the
//   tiles' layout).
// A blocked tile has margins only where a neighbour's halo lies; at the tensor's border the convolutions and
// poolings pad it themselves (Window::zeros_outside), each with its own padding. So a convolution's window over the
// whole tile is a dense view, which oneDNN reads and writes in place.
//
// Evaluation and prediction (TrainConfig::training false) keep planar tiles: a convolution of blocked tiles sums
// in another order than the NHWC kernel of planar ones (forward_nhwc_pd), and a prediction is to be the same
// bytes under every schedule.
#include "tiles.hpp"

namespace dsl::backend {

// A blocked tile's margins: the plan's where a neighbour's halo lies, none at the tensor's border.
Margins Tiles::blocked_margins(const Tile& t) const {
    Margins m = t.need;
    const Dims& whole = plan_.layers[static_cast<std::size_t>(t.spec.layer)].whole;
    for (int d = 0; d < m.rank(); ++d) {
        if (t.box.space[d].lo <= 0) m[d].before = 0;
        if (t.box.space[d].hi >= whole.space[d]) m[d].after = 0;
    }
    return m;
}

}  // namespace dsl::backend
