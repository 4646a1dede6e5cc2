// The checked network: blocks expanded into a flat graph of layers with hierarchical names, in
// topological order, with the shapes and costs that shape inference fills in.
#pragma once

#include <dsl/base/source.hpp>
#include <dsl/base/space.hpp>
#include <dsl/frontend/layer_kinds.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace dsl::frontend {

// A shape without the mini-batch dimension: every activation is [N, dims...]. A loss is [N] (dims empty).
struct Shape {
    std::vector<std::int64_t> dims;
    std::int64_t elements() const;  // per sample
    bool operator==(const Shape& o) const { return dims == o.dims; }
    std::string str() const;  // "[N, 64, 112, 112]"
};

// A window's kernel, stride, padding or dilation: one value per spatial dimension, outermost first.
using Spatial = Space<std::int64_t>;

struct Layer {
    std::string name;  // "layer2.1.conv2": instance path and statement name
    OpKind op = OpKind::relu;
    Location loc;                        // the statement (or declaration) that made it
    std::vector<int> inputs;             // indices into Network::layers, all smaller than this layer's
    std::vector<std::string> blocks;     // types of the enclosing block instances, outermost first
    std::vector<std::string> instances;  // their paths ("layer1", "layer1.0"), parallel to `blocks`

    // Attributes (the Fields of layer_kinds.hpp): elaboration sets those of the layer's kind, from its
    // arguments or the table's defaults; the others keep these values.
    std::int64_t filters = 0;  // conv: output channels; fc: outputs
    // One value per spatial dimension of the input, once shape inference has fitted them: elaboration gives
    // a single value (one number, or a default) as a list of one, which applies to every dimension.
    Spatial kernel{1};
    Spatial stride{1};
    Spatial pad{0};
    Spatial dilation{1};
    bool bias = true;       // conv, fc
    double slope = 0.01;    // leaky_relu
    double eps = 1e-5;      // batchnorm
    double momentum = 0.1;  // batchnorm running averages
    std::int64_t scale = 2;  // upsample
    std::int64_t mode = 0;   // upsample: an UpsampleMode, the index of its `mode` choice
    std::int64_t padding = 0;  // conv, pooling: a Padding, the index of its `padding` choice
    Spatial output_pad{0};     // deconv: indices added at the end of each spatial dimension
    std::int64_t groups = 1;  // groupnorm: groups of channels
    double p = 0.5;           // dropout: the probability that an element is zeroed
    double weight = 1.0;      // a loss's factor in the total

    // A label declared `float`: targets of a regression loss, not class indices.
    bool float_label = false;

    // Filled by shape inference.
    Shape shape;                        // output
    std::int64_t params = 0;            // learnable parameters
    std::int64_t macs = 0;              // multiply-accumulates per sample (conv, fc)
    std::int64_t flops = 0;             // floating-point operations per sample, forward (2 per MAC)
    std::int64_t activation_bytes = 0;  // output bytes per sample (float32)

    // The halo this layer needs on each side of its input tile, along each spatial dimension (none, rank 0, for
    // a layer that reads no neighbourhood). A transposed convolution's is the one where each output tile is
    // `stride` times its input tile; a split may cut its output elsewhere (scheduler/tiles.hpp's deconv_halos).
    Spatial halo() const;
    bool has_halo() const;  // along some dimension

    // Whether the output has spatial dimensions that a spatial split cuts into tiles: activations and
    // per-pixel labels, not vectors, per-sample labels or global pooling's 1x1. A spatial split of a layer
    // whose output has none gives every process of a sample group the whole of it (replicated).
    bool spatial() const;

    const LayerKind& kind() const { return kind_of(op); }
    // An input or a label: data made (or read) where it is needed, in its first reader's distribution.
    bool is_data() const { return kind().data(); }
    // A convolution, pooling, upsampling or transposed convolution: reads a halo under a spatial split.
    bool windowed() const { return kind().windowed; }
    UpsampleMode upsample_mode() const { return static_cast<UpsampleMode>(mode); }
    // Bilinear or trilinear: linear interpolation along every spatial dimension.
    bool linear_upsample() const { return upsample_mode() != UpsampleMode::nearest; }
    // A window that reads the tensor's other side beyond its border (padding = periodic).
    bool periodic() const { return static_cast<Padding>(padding) == Padding::periodic; }
    bool is_loss() const { return kind().loss; }
    // The parameter an element-wise kind's kernels take: leaky_relu's slope; 0 for a kind without one (relu).
    double activation_slope() const { return kind().param("slope") ? slope : 0.0; }
};

// The optimizer of the train line, with PyTorch's update rules: torch.optim.SGD, Adam (weight decay added
// to the gradient) and AdamW (decoupled weight decay).
enum class Optimizer { sgd, adam, adamw };
const char* optimizer_name(Optimizer o);

// The learning rate of every step: `warmup` steps rising linearly (PyTorch's LinearLR with start_factor
// 1/warmup, end_factor 1, total_iters warmup: step i < warmup has lr * (1/warmup + (1 - 1/warmup) * i /
// warmup)), then from step `warmup` on the main schedule at step j = i - warmup: constant (lr), cosine
// (CosineAnnealingLR with T_max `steps` and eta_min 0: lr * (1 + cos(pi * j / steps)) / 2, and 0 from j =
// steps on) or step (StepLR: lr * gamma^floor(j / every)). Steps count from 0, over resumptions.
struct LrSchedule {
    enum class Kind { constant, cosine, step };
    Kind kind = Kind::constant;
    std::int64_t warmup = 0;
    std::int64_t steps = 0;  // cosine
    std::int64_t every = 0;  // step
    double gamma = 0.1;      // step

    double lr(double base, std::int64_t step) const;
};

// The member of a layer that a parameter's Field (layer_kinds.hpp) sets: the one place that maps the two, for
// elaboration (which sets them) and the printers (which read them).
using FieldRef = std::variant<std::int64_t*, Spatial*, bool*, double*>;
FieldRef field_member(Layer& layer, Field field);
using ConstFieldRef = std::variant<const std::int64_t*, const Spatial*, const bool*, const double*>;
ConstFieldRef field_member(const Layer& layer, Field field);

struct TrainOptions {
    Optimizer optimizer = Optimizer::sgd;
    std::optional<double> lr, momentum, weight_decay;
    std::optional<double> beta1, beta2, eps;  // adam and adamw
    LrSchedule schedule;
};

// What a value of an optimizer's parameter (lr, momentum, beta1, beta2, eps, weight_decay) must be, on the train
// line and in dsl run's options alike: nullptr where `x` is one, else the rule in words ("a non-negative
// number"). A learning rate of 0 is one, as in PyTorch: a run that measures, or saves the initial weights,
// moves none.
const char* optimizer_value_rule(const std::string& name, double x);

struct Network {
    std::vector<Layer> layers;
    TrainOptions train;

    int find(const std::string& name) const;  // index, or -1
    // The spatial dimensions of its inputs: 2 for images [N, C, H, W], 3 for volumes [N, C, D, H, W].
    int spatial_rank() const;
    std::int64_t total_params() const;
    std::int64_t total_macs() const;
    std::int64_t total_flops() const;
    std::int64_t total_activation_bytes() const;
};

}  // namespace dsl::frontend
