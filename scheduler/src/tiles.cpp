// Block placement of tiles and the input windows of convolution and pooling.
#include <dsl/scheduler/tiles.hpp>

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

std::int64_t window_extent(const Layer& layer, int d, std::int64_t outputs) {
    const std::int64_t dilation = layer.op == OpKind::conv ? layer.dilation[d] : 1;
    return (outputs - 1) * layer.stride[d] + dilation * (layer.kernel[d] - 1) + 1;
}

Box window_input(const Layer& layer, const Box& out) {
    Box in = out;
    in.y0 = out.y0 * layer.stride[0] - layer.pad[0];
    in.x0 = out.x0 * layer.stride[1] - layer.pad[1];
    in.y1 = in.y0 + window_extent(layer, 0, out.y1 - out.y0);
    in.x1 = in.x0 + window_extent(layer, 1, out.x1 - out.x0);
    return in;
}

}  // namespace dsl::scheduler
