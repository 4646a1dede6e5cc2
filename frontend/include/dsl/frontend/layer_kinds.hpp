// The layer kinds, as one table of plain data (in the spirit of MLIR's ODS or PyTorch's
// native_functions.yaml): each kind's name, parameters, inputs, window, weights, loss, element-wise function,
// shape rule and kernel name. The elaborator, shape inference, the printers, the unknown-kind error, the
// scheduler's model and calibration and the trainer read it; a new element-wise kind is a row here and its
// kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsl::frontend {

// Indexes layer_kinds(): the order of the table.
enum class OpKind {
    input,  // a declared input tensor
    label,  // a declared label tensor
    conv,
    batchnorm,
    groupnorm,  // statistics per sample and group of channels
    dropout,    // zeroes elements at random in training, by a mask that is a function of their global coordinates
    relu,
    leaky_relu,
    sigmoid,
    tanh,
    gelu,
    maxpool,
    avgpool,
    global_avgpool,
    fc,
    add,
    concat,
    softmax_cross_entropy,  // logits [N, K] against labels [N]
    pixel_cross_entropy,    // logits [N, K, H, W] against labels [N, H, W]
    upsample,               // rows and columns repeated (nearest) or interpolated (bilinear) `scale` times
    deconv,                 // transposed convolution, PyTorch's ConvTranspose2d
    mse,                    // predictions against float labels of their shape: the regression losses
    l1,
    bce_with_logits,
};

// What an element-wise kind computes, element by element, as its kernels take it: y = f(x) forward,
// dx = dy * f'(x) backward. relu is leaky_relu with slope 0 (its kernels are leaky_relu's); sigmoid is
// y = 1 / (1 + exp(-x)), dx = dy * y * (1 - y); tanh is dx = dy * (1 - y^2); gelu is the exact erf form
// (PyTorch's default) y = x * (1 + erf(x / sqrt 2)) / 2, dx = dy * ((1 + erf(x / sqrt 2)) / 2 + x * phi(x)) with
// phi the standard normal density.
enum class Activation { none, relu, leaky_relu, sigmoid, tanh, gelu };

// What a regression loss computes per element of prediction x and target t, as its kernels take it (the mean
// over every element is the loss): mse (x - t)^2, l1 |x - t|, bce_with_logits max(x, 0) - x t + log1p(exp(-|x|))
// (binary cross-entropy of sigmoid(x), in PyTorch's stable form). none for the other kinds.
enum class Regression { none, mse, l1, bce_with_logits };

// The value a parameter takes, and the text of its type in errors.
// `choice`: one of the names in ParamSpec::choices, written as a bare identifier (`mode = bilinear`).
enum class ParamType {
    positive_int,
    positive_spatial,  // one number for every spatial dimension, or a list of one per dimension
    nonneg_spatial,
    boolean,
    positive_real,
    any_real,
    unit_real,
    probability,  // in [0, 1): dropout's p
    choice,
};

// The Layer member a parameter sets (network.hpp: field_member maps each to its member).
enum class Field {
    filters,
    kernel,
    stride,
    pad,
    dilation,
    bias,
    slope,
    eps,
    momentum,
    groups,
    p,
    scale,
    mode,
    output_pad,
    weight,
    padding
};

// upsample's modes, in the order of its `mode` parameter's choices: nearest repeats each input element;
// bilinear (images) and trilinear (volumes) interpolate as PyTorch's F.interpolate(mode=..., align_corners=False).
enum class UpsampleMode { nearest, bilinear, trilinear };

// What a convolution or pooling reads beyond the tensor's border, in the order of the `padding` choices:
// zeros (max pooling: -infinity), or the tensor's other side (periodic, PyTorch's padding_mode='circular').
enum class Padding { zeros, periodic };

struct ParamSpec {
    const char* name;
    ParamType type;
    Field field;
    bool required = false;
    double default_value = 0.0;   // when not required: the number (for every spatial dimension; booleans 0 or 1)
    const char* default_of = "";  // the default is another parameter's value ("kernel"): pooling's stride
    std::vector<const char*> choices{};  // a choice's names; its default is the index default_value
};

// How shape inference derives a kind's output shape (infer_shapes.cpp dispatches on it).
enum class ShapeRule {
    data,         // declared: input and label
    window,       // [N, C', spatial'] from a window over every spatial dimension: conv (C' = filters), pooling (C)
    same,         // the input's shape: batch norm, element-wise kinds
    global_pool,  // [N, C, 1, 1] (a volume's [N, C, 1, 1, 1])
    flatten,      // [N, outputs] from the flattened input: fc
    sum,          // the inputs' common shape: add
    concat,       // the channels summed, the rest equal: concat
    loss,         // [N] from logits and labels (of the prediction's shape, float, for a regression loss)
    upsample,     // [N, C, each spatial extent * scale]
    deconv,       // [N, filters, each spatial extent's (E-1)*stride - 2*pad + kernel + output_pad]
};

struct LayerKind {
    OpKind op;
    const char* name = "";                     // the spelling in `.net` files
    std::vector<ParamSpec> params{};           // in positional order
    int min_inputs = 1, max_inputs = 1;        // max_inputs -1: no limit
    // Reads a neighbourhood of places (a window, an interpolation, a transposed window): a halo under a
    // spatial split, the input region scheduler::window_input gives.
    bool windowed = false;
    bool weights = false;                      // has learnable parameters
    bool loss = false;                         // reads logits and a label, gives the loss; nothing reads it
    Activation activation = Activation::none;  // an element-wise kind's function, else none
    Regression regression = Regression::none;  // a regression loss's function (float labels), else none
    int flops = 1;  // element-wise kinds: FLOPs per element of forward (shapes, and the model's cost)
    ShapeRule shape = ShapeRule::same;
    // The kernels' name in platform time keys ("conv" in "conv.forward"; see scheduler/kernel_names.hpp):
    // relu and leaky_relu share "activation", the cross-entropy losses "loss", the regression losses
    // "regression"; empty for a kind without kernels.
    const char* kernels = "";

    bool elementwise() const { return activation != Activation::none; }
    bool data() const { return shape == ShapeRule::data; }
    const ParamSpec* param(const std::string& name) const;  // null when the kind has none of that name
    // A loss that reads float labels: a regression loss.
    bool float_labels() const { return regression != Regression::none; }
};

// Every kind, input and label first, indexed by OpKind.
const std::vector<LayerKind>& layer_kinds();
const LayerKind& kind_of(OpKind op);
const char* op_name(OpKind op);  // kind_of(op).name

// The kinds a statement may call (all but input and label): by name, or nullopt; and their names in the
// table's order (for "did you mean" and the list in the unknown-kind error).
std::optional<OpKind> op_from_name(const std::string& name);
std::vector<std::string> layer_kind_names();

// The first kind whose kernels are named `kernels` in time keys (relu for "activation", which leaky_relu
// shares), or nullopt.
std::optional<OpKind> kind_with_kernels(const std::string& kernels);

}  // namespace dsl::frontend
