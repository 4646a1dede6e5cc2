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

#include <limits>

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
            if (!inputs_ok || !layer(l)) {
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

    static std::string kind(const Layer& l) { return std::string("'") + op_name(l.op) + "'"; }

    // Output size along one dimension of a window (conv or pooling), or nullopt (reported).
    std::optional<std::int64_t> window(const Layer& l, int dim, std::int64_t size, Checked& c) {
        const char* what = dim == 0 ? "rows" : "columns";
        const std::int64_t padded = c.add(size, c.mul(2, l.pad[dim]));
        const std::int64_t reach = c.add(c.mul(l.dilation[dim], l.kernel[dim] - 1), 1);
        if (c.overflow) return std::nullopt;
        if (reach > padded) {
            std::string k = std::to_string(l.kernel[dim]);
            if (l.dilation[dim] > 1) k += " (dilated to " + std::to_string(reach) + ")";
            fail(l, "kernel " + k + " does not fit the padded input of " + std::to_string(padded) + " " + what);
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
                if (in.dims.size() != 3)
                    return fail(l, kind(l) + " needs a 4-D input [N, C, H, W], got " + in.str() + " from '" +
                                       input(l, 0).name + "'");
                if (!k.weights && (2 * l.pad[0] > l.kernel[0] || 2 * l.pad[1] > l.kernel[1]))
                    return fail(l, "the padding of " + kind(l) + " must be at most half its kernel");
                auto h = window(l, 0, in.dims[1], c);
                if (!h) return false;
                auto w = window(l, 1, in.dims[2], c);
                if (!w) return false;
                const std::int64_t channels = in.dims[0];
                const std::int64_t area = c.mul(l.kernel[0], l.kernel[1]);
                if (k.weights) {  // a convolution: `filters` channels
                    l.shape.dims = {l.filters, *h, *w};
                    const std::int64_t weights = c.mul(c.mul(l.filters, channels), area);
                    l.params = c.add(weights, l.bias ? l.filters : 0);
                    l.macs = c.mul(c.mul(*h, *w), weights);
                    l.flops = c.mul(2, l.macs);
                } else {
                    l.shape.dims = {channels, *h, *w};
                    l.flops = c.mul(c.elements(l.shape), area);
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
            case ShapeRule::global_pool:
                if (in.dims.size() != 3)
                    return fail(l, kind(l) + " needs a 4-D input [N, C, H, W], got " + in.str() + " from '" +
                                       input(l, 0).name + "'");
                l.shape.dims = {in.dims[0], 1, 1};
                l.flops = in_elements;
                return true;
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
                if (in.dims.size() != 3)
                    return fail(l, kind(l) + " needs a 4-D input [N, C, H, W], got " + in.str() + " from '" +
                                       input(l, 0).name + "'");
                l.shape.dims = {in.dims[0], c.mul(in.dims[1], l.scale), c.mul(in.dims[2], l.scale)};
                // bilinear: two interpolations along the rows and one along the columns, 2 FLOPs each.
                l.flops = c.mul(c.elements(l.shape), l.upsample_mode() == UpsampleMode::bilinear ? 6 : 1);
                return true;
            }
            case ShapeRule::deconv: {
                if (in.dims.size() != 3)
                    return fail(l, kind(l) + " needs a 4-D input [N, C, H, W], got " + in.str() + " from '" +
                                       input(l, 0).name + "'");
                std::int64_t out[2] = {0, 0};
                for (int d = 0; d < 2; ++d) {
                    const char* what = d == 0 ? "rows" : "columns";
                    if (l.output_pad[d] >= l.stride[d])
                        return fail(l, "the output_pad of " + kind(l) + " must be smaller than its stride (" +
                                           std::to_string(l.output_pad[d]) + " " + what + ", stride " +
                                           std::to_string(l.stride[d]) + ")");
                    out[d] = c.add(c.add(c.mul(in.dims[d + 1] - 1, l.stride[d]), l.kernel[d] + l.output_pad[d]),
                                   -2 * l.pad[d]);
                    if (!c.overflow && out[d] < 1)
                        return fail(l, "the padding of " + kind(l) + " leaves no output " + what + " (" +
                                           std::to_string(out[d]) + ")");
                }
                const std::int64_t weights = c.mul(c.mul(l.filters, in.dims[0]), c.mul(l.kernel[0], l.kernel[1]));
                l.shape.dims = {l.filters, out[0], out[1]};
                l.params = c.add(weights, l.bias ? l.filters : 0);
                l.macs = c.mul(c.mul(in.dims[1], in.dims[2]), weights);  // every input element times its window
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
                const bool logits_ok =
                    pixel ? in.dims.size() == 3
                          : in.dims.size() == 1 || (in.dims.size() == 3 && in.dims[1] == 1 && in.dims[2] == 1);
                if (!logits_ok)
                    return fail(l, kind(l) + " needs logits " + (pixel ? "[N, K, H, W]" : "[N, K] or [N, K, 1, 1]") +
                                       ", got " + in.str() + " from '" + input(l, 0).name + "'");
                const bool labels_ok =
                    pixel ? labels.dims.size() == 2 && labels.dims[0] == in.dims[1] && labels.dims[1] == in.dims[2]
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
