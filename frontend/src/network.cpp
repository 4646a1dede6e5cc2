// The checked network's small helpers: shape text, halos and totals.
#include <dsl/frontend/network.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace dsl::frontend {

std::int64_t Shape::elements() const {
    std::int64_t n = 1;
    for (std::int64_t d : dims) n *= d;  // infer_shapes has checked that this does not overflow
    return n;
}

std::string Shape::str() const {
    std::string out = "[N";
    for (std::int64_t d : dims) out += ", " + std::to_string(d);
    return out + "]";
}

Spatial Layer::halo() const {
    // A tile's output rows need the input rows a kernel window reaches beyond the tile: `pad` rows on the
    // side where padding is read, `dilation*(kernel-1) - pad` on the other; the halo is the larger.
    if (!windowed()) return {};  // none
    Spatial h = Spatial::filled(kernel.rank(), 0);
    // Upsampling reads at most one row beyond the rows its output tile covers, scaled down (bilinear's
    // neighbour, or a tile boundary that falls within a repeated row).
    if (op == OpKind::upsample) return Spatial::filled(kernel.rank(), 1);
    // A transposed convolution's output row o reads the inputs i with i*stride - pad + k = o for a tap k:
    // output rows [stride*a, stride*b) read inputs from a - floor((kernel-1-pad)/stride) to
    // b - 1 + ceil(pad/stride). A split cuts the output elsewhere where padding, output_pad or uneven blocks
    // shift it: tiles.hpp's deconv_halos gives each tile's halo under a split.
    if (op == OpKind::deconv) {
        for (int i = 0; i < h.rank(); ++i)
            h[i] = std::max(std::max<std::int64_t>(0, kernel[i] - 1 - pad[i]) / stride[i],
                            (pad[i] + stride[i] - 1) / stride[i]);
        return h;
    }
    for (int i = 0; i < h.rank(); ++i) h[i] = std::max(pad[i], dilation[i] * (kernel[i] - 1) - pad[i]);
    return h;
}

bool Layer::has_halo() const {
    const Spatial h = halo();
    return std::any_of(h.begin(), h.end(), [](std::int64_t v) { return v > 0; });
}

const char* optimizer_name(Optimizer o) {
    switch (o) {
        case Optimizer::adam: return "adam";
        case Optimizer::adamw: return "adamw";
        default: return "sgd";
    }
}

const char* optimizer_value_rule(const std::string& name, double x) {
    const bool beta = name == "beta1" || name == "beta2";
    const bool good = std::isfinite(x) && x >= 0 && (name == "momentum" ? x <= 1 : !beta || x < 1);
    if (good) return nullptr;
    return name == "momentum" ? "a number between 0 and 1" : beta ? "a number in [0, 1)" : "a non-negative number";
}

double LrSchedule::lr(double base, std::int64_t step) const {
    if (step < warmup) {
        const double k = static_cast<double>(warmup);
        return base * (1.0 / k + (1.0 - 1.0 / k) * static_cast<double>(step) / k);
    }
    const std::int64_t j = step - warmup;
    switch (kind) {
        case Kind::cosine:
            if (j >= steps) return 0.0;
            return base * (1.0 + std::cos(std::numbers::pi * static_cast<double>(j) / static_cast<double>(steps))) /
                   2.0;
        case Kind::step: return base * std::pow(gamma, static_cast<double>(j / every));
        default: return base;
    }
}

FieldRef field_member(Layer& layer, Field field) {
    switch (field) {
        case Field::filters: return &layer.filters;
        case Field::groups: return &layer.groups;
        case Field::kernel: return &layer.kernel;
        case Field::stride: return &layer.stride;
        case Field::pad: return &layer.pad;
        case Field::dilation: return &layer.dilation;
        case Field::bias: return &layer.bias;
        case Field::slope: return &layer.slope;
        case Field::eps: return &layer.eps;
        case Field::momentum: return &layer.momentum;
        case Field::p: return &layer.p;
        case Field::scale: return &layer.scale;
        case Field::mode: return &layer.mode;
        case Field::output_pad: return &layer.output_pad;
        case Field::weight: return &layer.weight;
        case Field::padding: return &layer.padding;
    }
    return &layer.filters;
}

ConstFieldRef field_member(const Layer& layer, Field field) {
    return std::visit([](auto* member) -> ConstFieldRef { return member; },
                      field_member(const_cast<Layer&>(layer), field));  // read only: the same members
}

bool Layer::spatial() const { return shape.dims.size() >= 2 && kind().shape != ShapeRule::global_pool; }

int Network::find(const std::string& name) const {
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (layers[i].name == name) return static_cast<int>(i);
    return -1;
}

int Network::spatial_rank() const {
    int rank = 0;
    for (const Layer& l : layers)
        if (l.op == OpKind::input) rank = std::max(rank, static_cast<int>(l.shape.dims.size()) - 1);
    return rank;
}

std::int64_t Network::total_params() const {
    std::int64_t n = 0;
    for (const Layer& l : layers) n += l.params;
    return n;
}

std::int64_t Network::total_macs() const {
    std::int64_t n = 0;
    for (const Layer& l : layers) n += l.macs;
    return n;
}

std::int64_t Network::total_flops() const {
    std::int64_t n = 0;
    for (const Layer& l : layers) n += l.flops;
    return n;
}

std::int64_t Network::total_activation_bytes() const {
    std::int64_t n = 0;
    for (const Layer& l : layers) n += l.activation_bytes;
    return n;
}

}  // namespace dsl::frontend
