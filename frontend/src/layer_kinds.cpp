// The table of layer kinds (layer_kinds.hpp), and its lookups.
#include <dsl/frontend/layer_kinds.hpp>

#include <dsl/base/error.hpp>

namespace dsl::frontend {

namespace {

using T = ParamType;

// Parameters that several kinds share.
const ParamSpec kernel_param{"kernel", T::positive_spatial, Field::kernel, false, 1.0};
const ParamSpec pad_param{"pad", T::nonneg_spatial, Field::pad, false, 0.0};
// What a window reads beyond the tensor's border: zeros, or the other side (a periodic domain).
const ParamSpec padding_param{"padding", T::choice, Field::padding, false, 0.0, "", {"zeros", "periodic"}};
const ParamSpec bias_param{"bias", T::boolean, Field::bias, false, 1.0};
// A loss's factor in the total that training minimizes.
const ParamSpec weight_param{"weight", T::positive_real, Field::weight, false, 1.0};

std::vector<LayerKind> make_table() {
    return {
        {.op = OpKind::input,
         .name = "input",
         .min_inputs = 0,
         .max_inputs = 0,
         .shape = ShapeRule::data,
         .kernels = "input"},
        {.op = OpKind::label, .name = "label", .min_inputs = 0, .max_inputs = 0, .shape = ShapeRule::data},
        {.op = OpKind::conv,
         .name = "conv",
         .params = {{"filters", T::positive_int, Field::filters, true},
                    kernel_param,
                    {"stride", T::positive_spatial, Field::stride, false, 1.0},
                    pad_param,
                    {"dilation", T::positive_spatial, Field::dilation, false, 1.0},
                    bias_param,
                    padding_param},
         .windowed = true,
         .weights = true,
         .shape = ShapeRule::window,
         .kernels = "conv"},
        {.op = OpKind::batchnorm,
         .name = "batchnorm",
         .params = {{"eps", T::positive_real, Field::eps, false, 1e-5},
                    {"momentum", T::unit_real, Field::momentum, false, 0.1}},
         .weights = true,
         .kernels = "batchnorm"},
        // The same rule as batch norm (a scale and a shift per channel); the channels must divide into groups.
        {.op = OpKind::groupnorm,
         .name = "groupnorm",
         .params = {{"groups", T::positive_int, Field::groups, true},
                    {"eps", T::positive_real, Field::eps, false, 1e-5}},
         .weights = true,
         .kernels = "groupnorm"},
        {.op = OpKind::dropout,
         .name = "dropout",
         .params = {{"p", T::probability, Field::p, true}},
         .kernels = "dropout"},
        {.op = OpKind::relu, .name = "relu", .activation = Activation::relu, .kernels = "activation"},
        {.op = OpKind::leaky_relu,
         .name = "leaky_relu",
         .params = {{"slope", T::any_real, Field::slope, false, 0.01}},
         .activation = Activation::leaky_relu,
         .kernels = "activation"},
        // exp, an add and a division per element.
        {.op = OpKind::sigmoid, .name = "sigmoid", .activation = Activation::sigmoid, .flops = 4, .kernels = "sigmoid"},
        // Counted as sigmoid: one transcendental and a few arithmetic operations per element.
        {.op = OpKind::tanh, .name = "tanh", .activation = Activation::tanh, .flops = 4, .kernels = "tanh"},
        // erf, a scaling, an add and two multiplications per element.
        {.op = OpKind::gelu, .name = "gelu", .activation = Activation::gelu, .flops = 6, .kernels = "gelu"},
        {.op = OpKind::maxpool,
         .name = "maxpool",
         .params = {{"kernel", T::positive_spatial, Field::kernel, true},
                    {"stride", T::positive_spatial, Field::stride, false, 0.0, "kernel"},
                    pad_param,
                    padding_param},
         .windowed = true,
         .shape = ShapeRule::window,
         .kernels = "maxpool"},
        {.op = OpKind::avgpool,
         .name = "avgpool",
         .params = {{"kernel", T::positive_spatial, Field::kernel, true},
                    {"stride", T::positive_spatial, Field::stride, false, 0.0, "kernel"},
                    pad_param,
                    padding_param},
         .windowed = true,
         .shape = ShapeRule::window,
         .kernels = "avgpool"},
        {.op = OpKind::global_avgpool,
         .name = "global_avgpool",
         .shape = ShapeRule::global_pool,
         .kernels = "global_avgpool"},
        {.op = OpKind::fc,
         .name = "fc",
         .params = {{"outputs", T::positive_int, Field::filters, true}, bias_param},
         .weights = true,
         .shape = ShapeRule::flatten,
         .kernels = "fc"},
        {.op = OpKind::add,
         .name = "add",
         .min_inputs = 2,
         .max_inputs = -1,
         .shape = ShapeRule::sum,
         .kernels = "add"},
        {.op = OpKind::concat,
         .name = "concat",
         .min_inputs = 2,
         .max_inputs = -1,
         .shape = ShapeRule::concat,
         .kernels = "concat"},
        {.op = OpKind::softmax_cross_entropy,
         .name = "softmax_cross_entropy",
         .params = {weight_param},
         .min_inputs = 2,
         .max_inputs = 2,
         .loss = true,
         .shape = ShapeRule::loss,
         .kernels = "loss"},
        {.op = OpKind::pixel_cross_entropy,
         .name = "pixel_cross_entropy",
         .params = {weight_param},
         .min_inputs = 2,
         .max_inputs = 2,
         .loss = true,
         .shape = ShapeRule::loss,
         .kernels = "loss"},
        {.op = OpKind::upsample,
         .name = "upsample",
         .params = {{"scale", T::positive_int, Field::scale, false, 2.0},
                    {"mode", T::choice, Field::mode, false, 0.0, "", {"nearest", "bilinear", "trilinear"}}},
         .windowed = true,
         .shape = ShapeRule::upsample,
         .kernels = "upsample"},
        {.op = OpKind::deconv,
         .name = "deconv",
         .params = {{"filters", T::positive_int, Field::filters, true},
                    kernel_param,
                    {"stride", T::positive_spatial, Field::stride, false, 1.0},
                    pad_param,
                    {"output_pad", T::nonneg_spatial, Field::output_pad, false, 0.0},
                    bias_param},
         .windowed = true,
         .weights = true,
         .shape = ShapeRule::deconv,
         .kernels = "deconv"},
        // The regression losses: FLOPs per element of forward and gradient (a subtraction, a product or sign,
        // the gradient's scaling; bce's exp, log1p and sigmoid count as a few each).
        {.op = OpKind::mse,
         .name = "mse",
         .params = {weight_param},
         .min_inputs = 2,
         .max_inputs = 2,
         .loss = true,
         .regression = Regression::mse,
         .flops = 4,
         .shape = ShapeRule::loss,
         .kernels = "regression"},
        {.op = OpKind::l1,
         .name = "l1",
         .params = {weight_param},
         .min_inputs = 2,
         .max_inputs = 2,
         .loss = true,
         .regression = Regression::l1,
         .flops = 4,
         .shape = ShapeRule::loss,
         .kernels = "regression"},
        {.op = OpKind::bce_with_logits,
         .name = "bce_with_logits",
         .params = {weight_param},
         .min_inputs = 2,
         .max_inputs = 2,
         .loss = true,
         .regression = Regression::bce_with_logits,
         .flops = 12,
         .shape = ShapeRule::loss,
         .kernels = "regression"},
    };
}

}  // namespace

const ParamSpec* LayerKind::param(const std::string& param_name) const {
    for (const ParamSpec& p : params)
        if (param_name == p.name) return &p;
    return nullptr;
}

const std::vector<LayerKind>& layer_kinds() {
    static const std::vector<LayerKind> table = [] {
        std::vector<LayerKind> t = make_table();
        for (std::size_t i = 0; i < t.size(); ++i)
            DSL_INTERNAL_CHECK(static_cast<std::size_t>(t[i].op) == i,
                               std::string("the layer kind table is out of OpKind's order at ") + t[i].name);
        return t;
    }();
    return table;
}

const LayerKind& kind_of(OpKind op) { return layer_kinds()[static_cast<std::size_t>(op)]; }

const char* op_name(OpKind op) { return kind_of(op).name; }

std::optional<OpKind> op_from_name(const std::string& name) {
    for (const LayerKind& k : layer_kinds())
        if (!k.data() && name == k.name) return k.op;
    return std::nullopt;
}

std::vector<std::string> layer_kind_names() {
    std::vector<std::string> out;
    for (const LayerKind& k : layer_kinds())
        if (!k.data()) out.emplace_back(k.name);
    return out;
}

std::optional<OpKind> kind_with_kernels(const std::string& kernels) {
    for (const LayerKind& k : layer_kinds())
        if (kernels == k.kernels) return k.op;
    return std::nullopt;
}

}  // namespace dsl::frontend
