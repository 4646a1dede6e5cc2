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
        return upsample_input(a, b, layer.scale, layer.upsample_mode() == frontend::UpsampleMode::bilinear,
                              input_extent(layer, d));
    return deconv_input(a, b, layer.kernel[d], layer.stride[d], layer.pad[d], input_extent(layer, d));
}

namespace {

bool positional(const Layer& layer) { return layer.op == OpKind::upsample || layer.op == OpKind::deconv; }

}  // namespace

Box window_input(const Layer& layer, const Box& out, std::int64_t channels) {
    Box in = out;
    if (layer.kind().weights) in.c = {0, channels};
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

bool exchanges_halo(const Layer& reader, const Layer& input, const Split& split) {
    if (!reader.windowed() || input.is_data()) return false;
    const Space<std::int64_t> halo = reader.halo();
    for (int d = 0; d < halo.rank(); ++d)
        if (halo[d] > 0 && split.parts(d, halo.rank()) > 1) return true;
    return false;
}

std::vector<Piece> halo_pieces(const Dims& whole, const Split& split, std::int64_t rank, const Margins& need) {
    const int r = whole.rank();
    const Coords me = coords(split, rank);
    const Box want = tile_box(whole, split, rank, true).grown(need).meet(whole_box(whole));
    std::vector<Piece> pieces;
    if (want.empty()) return pieces;
    // Along each dimension, this process's block and the first and last blocks that the wanted range meets.
    std::array<std::int64_t, max_space> mine{}, first{}, last{};
    for (int d = 0; d < r; ++d) {
        const int axis = Split::axis(d, r);
        mine[d] = me.space[axis];
        first[d] = block_of(whole.space[d], split.space[axis], want.space[d].lo);
        last[d] = block_of(whole.space[d], split.space[axis], want.space[d].hi - 1);
    }
    // The blocks of one direction (per dimension: -1 before this process's block, 0 its own, +1 after), every
    // combination in order along each dimension.
    auto direction = [&](const std::array<int, max_space>& side) {
        std::array<std::int64_t, max_space> lo{}, hi{};
        for (int k = 0; k < r; ++k) {
            lo[k] = side[k] < 0 ? first[k] : side[k] > 0 ? mine[k] + 1 : mine[k];
            hi[k] = side[k] < 0 ? mine[k] - 1 : side[k] > 0 ? last[k] : mine[k];
            if (lo[k] > hi[k]) return;
        }
        for (std::array<std::int64_t, max_space> at = lo;;) {
            Coords peer = me;
            for (int d = 0; d < r; ++d) peer.space[Split::axis(d, r)] = at[d];
            const std::int64_t q = rank_of(split, peer);
            const Box piece = want.meet(tile_box(whole, split, q, true));
            if (!piece.empty()) pieces.push_back(Piece{static_cast<int>(q), piece});
            int d = r - 1;
            for (; d >= 0 && at[d] == hi[d]; --d) at[d] = lo[d];
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

Box held_box(const Box& tile, const Dims& whole, const Margins& need) {
    Box held = tile;
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
