// Block placement of tiles, the input regions of the layers that read a neighbourhood (convolution, pooling,
// upsampling and transposed convolution), halo pieces and overlap's parts.
#include <dsl/scheduler/tiles.hpp>

#include <dsl/base/error.hpp>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::OpKind;

Dims extent_of(const Layer& layer, std::int64_t batch) {
    const auto& d = layer.shape.dims;
    // Class labels have no channels: each of their dimensions is spatial. Every other tensor is [C, spatial...].
    const bool classes = layer.op == OpKind::label && !layer.float_label;
    const std::size_t first = classes || d.empty() ? 0 : 1;
    Dims e{batch, first ? d[0] : 1, Space<std::int64_t>::filled(static_cast<int>(d.size() - first), 0)};
    for (std::size_t i = first; i < d.size(); ++i) e.space[static_cast<int>(i - first)] = d[i];
    return e;
}

std::int64_t window_dilation(const Layer& layer, int d) { return layer.op == OpKind::conv ? layer.dilation[d] : 1; }

std::int64_t window_extent(const Layer& layer, int d, std::int64_t outputs) {
    return window_extent(outputs, layer.kernel[d], layer.stride[d], window_dilation(layer, d));
}

std::int64_t input_extent(const Layer& layer, int d) {
    const std::int64_t out = layer.shape.dims.at(d + 1);
    if (layer.op == OpKind::upsample) return out / layer.scale;
    DSL_INTERNAL_CHECK(layer.op == OpKind::deconv, std::string("no input extent for ") + layer.name);
    return (out + 2 * layer.pad[d] - layer.kernel[d] - layer.output_pad[d]) / layer.stride[d] + 1;
}

IndexRange input_range(const Layer& layer, int d, std::int64_t a, std::int64_t b) {
    if (layer.op == OpKind::upsample)
        return upsample_input(a, b, layer.scale, layer.linear_upsample(), input_extent(layer, d));
    return deconv_input(a, b, layer.kernel[d], layer.stride[d], layer.pad[d], input_extent(layer, d));
}

namespace {

bool positional(const Layer& layer) { return layer.op == OpKind::upsample || layer.op == OpKind::deconv; }

}  // namespace

Box window_input(const Layer& layer, const Box& out, Range channels) {
    Box in = out;
    if (layer.kind().weights) in.c = channels;
    if (positional(layer)) {
        if (out.empty()) return in;
        for (int d = 0; d < out.space.rank(); ++d) {
            const IndexRange r = input_range(layer, d, out.space[d].lo, out.space[d].hi);
            in.space[d] = {r.first, r.end};
        }
        return in;
    }
    for (int d = 0; d < out.space.rank(); ++d) {
        in.space[d].lo = out.space[d].lo * layer.stride[d] - layer.pad[d];
        in.space[d].hi = in.space[d].lo + window_extent(layer, d, out.space[d].size());
    }
    return in;
}

std::vector<Reach> deconv_halos(const Layer& layer, int d, std::int64_t parts) {
    DSL_INTERNAL_CHECK(layer.op == OpKind::deconv, "no transposed convolution's halo for " + layer.name);
    const std::int64_t in = input_extent(layer, d), out = layer.shape.dims.at(static_cast<std::size_t>(d) + 1);
    std::vector<Reach> halos;
    for (std::int64_t b = 0; b < parts; ++b) {
        const std::int64_t first = block_start(out, parts, b), lo = block_start(in, parts, b);
        const IndexRange read = input_range(layer, d, first, first + block_size(out, parts, b));
        const std::int64_t hi = lo + block_size(in, parts, b);
        halos.push_back(Reach{std::max<std::int64_t>(0, lo - read.first), std::max<std::int64_t>(0, read.end - hi)});
    }
    return halos;
}

bool exchanges_halo(const Layer& reader, const Layer& input, const Split& split) {
    if (!reader.windowed() || input.is_data()) return false;
    const Space<std::int64_t> halo = reader.halo();
    for (int d = 0; d < halo.rank(); ++d) {
        const std::int64_t parts = split.parts(d, halo.rank());
        if (parts == 1) continue;
        if (reader.op != OpKind::deconv ? halo[d] > 0
                                        : std::ranges::any_of(deconv_halos(reader, d, parts),
                                                              [](Reach r) { return r.before > 0 || r.after > 0; }))
            return true;
    }
    return false;
}

namespace {

// A run of indices of one dimension that a tile wants and one block holds: where it lies in the wanting
// tile, the block, the shift to where the block holds it, and its side of the tile (-1 before, 0 its own, +1
// after).
struct Segment {
    Range range;
    std::int64_t block = 0, shift = 0;
    int side = 0;
};

// The segments of `want` along a dimension of `extent` split `parts` ways, `own` being the block of the tile
// that wants them (at `mine`): within the tensor, and beyond its border the far side's when periodic (else
// nothing: padding). In order along the dimension.
std::vector<Segment> segments(Range want, const Range& own, std::int64_t mine, std::int64_t extent, std::int64_t parts,
                              bool periodic) {
    std::vector<Segment> out;
    if (!periodic) want = want.meet({0, extent});
    if (want.empty()) return out;
    // The copies of the tensor that `want` meets: shift k * extent for k from floor(lo / E) to floor((hi-1) / E).
    const auto floor_div = [](std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
    for (std::int64_t k = floor_div(want.lo, extent); k <= floor_div(want.hi - 1, extent); ++k) {
        const std::int64_t shift = k * extent;
        const Range run{std::max(want.lo, shift) - shift, std::min(want.hi, shift + extent) - shift};
        for (std::int64_t b = block_of(extent, parts, run.lo); b <= block_of(extent, parts, run.hi - 1); ++b) {
            const std::int64_t lo = block_start(extent, parts, b);
            const Range held = run.meet({lo, lo + block_size(extent, parts, b)});
            const Range at{held.lo + shift, held.hi + shift};
            const int side = b == mine && shift == 0 ? 0 : at.lo < own.lo ? -1 : 1;
            out.push_back(Segment{at, b, shift, side});
        }
    }
    return out;
}

}  // namespace

std::vector<Piece> halo_pieces(const Dims& whole, const Split& split, std::int64_t rank, const Margins& need,
                               bool periodic) {
    const int r = whole.rank();
    const Coords me = coords(split, rank);
    const Box own = tile_box(whole, split, rank, true), want = own.grown(need);
    std::array<std::vector<Segment>, max_space> along;
    for (int d = 0; d < r; ++d) {
        const int axis = axis_of(d, r);
        along[d] = segments(want.space[d], own.space[d], me.space[axis], whole.space[d], split.space[axis], periodic);
    }
    std::vector<Piece> pieces;
    // The pieces of one direction (per dimension: -1 before this tile, 0 its own, +1 after): every
    // combination of that direction's segments, in order along each dimension.
    auto direction = [&](const std::array<int, max_space>& side) {
        std::array<std::vector<const Segment*>, max_space> picked;
        for (int d = 0; d < r; ++d) {
            for (const Segment& g : along[d])
                if (g.side == side[d]) picked[d].push_back(&g);
            if (picked[d].empty()) return;
        }
        for (std::array<std::size_t, max_space> at{};;) {
            Coords peer = me;
            Piece p{0, own, Index::filled(r, 0)};
            for (int d = 0; d < r; ++d) {
                const Segment& g = *picked[d][at[d]];
                peer.space[axis_of(d, r)] = g.block;
                p.box.space[d] = g.range;
                p.shift[d] = g.shift;
            }
            p.peer = static_cast<int>(rank_of(split, peer));
            if (!p.box.empty()) pieces.push_back(p);
            int d = r - 1;
            for (; d >= 0 && at[d] + 1 == picked[d].size(); --d) at[d] = 0;
            if (d < 0) return;
            ++at[d];
        }
    };
    // Directions by the dimensions they leave this block along: one (faces), two (edges), three (corners); for
    // each count the sets in order, and for each set its sides, before ahead of after, the first dimension
    // slowest.
    for (int count = 1; count <= r; ++count)
        for (unsigned set = 1; set < (1u << r); ++set) {
            if (__builtin_popcount(set) != count) continue;
            for (unsigned pick = 0; pick < (1u << count); ++pick) {
                std::array<int, max_space> side{};
                int bit = count - 1;
                for (int d = 0; d < r; ++d)
                    if (set & (1u << d)) side[d] = (pick >> bit--) & 1u ? 1 : -1;
                direction(side);
            }
        }
    return pieces;
}

std::vector<Piece> wrapped_parts(const Dims& whole, const Box& want) {
    // The halo of the whole tensor on one process, grown as far as `want` reaches beyond it: its pieces, cut
    // to `want`.
    Margins beyond = Margins::filled(whole.rank(), Reach{});
    for (int d = 0; d < whole.rank(); ++d)
        beyond[d] = {std::max<std::int64_t>(0, -want.space[d].lo),
                     std::max<std::int64_t>(0, want.space[d].hi - whole.space[d])};
    std::vector<Piece> parts;
    for (Piece p : halo_pieces(whole, Split{}, 0, beyond, true)) {
        p.box.space = p.box.meet(want).space;
        p.box.n = want.n;
        p.box.c = want.c;
        if (!p.box.empty()) parts.push_back(p);
    }
    return parts;
}

Box held_box(const Box& tile, const Dims& whole, const Margins& need, bool periodic) {
    Box held = tile;
    if (periodic) return held;
    for (int d = 0; d < tile.space.rank(); ++d) {
        if (tile.space[d].lo <= 0) held.space[d].lo -= need[d].before;
        if (tile.space[d].hi >= whole.space[d]) held.space[d].hi += need[d].after;
    }
    return held;
}

namespace {

Box inner_outputs(const Layer& layer, const Box& out, const Box& held) {
    Box inner = out;
    if (positional(layer)) {
        // What an output reads moves with it, but not by a fixed stride: scan for the first and the last
        // outputs that read only within `held` (an output that reads nothing is within).
        for (int d = 0; d < out.space.rank(); ++d) {
            auto inside = [&](std::int64_t o) {
                const IndexRange r = input_range(layer, d, o, o + 1);
                return r.end <= r.first || (r.first >= held.space[d].lo && r.end <= held.space[d].hi);
            };
            Range& k = inner.space[d];
            while (k.lo < out.space[d].hi && !inside(k.lo)) ++k.lo;
            while (k.hi > k.lo && !inside(k.hi - 1)) --k.hi;
        }
        return inner;
    }
    // Output o reads inputs [o*stride - pad, o*stride - pad + extent): the first output reading nothing before
    // `lo`, and the end of those reading nothing from `hi` on.
    auto first_inside = [](std::int64_t lo, std::int64_t pad, std::int64_t stride) {
        const std::int64_t v = lo + pad;
        return v >= 0 ? (v + stride - 1) / stride : -((-v) / stride);
    };
    auto end_inside = [](std::int64_t hi, std::int64_t pad, std::int64_t stride, std::int64_t extent) {
        const std::int64_t v = hi + pad - extent;
        return (v >= 0 ? v / stride : -((-v + stride - 1) / stride)) + 1;
    };
    for (int d = 0; d < out.space.rank(); ++d) {
        inner.space[d].lo = std::max(out.space[d].lo, first_inside(held.space[d].lo, layer.pad[d], layer.stride[d]));
        inner.space[d].hi = std::min(
            out.space[d].hi, end_inside(held.space[d].hi, layer.pad[d], layer.stride[d], window_extent(layer, d, 1)));
    }
    return inner;
}

}  // namespace

OverlapParts overlap_parts(const Layer& layer, const Box& out, const Box& held) {
    OverlapParts parts{inner_outputs(layer, out, held), {}};
    if (parts.inner.empty()) {
        parts.strips.push_back(out);
        return parts;
    }
    // What is left to cut after the slabs of the dimensions before: the inner range there, all of `out` after.
    Box rest = out;
    for (int d = 0; d < out.space.rank(); ++d) {
        Box before = rest, after = rest;
        before.space[d] = {out.space[d].lo, parts.inner.space[d].lo};
        after.space[d] = {parts.inner.space[d].hi, out.space[d].hi};
        for (const Box& b : {before, after})
            if (!b.empty()) parts.strips.push_back(b);
        rest.space[d] = parts.inner.space[d];
    }
    return parts;
}

}  // namespace dsl::scheduler
