// Tiles: which block of a tensor each process holds under a split, which part of its input a windowed layer
// (convolution, pooling, upsampling, transposed convolution) reads, the halo that fills a tile's margins, and
// the outputs that overlap computes before the halo arrives. The one definition of these that the plan
// (plan.hpp), the trainer that executes it and the performance model share. Every rule is a loop over the
// spatial dimensions: an image's rows and columns and a volume's depth, rows and columns alike.
#pragma once

#include <dsl/base/space.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/distribution.hpp>
#include <dsl/scheduler/window.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dsl::scheduler {

// Indices [lo, hi) of one dimension.
struct Range {
    std::int64_t lo = 0, hi = 0;
    std::int64_t size() const { return hi - lo; }
    bool empty() const { return hi <= lo; }
    Range meet(const Range& o) const { return {std::max(lo, o.lo), std::min(hi, o.hi)}; }
    bool operator==(const Range& o) const { return lo == o.lo && hi == o.hi; }
};

// How far a tile reaches beyond its interior on the two sides of one spatial dimension.
struct Reach {
    std::int64_t before = 0, after = 0;
    bool operator==(const Reach& o) const { return before == o.before && after == o.after; }
};

// The margins of a tile, per spatial dimension: the halo that neighbours send, or padding at the tensor's
// border. Rank 0 means none.
using Margins = Space<Reach>;
using Index = Space<std::int64_t>;  // a place, or a shift, along each spatial dimension

// A block of a tensor in global coordinates: samples, channels and each spatial dimension. A tensor without
// spatial dimensions (a vector [N, K]) has rank 0. (Its small methods are inline: the model's search calls
// them for every process it samples, of every candidate.)
struct Box {
    Range n, c;
    Space<Range> space;

    bool empty() const {
        if (n.empty() || c.empty()) return true;
        for (const Range& r : space)
            if (r.empty()) return true;
        return false;
    }
    // Samples times spatial points: the elements of one channel.
    std::int64_t points() const {
        if (empty()) return 0;
        std::int64_t p = n.size();
        for (const Range& r : space) p *= r.size();
        return p;
    }
    Dims dims() const { return Dims{n.size(), c.size(), extents()}; }
    Space<std::int64_t> extents() const {  // the spatial sizes
        Space<std::int64_t> e = Space<std::int64_t>::filled(space.rank(), 0);
        for (int d = 0; d < space.rank(); ++d) e[d] = space[d].size();
        return e;
    }
    Space<std::int64_t> origin() const {  // the spatial lower corner
        Space<std::int64_t> o = Space<std::int64_t>::filled(space.rank(), 0);
        for (int d = 0; d < space.rank(); ++d) o[d] = space[d].lo;
        return o;
    }
    Box meet(const Box& o) const {
        Box b{n.meet(o.n), c.meet(o.c), space};
        for (int d = 0; d < space.rank(); ++d) b.space[d] = space[d].meet(o.space[d]);
        return b;
    }
    Box grown(const Margins& m) const {
        Box b = *this;
        for (int d = 0; d < m.rank(); ++d) b.space[d] = {space[d].lo - m[d].before, space[d].hi + m[d].after};
        return b;
    }
    // How far `wider` reaches beyond this box on each side of each spatial dimension (0 where it does not).
    Margins reach(const Box& wider) const {
        Margins m = Margins::filled(space.rank(), Reach{});
        for (int d = 0; d < space.rank(); ++d)
            m[d] = {std::max<std::int64_t>(0, space[d].lo - wider.space[d].lo),
                    std::max<std::int64_t>(0, wider.space[d].hi - space[d].hi)};
        return m;
    }
    bool operator==(const Box& o) const { return n == o.n && c == o.c && space == o.space; }
};

// The whole of a tensor of `dims`, as a box.
inline Box whole_box(const Dims& dims) {
    Box b{{0, dims.n}, {0, dims.c}, Space<Range>::filled(dims.rank(), Range{})};
    for (int d = 0; d < dims.rank(); ++d) b.space[d] = {0, dims.space[d]};
    return b;
}

// The first index of block `index` of `extent` split `parts` ways (the first extent % parts blocks are one
// longer; see block_size).
inline std::int64_t block_start(std::int64_t extent, std::int64_t parts, std::int64_t index) {
    return index * (extent / parts) + std::min(index, extent % parts);
}
// The block of `extent` split `parts` ways that holds index i.
inline std::int64_t block_of(std::int64_t extent, std::int64_t parts, std::int64_t i) {
    // Blocks 0 .. r-1 have q+1 elements, the rest q.
    const std::int64_t q = extent / parts, r = extent % parts;
    return i < r * (q + 1) ? i / (q + 1) : r + (i - r * (q + 1)) / q;
}

// A process's place in a split's grid: its block of samples, of the filters (F) and of the channels (C), and
// of each spatial axis (by the split's letters, D, H, W). Ranks run over W fastest, then H, D, C, F, then N.
struct Coords {
    std::int64_t n = 0;
    std::array<std::int64_t, max_space> space{};
    std::int64_t f = 0, c = 0;
};
inline Coords coords(const Split& s, std::int64_t rank) {
    Coords c;
    for (int a = max_space - 1; a >= 0; --a) {
        if (s.space[a] == 1) continue;  // most splits leave some axis whole: no division
        c.space[a] = rank % s.space[a];
        rank /= s.space[a];
    }
    if (s.c > 1) c.c = rank % s.c, rank /= s.c;
    if (s.f > 1) c.f = rank % s.f, rank /= s.f;
    c.n = rank;
    return c;
}
inline std::int64_t rank_of(const Split& s, const Coords& c) {
    std::int64_t rank = (c.n * s.f + c.f) * s.c + c.c;
    for (int a = 0; a < max_space; ++a) rank = rank * s.space[a] + c.space[a];
    return rank;
}

// Which channels of a tensor a process's tile holds under a split's F and C parts (all of them when both are 1):
// - all: every channel, the same on every process of the F x C group (data, and a loss's tensors: replicas,
//   of which one speaks for the others);
// - all_parts: every channel, each process using and sending back its own part of them (concat's inputs:
//   replicas that all speak);
// - filters: its block of F blocks (the output of a convolution, transposed convolution or fully connected
//   layer; under C parts each of the C processes holds partial sums of it, over its block of the input
//   channels);
// - inputs: its block of C blocks (what those layers read; each of the F processes sends back its part of
//   the gradient's sum);
// - nested: its block of F blocks, cut again into C blocks (every other layer's tensors).
enum class Channels { all, all_parts, filters, inputs, nested };

inline Range channel_block(std::int64_t extent, const Split& s, const Coords& k, Channels mode) {
    auto block = [](Range whole, std::int64_t parts, std::int64_t index) {
        const std::int64_t lo = whole.lo + block_start(whole.size(), parts, index);
        return Range{lo, lo + block_size(whole.size(), parts, index)};
    };
    const Range whole{0, extent};
    switch (mode) {
        case Channels::all:
        case Channels::all_parts: return whole;
        case Channels::filters: return block(whole, s.f, k.f);
        case Channels::inputs: return block(whole, s.c, k.c);
        case Channels::nested: return block(block(whole, s.f, k.f), s.c, k.c);
    }
    return whole;
}

// A layer's output tensor: samples, channels and spatial extents. An image [N, C, H, W] is {N, C, {H, W}}, a
// volume's {N, C, {D, H, W}}, class labels [N, H, W] {N, 1, {H, W}}, a vector [N, K] {N, K}, labels [N] {N, 1}.
Dims extent_of(const frontend::Layer& layer, std::int64_t batch);

// The block of a tensor of `whole` extent that `rank` holds under `split`: its samples' block, the blocks
// of its spatial dimensions when `spatial` (else all of each: a vector, or whole planes), and the channels
// `channels` says.
inline Box tile_box(const Dims& whole, const Split& split, std::int64_t rank, bool spatial,
                    Channels channels = Channels::all) {
    const Coords k = coords(split, rank);
    Box b = whole_box(whole);
    b.n.lo = block_start(whole.n, split.n, k.n);
    b.n.hi = b.n.lo + block_size(whole.n, split.n, k.n);
    b.c = channel_block(whole.c, split, k, channels);
    if (!spatial) return b;
    for (int d = 0; d < whole.rank(); ++d) {
        const int axis = axis_of(d, whole.rank());
        if (split.space[axis] == 1) continue;
        b.space[d].lo = block_start(whole.space[d], split.space[axis], k.space[axis]);
        b.space[d].hi = b.space[d].lo + block_size(whole.space[d], split.space[axis], k.space[axis]);
    }
    return b;
}

// ---- Windows.

// The part of its input (of `channels` channels) that a windowed layer reads to compute the outputs `out`:
// for convolution and pooling, padding included, from out.lo * stride - pad along each spatial dimension, as
// far as the last output's window reaches; for upsampling and transposed convolution, the inputs the outputs
// read (window.hpp), never beyond the tensor (they read no padding). Convolutions read every channel, the
// others the output's own.
// A layer with weights reads the input channels `channels` (its input tile's: all of them, or a block under C
// parts).
Box window_input(const frontend::Layer& layer, const Box& out, Range channels);
inline Box window_input(const frontend::Layer& layer, const Box& out, std::int64_t channels) {
    return window_input(layer, out, Range{0, channels});
}

// Upsampling and transposed convolution: the input's extent along spatial dimension d, and the input
// indices that outputs [a, b) along it read.
std::int64_t input_extent(const frontend::Layer& layer, int d);
IndexRange input_range(const frontend::Layer& layer, int d, std::int64_t a, std::int64_t b);

// The inputs a window reads for `outputs` outputs along spatial dimension d.
std::int64_t window_extent(const frontend::Layer& layer, int d, std::int64_t outputs);
// The spacing of a window's taps along dimension d: a convolution's dilation; pooling windows are dense.
std::int64_t window_dilation(const frontend::Layer& layer, int d);

// A transposed convolution's halo under a split of spatial dimension d into `parts`, its input and its output
// each cut into blocks (block b of the output read from block b of the input, which need not line up where
// padding, output_pad or uneven blocks shift the output): for each block, how far the inputs its outputs read
// reach beyond its block of the input, as the plan's margins do (window_input; a tile whose outputs read no
// input, which takes a pad of the kernel or more, reads at the place between the inputs around them).
std::vector<Reach> deconv_halos(const frontend::Layer& layer, int d, std::int64_t parts);

// Whether `reader` exchanges a halo of its input under `split`: a window with a halo along a spatial
// dimension that the split cuts (a transposed convolution's, where some tile's reaches beyond it), over an
// input that is not data (data is made with its halo).
bool exchanges_halo(const frontend::Layer& reader, const frontend::Layer& input, const Split& split);

// ---- Halos.

// A piece of a halo exchange or a redistribution: the elements of `box` that go to or come from `peer`. `box`
// is where they lie in the tile that receives them (whose margins they fill); in the tile that holds them
// they lie at source(), `shift` away along each spatial dimension: a periodic halo across the tensor's border
// is the far side's, a tensor's extent away (shift rank 0: none).
struct Piece {
    int peer = 0;
    Box box;
    Index shift;
    Box source() const {
        Box b = box;
        for (int d = 0; d < shift.rank(); ++d) b.space[d] = {box.space[d].lo - shift[d], box.space[d].hi - shift[d]};
        return b;
    }
};

// The halo of the tile that `rank` holds of a tensor of extent `whole` under `split` (its spatial dimensions
// cut): the parts of its box grown by `need` that the blocks of other processes hold, each with the process
// that holds it. Beyond the tensor's border is padding (no piece), or, when `periodic`, the tensor's far side:
// pieces with a shift, which may come from this process itself (a dimension not split, or split in two).
// Faces come first, then edges, then corners (an image's: above, below, left, right, then the corners), each
// dimension before and after.
std::vector<Piece> halo_pieces(const Dims& whole, const Split& split, std::int64_t rank, const Margins& need,
                               bool periodic = false);

// The parts of `want` beyond the border of a periodic tensor of extent `whole`, each with its shift (source()
// is where its elements lie in the tensor).
std::vector<Piece> wrapped_parts(const Dims& whole, const Box& want);

// ---- Overlap of a halo exchange with compute.

// What a process holds of its input before the halo arrives: its tile, and the margins beyond the tensor's
// border when they are padding (a periodic tensor's are halo from its far side).
Box held_box(const Box& tile, const Dims& whole, const Margins& need, bool periodic = false);

// The outputs of `out` whose windows read only within `held`, computed while the halo travels, and the strips
// of `out` around them, computed once it is in: along each spatial dimension in turn, the slabs before and
// after the inner outputs, each across what the earlier dimensions' slabs left (an image's: the rows above and
// below across the whole width, then the columns either side along the inner rows). Empty strips are left
// out; with no inner outputs, the strips are `out` itself.
struct OverlapParts {
    Box inner;
    std::vector<Box> strips;
};
OverlapParts overlap_parts(const frontend::Layer& layer, const Box& out, const Box& held);

}  // namespace dsl::scheduler
