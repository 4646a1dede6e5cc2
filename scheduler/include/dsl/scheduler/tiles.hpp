// Tiles: which block of a tensor each process holds under a split, and which part of its input a windowed
// layer (convolution, pooling) reads. The plan (plan.hpp) places the trainer's tiles with these, and the
// performance model predicts halos and shuffles with the same arithmetic.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/distribution.hpp>
#include <dsl/scheduler/window.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dsl::scheduler {

// Rows and columns beyond a tile's interior: the halo that neighbours send, or padding at the border.
struct Margins {
    std::int64_t top = 0, bottom = 0, left = 0, right = 0;
    bool operator==(const Margins& o) const {
        return top == o.top && bottom == o.bottom && left == o.left && right == o.right;
    }
};

// A block of a tensor in global coordinates: samples [n0, n1), rows [y0, y1), columns [x0, x1); every
// channel. A tensor without rows and columns (a vector [N, K]) has the single row and column 0.
struct Box {
    std::int64_t n0 = 0, n1 = 0, y0 = 0, y1 = 0, x0 = 0, x1 = 0;
    bool empty() const { return n1 <= n0 || y1 <= y0 || x1 <= x0; }
    std::int64_t points() const { return empty() ? 0 : (n1 - n0) * (y1 - y0) * (x1 - x0); }  // per channel
    Box meet(const Box& o) const {
        return {std::max(n0, o.n0), std::min(n1, o.n1), std::max(y0, o.y0),
                std::min(y1, o.y1), std::max(x0, o.x0), std::min(x1, o.x1)};
    }
    Box grown(const Margins& m) const { return {n0, n1, y0 - m.top, y1 + m.bottom, x0 - m.left, x1 + m.right}; }
    // How far `wider` reaches beyond this box on each side (0 where it does not).
    Margins reach(const Box& wider) const {
        return {std::max<std::int64_t>(0, y0 - wider.y0), std::max<std::int64_t>(0, wider.y1 - y1),
                std::max<std::int64_t>(0, x0 - wider.x0), std::max<std::int64_t>(0, wider.x1 - x1)};
    }
    bool operator==(const Box& o) const {
        return n0 == o.n0 && n1 == o.n1 && y0 == o.y0 && y1 == o.y1 && x0 == o.x0 && x1 == o.x1;
    }
};

// The first index of block `index` of `extent` split `parts` ways (the first extent % parts blocks are one
// longer; see block_size).
std::int64_t block_start(std::int64_t extent, std::int64_t parts, std::int64_t index);

// A process's place in a split's grid: ranks run over W fastest, then H, then N.
struct Coords {
    std::int64_t n = 0, h = 0, w = 0;
};
Coords coords(const Split& s, std::int64_t rank);

// A tensor's whole extent: samples, channels, rows, columns (a vector [N, K] is {N, K, 1, 1}).
struct Extent {
    std::int64_t n = 0, c = 0, h = 0, w = 0;
};
Extent extent_of(const frontend::Layer& layer, std::int64_t batch);

// The block of a tensor of `whole` extent that `rank` holds under `split`: its samples' block, and its rows'
// and columns' blocks when `planes` are split (else every row and column: a vector, or whole images).
Box tile_box(const Extent& whole, const Split& split, std::int64_t rank, bool planes);

// The part of its input that a windowed layer reads to compute the outputs `out`: for convolution and
// pooling, padding included, rows from out.y0 * stride - pad, as far as the last output's window reaches;
// for upsampling and transposed convolution, the input rows and columns the outputs read (window.hpp),
// never beyond the tensor (they read no padding).
Box window_input(const frontend::Layer& layer, const Box& out);

// Upsampling and transposed convolution: the input's extent along dimension d (0: H, 1: W), and the input
// indices that outputs [a, b) along it read.
std::int64_t input_extent(const frontend::Layer& layer, int d);
IndexRange input_range(const frontend::Layer& layer, int d, std::int64_t a, std::int64_t b);

// Overlapping a halo exchange with compute: the outputs of `out` whose windows read only input rows and
// columns within `held` (what a process has before its halo arrives: its own tile, and the padding beyond
// the tensor's border), and the strips of `out` around them, computed once the halo is in: the rows above
// and below across the whole width, then the columns either side along the inner rows (empty ones left out).
Box inner_outputs(const frontend::Layer& layer, const Box& out, const Box& held);
std::vector<Box> edge_strips(const Box& out, const Box& inner);

// The input rows (or columns) a window reads for `outputs` outputs along dimension d (0: H, 1: W).
std::int64_t window_extent(const frontend::Layer& layer, int d, std::int64_t outputs);
// The spacing of a window's taps along dimension d: a convolution's dilation; pooling windows are dense.
std::int64_t window_dilation(const frontend::Layer& layer, int d);

}  // namespace dsl::scheduler
