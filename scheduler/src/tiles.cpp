// Block placement of tiles and the input regions of the layers that read a neighbourhood: convolution,
// pooling, upsampling and transposed convolution.
#include <dsl/scheduler/tiles.hpp>

#include <dsl/base/error.hpp>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::OpKind;

std::int64_t block_start(std::int64_t extent, std::int64_t parts, std::int64_t index) {
    return index * (extent / parts) + std::min(index, extent % parts);
}

Coords coords(const Split& s, std::int64_t rank) { return {rank / (s.h * s.w), (rank / s.w) % s.h, rank % s.w}; }

Extent extent_of(const Layer& layer, std::int64_t batch) {
    const auto& d = layer.shape.dims;
    switch (d.size()) {
        case 0: return {batch, 1, 1, 1};
        case 1: return {batch, d[0], 1, 1};
        case 2: return {batch, 1, d[0], d[1]};
        default: return {batch, d[0], d[1], d[2]};
    }
}

Box tile_box(const Extent& whole, const Split& split, std::int64_t rank, bool planes) {
    const Coords c = coords(split, rank);
    Box b;
    b.n0 = block_start(whole.n, split.n, c.n);
    b.n1 = b.n0 + block_size(whole.n, split.n, c.n);
    b.y1 = whole.h;
    b.x1 = whole.w;
    if (planes) {
        b.y0 = block_start(whole.h, split.h, c.h);
        b.y1 = b.y0 + block_size(whole.h, split.h, c.h);
        b.x0 = block_start(whole.w, split.w, c.w);
        b.x1 = b.x0 + block_size(whole.w, split.w, c.w);
    }
    return b;
}

std::int64_t window_dilation(const Layer& layer, int d) { return layer.op == OpKind::conv ? layer.dilation[d] : 1; }

std::int64_t window_extent(const Layer& layer, int d, std::int64_t outputs) {
    return window_extent(outputs, layer.kernel[d], layer.stride[d], window_dilation(layer, d));
}

std::int64_t input_extent(const Layer& layer, int d) {
    const std::int64_t out = layer.shape.dims.at(static_cast<std::size_t>(d) + 1);
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

Box window_input(const Layer& layer, const Box& out) {
    Box in = out;
    if (positional(layer)) {
        if (out.empty()) return in;
        const IndexRange rows = input_range(layer, 0, out.y0, out.y1), cols = input_range(layer, 1, out.x0, out.x1);
        in.y0 = rows.first, in.y1 = rows.end, in.x0 = cols.first, in.x1 = cols.end;
        return in;
    }
    in.y0 = out.y0 * layer.stride[0] - layer.pad[0];
    in.x0 = out.x0 * layer.stride[1] - layer.pad[1];
    in.y1 = in.y0 + window_extent(layer, 0, out.y1 - out.y0);
    in.x1 = in.x0 + window_extent(layer, 1, out.x1 - out.x0);
    return in;
}

Box inner_outputs(const Layer& layer, const Box& out, const Box& held) {
    if (positional(layer)) {
        // What an output reads moves with it, but not by a fixed stride: scan for the first and the last
        // outputs that read only within `held` (an output that reads nothing is within).
        auto inside = [&](int d, std::int64_t o, std::int64_t lo, std::int64_t hi) {
            const IndexRange r = input_range(layer, d, o, o + 1);
            return r.end <= r.first || (r.first >= lo && r.end <= hi);
        };
        Box inner = out;
        while (inner.y0 < out.y1 && !inside(0, inner.y0, held.y0, held.y1)) ++inner.y0;
        while (inner.y1 > inner.y0 && !inside(0, inner.y1 - 1, held.y0, held.y1)) --inner.y1;
        while (inner.x0 < out.x1 && !inside(1, inner.x0, held.x0, held.x1)) ++inner.x0;
        while (inner.x1 > inner.x0 && !inside(1, inner.x1 - 1, held.x0, held.x1)) --inner.x1;
        return inner;
    }
    // Output o reads input rows [o*stride - pad, o*stride - pad + extent): the first output reading nothing
    // before `lo`, and the end of those reading nothing from `hi` on.
    auto first_inside = [](std::int64_t lo, std::int64_t pad, std::int64_t stride) {
        const std::int64_t v = lo + pad;
        return v >= 0 ? (v + stride - 1) / stride : -((-v) / stride);
    };
    auto end_inside = [](std::int64_t hi, std::int64_t pad, std::int64_t stride, std::int64_t extent) {
        const std::int64_t v = hi + pad - extent;
        return (v >= 0 ? v / stride : -((-v + stride - 1) / stride)) + 1;
    };
    Box inner = out;
    inner.y0 = std::max(out.y0, first_inside(held.y0, layer.pad[0], layer.stride[0]));
    inner.y1 = std::min(out.y1, end_inside(held.y1, layer.pad[0], layer.stride[0], window_extent(layer, 0, 1)));
    inner.x0 = std::max(out.x0, first_inside(held.x0, layer.pad[1], layer.stride[1]));
    inner.x1 = std::min(out.x1, end_inside(held.x1, layer.pad[1], layer.stride[1], window_extent(layer, 1, 1)));
    return inner;
}

std::vector<Box> edge_strips(const Box& out, const Box& inner) {
    std::vector<Box> strips;
    for (const Box& b : {Box{out.n0, out.n1, out.y0, inner.y0, out.x0, out.x1},
                         Box{out.n0, out.n1, inner.y1, out.y1, out.x0, out.x1},
                         Box{out.n0, out.n1, inner.y0, inner.y1, out.x0, inner.x0},
                         Box{out.n0, out.n1, inner.y0, inner.y1, inner.x1, out.x1}})
        if (!b.empty()) strips.push_back(b);
    return strips;
}

}  // namespace dsl::scheduler
