// Shape inference: each layer's output shape, parameters, MACs, FLOPs and activation memory, in order.
//
// FLOPs count the forward pass per sample: 2 per MAC for conv and fc (bias additions are not counted),
// one per output element for batchnorm, an element-wise kind's own count per element (its `flops` in
// layer_kinds.cpp: one for relu and leaky_relu), (inputs - 1) per output element for add,
// one per window element for max/avg pooling (kernel area per output element), one per input element for
// global_avgpool and the losses, none for concat (it only moves data).
//
// All arithmetic is checked: a shape whose sizes would overflow 64-bit integers is an error, never a
// silently wrong number.
#include <dsl/frontend/passes.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

namespace dsl::frontend {

namespace {

// Sizes beyond this are rejected: 2^50 elements per sample (4 PiB) is absurd for any real network, and
// leaves room for the products and totals below to stay within int64.
constexpr std::int64_t max_elements = std::int64_t{1} << 50;

// Checked arithmetic that remembers whether anything overflowed (or passed `max_elements`).
struct Checked {
    bool overflow = false;

    std::int64_t mul(std::int64_t a, std::int64_t b) {
        std::int64_t r = 0;
        if (__builtin_mul_overflow(a, b, &r)) {
            overflow = true;
            return 0;
        }
        return r;
    }
    std::int64_t add(std::int64_t a, std::int64_t b) {
        std::int64_t r = 0;
        if (__builtin_add_overflow(a, b, &r)) {
            overflow = true;
            return 0;
        }
        return r;
    }
    std::int64_t elements(const Shape& s) {
        std::int64_t n = 1;
        for (std::int64_t d : s.dims) n = mul(n, d);
        if (n > max_elements) overflow = true;
        return n;
    }
};

class Inference {
public:
    Inference(Network& net, Diagnostics& diags) : net_(net), diags_(diags), ok_(net.layers.size(), true) {}

    bool run() {
        const std::size_t errors_before = diags_.error_count();
        Checked totals;
        for (std::size_t i = 0; i < net_.layers.size(); ++i) {
            Layer& l = net_.layers[i];
            bool inputs_ok = true;
            for (int in : l.inputs) inputs_ok = inputs_ok && in >= 0 && ok_[static_cast<std::size_t>(in)];
            // A layer whose input failed stays quiet: its error would only repeat the first one.
            if (!inputs_ok || !layer(l) || !addressable(l)) {
                ok_[i] = false;
                continue;
            }
            sums_[0] = totals.add(sums_[0], l.params);
            sums_[1] = totals.add(sums_[1], l.macs);
            sums_[2] = totals.add(sums_[2], l.flops);
            sums_[3] = totals.add(sums_[3], l.activation_bytes);
            if (totals.overflow) {
                diags_.error(l.loc, "the network's total size overflows 64-bit integers");
                return false;
            }
        }
        check_padding();
        return diags_.error_count() == errors_before;
    }

private:
    Network& net_;
    Diagnostics& diags_;
    std::vector<bool> ok_;
    std::int64_t sums_[4] = {0, 0, 0, 0};

    const Layer& input(const Layer& l, std::size_t i) const {
        return net_.layers[static_cast<std::size_t>(l.inputs[i])];
    }

    bool fail(const Layer& l, const std::string& message) {
        diags_.error(l.loc, message);
        return false;
    }

    // Every dimension of a tensor is indexed with a 32-bit number by the kernels (Halide's buffers), however
    // a schedule splits it: a longer one is the network's error, found here rather than as an out-of-memory
    // error in a run.
    bool addressable(const Layer& l) {
        constexpr std::int64_t most = std::numeric_limits<std::int32_t>::max();
        for (std::size_t d = 0; d < l.shape.dims.size(); ++d) {
            if (l.shape.dims[d] <= most) continue;
            const bool channels = d == 0 && !l.is_data();
            return fail(l, "'" + l.name + "' would have " + std::to_string(l.shape.dims[d]) +
                               (channels ? " channels" : " elements along a dimension") + " (output " + l.shape.str() +
                               "): a dimension of a tensor holds at most " + std::to_string(most) +
                               " (2^31-1) in dsl, whose kernels index it with 32-bit numbers");
        }
        return true;
    }

    static std::string kind(const Layer& l) { return std::string("'") + op_name(l.op) + "'"; }

    // A tensor's margins beyond its border hold one thing for all the windows that read them: padding, or its
    // far side. The layers with a `padding` that read a tensor must agree on it.
    void check_padding() {
        std::vector<int> first(net_.layers.size(), -1);  // per tensor: its first reader with a padding
        for (std::size_t i = 0; i < net_.layers.size(); ++i) {
            const Layer& l = net_.layers[i];
            if (!l.kind().param("padding") || l.inputs.empty() || l.inputs[0] < 0) continue;
            int& reader = first[static_cast<std::size_t>(l.inputs[0])];
            if (reader < 0) {
                reader = static_cast<int>(i);
                continue;
            }
            const Layer& other = net_.layers[static_cast<std::size_t>(reader)];
            if (other.periodic() == l.periodic()) continue;
            auto text = [](const Layer& x) { return x.periodic() ? "padding = periodic" : "padding = zeros"; };
            Diagnostic& d = diags_.error(
                l.loc, "'" + l.name + "' reads '" + input(l, 0).name + "' with " + text(l) + ", but '" + other.name +
                           "' reads it with " + text(other) +
                           ": what lies beyond a tensor's border must be the same for every window that reads it");
            Diagnostics::note(d, other.loc, "'" + other.name + "' declared here");
        }
    }

    // The spatial rank of a windowed kind's input: 2 for an image [N, C, H, W], 3 for a volume [N, C, D, H, W];
    // 0 (reported) for anything else.
    int spatial_input(const Layer& l, const Shape& in) {
        if (in.dims.size() == 3 || in.dims.size() == 4) return static_cast<int>(in.dims.size()) - 1;
        fail(l, kind(l) + " needs an image [N, C, H, W] or a volume [N, C, D, H, W], got " + in.str() + " from '" +
                    input(l, 0).name + "'");
        return 0;
    }

    // Fits the layer's spatial attributes (kernel, stride, pad, dilation, output_pad: its parameters' and the
    // defaults of those its kind has not) to `rank` dimensions: one number applies to each, a list must have
    // one per dimension. False (reported) where a list has another length.
    bool fit_spatial(Layer& l, int rank) {
        for (Spatial* v : {&l.kernel, &l.stride, &l.pad, &l.dilation, &l.output_pad}) {
            if (v->rank() == 1) {
                *v = Spatial::filled(rank, (*v)[0]);
                continue;
            }
            if (v->rank() == rank) continue;
            std::string name = "a list";
            for (const ParamSpec& p : l.kind().params)
                if (std::holds_alternative<Spatial*>(field_member(l, p.field)) &&
                    std::get<Spatial*>(field_member(l, p.field)) == v)
                    name = "'" + std::string(p.name) + "'";
            return fail(l, name + " of " + kind(l) + " has " + std::to_string(v->rank()) +
                               " values, but its input has " + std::to_string(rank) +
                               " spatial dimensions: give one number, or one per dimension");
        }
        return true;
    }

    // Output size along spatial dimension `dim` (of `rank`) of a window (conv or pooling), or nullopt (reported).
    std::optional<std::int64_t> window(const Layer& l, int dim, int rank, std::int64_t size, Checked& c) {
        const int axis = axis_of(dim, rank);
        const std::int64_t padded = c.add(size, c.mul(2, l.pad[dim]));
        const std::int64_t reach = c.add(c.mul(l.dilation[dim], l.kernel[dim] - 1), 1);
        if (c.overflow) return std::nullopt;
        if (reach > padded) {
            std::string k = std::to_string(l.kernel[dim]);
            if (l.dilation[dim] > 1) k += " (dilated to " + std::to_string(reach) + ")";
            fail(l, "kernel " + k + " does not fit the padded input of " + count_along(padded, axis));
            return std::nullopt;
        }
        if (l.periodic() && l.pad[dim] > size) {
            fail(l, "the periodic padding of " + kind(l) + " (" + count_along(l.pad[dim], axis) +
                        ") is more than its input's " + count_along(size, axis) +
                        ": it would wrap around more than once");
            return std::nullopt;
        }
        return (padded - reach) / l.stride[dim] + 1;
    }

    bool layer(Layer& l) {
        Checked c;
        bool ok = infer(l, c);
        if (ok) {
            const std::int64_t elements = c.elements(l.shape);
            l.activation_bytes = c.mul(4, elements);
            if (c.overflow || l.params > max_elements || l.macs > max_elements * 1024)
                return fail(l, "the sizes of '" + l.name + "' are too large (" + l.shape.str() + ")");
        }
        return ok;
    }

    bool infer(Layer& l, Checked& c) {
        const LayerKind& k = l.kind();
        if (k.shape == ShapeRule::data) return true;  // shapes set by elaboration
        const Shape& in = input(l, 0).shape;
        const std::int64_t in_elements = c.elements(in);
        switch (k.shape) {
            case ShapeRule::data: break;
            case ShapeRule::window: {
                const int rank = spatial_input(l, in);
                if (!rank || !fit_spatial(l, rank)) return false;
                for (int d = 0; d < rank && !k.weights; ++d)
                    if (2 * l.pad[d] > l.kernel[d])
                        return fail(l, "the padding of " + kind(l) + " must be at most half its kernel");
                std::vector<std::int64_t> out;
                for (int d = 0; d < rank; ++d) {
                    auto e = window(l, d, rank, in.dims[static_cast<std::size_t>(d) + 1], c);
                    if (!e) return false;
                    out.push_back(*e);
                }
                const std::int64_t channels = in.dims[0];
                std::int64_t taps = 1, points = 1;  // a window's, and the output's places
                for (int d = 0; d < rank; ++d) taps = c.mul(taps, l.kernel[d]), points = c.mul(points, out[d]);
                l.shape.dims = {k.weights ? l.filters : channels};
                l.shape.dims.insert(l.shape.dims.end(), out.begin(), out.end());
                if (k.weights) {  // a convolution: `filters` channels
                    const std::int64_t weights = c.mul(c.mul(l.filters, channels), taps);
                    l.params = c.add(weights, l.bias ? l.filters : 0);
                    l.macs = c.mul(points, weights);
                    l.flops = c.mul(2, l.macs);
                } else {
                    l.flops = c.mul(c.elements(l.shape), taps);
                }
                return true;
            }
            case ShapeRule::same:
                if (k.weights) {  // batch norm, group norm: a scale and a shift per channel
                    if (in.dims.empty()) return fail(l, kind(l) + " needs an input with channels, got " + in.str());
                    if (k.param("groups") && in.dims[0] % l.groups != 0)
                        return fail(l, "the " + std::to_string(l.groups) + " groups of " + kind(l) +
                                           " do not divide the " + std::to_string(in.dims[0]) + " channels of '" +
                                           input(l, 0).name + "'");
                    l.params = c.mul(2, in.dims[0]);
                }
                l.shape = in;
                l.flops = c.mul(k.flops, in_elements);
                return true;
            case ShapeRule::global_pool: {
                const int rank = spatial_input(l, in);
                if (!rank) return false;
                l.shape.dims.assign(static_cast<std::size_t>(rank) + 1, 1);
                l.shape.dims[0] = in.dims[0];
                l.flops = in_elements;
                return true;
            }
            case ShapeRule::flatten:
                l.shape.dims = {l.filters};
                l.params = c.add(c.mul(in_elements, l.filters), l.bias ? l.filters : 0);
                l.macs = c.mul(in_elements, l.filters);
                l.flops = c.mul(2, l.macs);
                return true;
            case ShapeRule::sum:
                for (std::size_t i = 1; i < l.inputs.size(); ++i)
                    if (!(input(l, i).shape == in))
                        return fail(l, "cannot add tensors of shapes " + in.str() + " ('" + input(l, 0).name +
                                           "') and " + input(l, i).shape.str() + " ('" + input(l, i).name + "')");
                l.shape = in;
                l.flops = c.mul(in_elements, static_cast<std::int64_t>(l.inputs.size()) - 1);
                return true;
            case ShapeRule::concat: {
                l.shape = in;
                for (std::size_t i = 1; i < l.inputs.size(); ++i) {
                    const Shape& other = input(l, i).shape;
                    bool fits = !in.dims.empty() && other.dims.size() == in.dims.size();
                    for (std::size_t d = 1; fits && d < in.dims.size(); ++d) fits = other.dims[d] == in.dims[d];
                    if (!fits)
                        return fail(l, "cannot concatenate tensors of shapes " + in.str() + " ('" + input(l, 0).name +
                                           "') and " + other.str() + " ('" + input(l, i).name +
                                           "'): only the channels may differ");
                    l.shape.dims[0] = c.add(l.shape.dims[0], other.dims[0]);
                }
                return true;
            }
            case ShapeRule::upsample: {
                const int rank = spatial_input(l, in);
                if (!rank || !fit_spatial(l, rank)) return false;
                const UpsampleMode mode = l.upsample_mode();
                if ((mode == UpsampleMode::bilinear && rank != 2) || (mode == UpsampleMode::trilinear && rank != 3))
                    return fail(l, std::string("'") + (rank == 2 ? "trilinear" : "bilinear") + "' interpolates " +
                                       (rank == 2 ? "volumes [N, C, D, H, W]" : "images [N, C, H, W]") + ", but '" +
                                       input(l, 0).name + "' is " + in.str() +
                                       ": use mode = " + (rank == 2 ? "bilinear" : "trilinear"));
                l.shape.dims = {in.dims[0]};
                for (int d = 0; d < rank; ++d)
                    l.shape.dims.push_back(c.mul(in.dims[static_cast<std::size_t>(d) + 1], l.scale));
                // Linear: interpolations along each dimension between the 2^rank sources (3 of them in an image,
                // 7 in a volume), 2 FLOPs each.
                const std::int64_t per = l.linear_upsample() ? 2 * ((std::int64_t{1} << rank) - 1) : 1;
                l.flops = c.mul(c.elements(l.shape), per);
                return true;
            }
            case ShapeRule::deconv: {
                const int rank = spatial_input(l, in);
                if (!rank || !fit_spatial(l, rank)) return false;
                std::vector<std::int64_t> out;
                std::int64_t taps = 1, points = 1;  // a window's, and the input's places
                for (int d = 0; d < rank; ++d) {
                    const int axis = axis_of(d, rank);
                    const char* what = axis_units[axis];
                    const std::int64_t size = in.dims[static_cast<std::size_t>(d) + 1];
                    if (l.output_pad[d] >= l.stride[d])
                        return fail(l, "the output_pad of " + kind(l) + " must be smaller than its stride (" +
                                           count_along(l.output_pad[d], axis) + ", stride " +
                                           std::to_string(l.stride[d]) + ")");
                    out.push_back(
                        c.add(c.add(c.mul(size - 1, l.stride[d]), l.kernel[d] + l.output_pad[d]), -2 * l.pad[d]));
                    if (!c.overflow && out.back() < 1)
                        return fail(l, "the padding of " + kind(l) + " leaves no output " + what + " (" +
                                           std::to_string(out.back()) + ")");
                    taps = c.mul(taps, l.kernel[d]);
                    points = c.mul(points, size);
                }
                const std::int64_t weights = c.mul(c.mul(l.filters, in.dims[0]), taps);
                l.shape.dims = {l.filters};
                l.shape.dims.insert(l.shape.dims.end(), out.begin(), out.end());
                l.params = c.add(weights, l.bias ? l.filters : 0);
                l.macs = c.mul(points, weights);  // every input element times its window
                l.flops = c.mul(2, l.macs);
                return true;
            }
            case ShapeRule::loss: {
                const Layer& label = input(l, 1);
                const Shape& labels = label.shape;
                if (k.float_labels()) {  // a float label of the prediction's shape
                    if (!label.float_label)
                        return fail(l, kind(l) + " needs float targets, but '" + label.name +
                                           "' is an integer label: declare it as 'label " + label.name + " " +
                                           in.str() + " float'");
                    if (!(labels == in))
                        return fail(l, "labels " + labels.str() + " do not match the prediction " + in.str() + " of " +
                                           kind(l) + ": they must have its shape");
                    l.shape.dims.clear();
                    l.flops = c.mul(k.flops, in_elements);
                    return true;
                }
                if (label.float_label)
                    return fail(l, kind(l) + " needs class indices, but '" + label.name +
                                       "' is a float label: declare it without 'float', or use a regression loss "
                                       "(mse, l1, bce_with_logits)");
                const bool pixel = l.op == OpKind::pixel_cross_entropy;
                // Per pixel (or voxel): logits [N, K, spatial...]. Per sample: [N, K], or global pooling's
                // [N, K, 1, 1] (and [N, K, 1, 1, 1]).
                const bool spatial = in.dims.size() == 3 || in.dims.size() == 4;
                const bool ones =
                    spatial && std::all_of(in.dims.begin() + 1, in.dims.end(), [](std::int64_t v) { return v == 1; });
                const bool logits_ok = pixel ? spatial : in.dims.size() == 1 || ones;
                if (!logits_ok)
                    return fail(l, kind(l) + " needs logits " +
                                       (pixel ? "[N, K, H, W] or [N, K, D, H, W]" : "[N, K] or [N, K, 1, 1]") +
                                       ", got " + in.str() + " from '" + input(l, 0).name + "'");
                const bool labels_ok =
                    pixel ? std::equal(labels.dims.begin(), labels.dims.end(), in.dims.begin() + 1, in.dims.end())
                          : labels.dims.empty();
                if (!labels_ok)
                    return fail(l, "labels " + labels.str() + " do not match logits " + in.str() + " of " + kind(l));
                l.shape.dims.clear();
                l.flops = in_elements;
                return true;
            }
        }
        return true;
    }
};

}  // namespace

bool infer_shapes(Network& net, Diagnostics& diags) { return Inference(net, diags).run(); }

}  // namespace dsl::frontend
