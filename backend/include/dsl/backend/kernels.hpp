// The kernels of every layer kind, one interface per kind, over views of tiles. Three implementations:
// the reference (plain loops, the tests' oracle), the CPU one (oneDNN convolutions, Halide for the rest) and
// the GPU one (cuDNN convolutions, CUDA kernels for the rest; gpu.hpp).
//
// Where arguments live: views, weights, biases and their gradients are in the kernel set's memory (the
// host's on the CPU, the device's on the GPU); the small per-channel arrays (batch-norm means, inverse
// standard deviations and double sums, global-pooling sums and values) and labels are in the host's.
// Kernels of a GPU set run in order on one stream: one that returns a host value waits for its own work.
//
// Views are of images (two spatial dimensions) or of volumes (three), and of vectors (none) where a kind
// takes them; a window's fields and a placement have the views' rank. Below, o, i and a are places (one
// index per spatial dimension), `o*s + a*d` is taken dimension by dimension, and sums over a place run over
// every spatial dimension.
//
// Kernels never communicate, and pad only where told (Window::zeros). A tile's margins hold its padding (or
// its halo), and views passed in cover exactly the elements a kernel reads: a convolution's input view has
// the places its output places read. Reductions that must span tiles or processes (batch-norm statistics, global
// pooling, the loss) are split into a local part that adds into caller-owned sums and a part that applies the sums.
#pragma once

#include <dsl/backend/tensor.hpp>
#include <dsl/frontend/layer_kinds.hpp>
#include <dsl/scheduler/window.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace dsl::backend {

// Kernel size, stride and dilation of a convolution or pooling, per spatial dimension.
struct Window {
    Index kernel{1, 1}, stride{1, 1}, dilation{1, 1};
    // Of a convolution (or a pooling): how many of x's places at each end of each spatial dimension are padding
    // outside the tensor, which the margins hold as zeros (a pooling's: its padding). A kernel may leave them out and
    // pad in their place (oneDNN's direct kernels run a 7x7 image a third faster than the 9x9 view with its margins);
    // it still writes them in dx. Rank 0: none known (a tile whose margins are halos, or periodic padding).
    Margins zeros;
    // Of a convolution or a pooling: x's view (dx's) leaves the `zeros` out, as they lie beyond its tile (one
    // without margins: the trainer's blocked tiles), and the kernel pads in their place. Only kernels that take blocked
    // views (Kernels::blocked) take such a window.
    bool zeros_outside = false;
    // Of a convolution's forward: the weights are those of this kernel set's previous call, unchanged since
    // (an overlapped layer's strips after its interior), so a kernel may use again what it made of them.
    bool same_weights = false;
    // w and dw (and nothing else) lie in 16 x 16 blocks of filters and channels (backend/src/tensors/
    // weight_blocks.hpp), where the caller keeps them so because these kernels asked (ConvKernels::blocks_weights).
    bool blocked_weights = false;

    // The input extent that `out` outputs read along dimension `d`.
    std::int64_t input_extent(int d, std::int64_t out) const {
        return scheduler::window_extent(out, kernel[d], stride[d], dilation[d]);
    }
};

class ConvKernels {
public:
    virtual ~ConvKernels() = default;
    // y(n,f,o) = bias(f) + sum_{c,a} x(n, c, o*s + a*d) * w(f, c, a), over y's dims (s the stride, d the
    // dilation, a over the kernel's taps). w is {F, C, kernel}; bias may be null. x spans exactly
    // window.input_extent of y's extents.
    virtual void forward(ConstView x, ConstView w, const float* bias, View y, const Window& window) = 0;
    // forward, then the leaky ReLU of `slope` (relu's is 0) of each output, before it is written: bit for bit
    // forward followed by ActivationKernels::forward. False where these kernels do not fuse the two, or not
    // for this problem (y untouched): the caller runs them one after the other.
    virtual bool forward_relu(ConstView x, ConstView w, const float* bias, float slope, View y, const Window& window) {
        (void)x, (void)w, (void)bias, (void)slope, (void)y, (void)window;
        return false;
    }
    // The transpose: dx (x's dims) receives, for each element, the sum of dy * w over the outputs that read
    // it. Overwrites dx.
    virtual void backward_data(ConstView dy, ConstView w, View dx, const Window& window) = 0;
    // dw(f,c,a) = sum_{n,o} dy(n,f,o) * x(n, c, o*s + a*d); db(f) = sum dy(n,f,o) when db is not null.
    // Overwrites both. Called right after backward_data on the same dy (no other kernel of this library
    // between them), it may read that call's copy of dy: a caller changes dy only after both.
    virtual void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& window) = 0;
    // Whether these kernels would have weights of `w` {F, C, kernel}, their gradient with them, kept in 16 x 16
    // blocks rather than plain, and read and written so when a call's window says so (Window::blocked_weights).
    virtual bool blocks_weights(const Dims& /*w*/) const { return false; }
};

// Where the views of an upsampling or a transposed convolution lie in their tensors: the global place of the
// first element of the input view (x, dx) and of the output view (y, dy) along each spatial dimension. What
// an output reads depends on its place (a bilinear weight, which inputs a strided transposed window hits), so
// that a kernel runs on any tile of the tensor alike.
struct Placement {
    Index x, y;
};

// upsample(scale, mode) over an input of `in` extents (window.hpp: upsample_source): nearest, or `linear`
// along every spatial dimension (bilinear on images, trilinear on volumes).
struct Upsample {
    std::int64_t scale = 2;
    bool linear = false;
    Index in;
    Placement at;
};

class UpsampleKernels {
public:
    virtual ~UpsampleKernels() = default;
    // y(n,c,o) = the sum over the sources i of output o of weight * x(n,c,i): nearest's one source, or the
    // 2^rank corners of linear interpolation, each weighed by the product of its dimensions' weights
    // (upsample_source). x spans at least the places y's outputs read (scheduler::upsample_input).
    virtual void forward(const Upsample& u, ConstView x, View y) = 0;
    // The transpose: dx (overwritten) receives, for each element, the sum of weight * dy over the outputs of
    // dy that read it.
    virtual void backward(const Upsample& u, ConstView dy, View dx) = 0;
};

// A transposed convolution (PyTorch's ConvTranspose2d and 3d): input i adds into outputs o = i*stride - pad + k.
struct Deconv {
    Index kernel{1, 1}, stride{1, 1}, pad{0, 0};
    Placement at;
};

class DeconvKernels {
public:
    virtual ~DeconvKernels() = default;
    // y(n,f,o) = bias(f) + sum x(n,c,i) * w(c,f,a) over the inputs of x's view and taps with
    // o = i*s - p + a. w is {C, F, kernel} (PyTorch's layout); bias may be null.
    virtual void forward(ConstView x, ConstView w, const float* bias, View y, const Deconv& d) = 0;
    // dx(n,c,i) = sum dy(n,f,o) * w(c,f,a) over the outputs of dy's view that input i adds into.
    // Overwrites dx.
    virtual void backward_data(ConstView dy, ConstView w, View dx, const Deconv& d) = 0;
    // dw(c,f,a) = sum x(n,c,i) * dy(n,f,o) over the pairs within the views; db(f) = the sum of dy when
    // db is not null. Overwrites both.
    virtual void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Deconv& d) = 0;
};

class BatchNormKernels {
public:
    virtual ~BatchNormKernels() = default;
    // Adds the per-channel sums of x and x^2 over the samples and places into sum[c] and sum_sq[c].
    virtual void statistics(ConstView x, double* sum, double* sum_sq) = 0;
    // y = gamma[c] * (x - mean[c]) * inv_std[c] + beta[c]
    virtual void forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                         View y) = 0;
    // forward, then the leaky ReLU of `slope` (relu's is 0) of each value, in one pass over memory: bit for bit
    // forward followed by ActivationKernels::forward, without writing the first one's output. False where
    // these kernels do not fuse the two (y untouched): the caller runs them one after the other.
    virtual bool forward_relu(ConstView x, const float* mean, const float* inv_std, const float* gamma,
                              const float* beta, float slope, View y) {
        (void)x, (void)mean, (void)inv_std, (void)gamma, (void)beta, (void)slope, (void)y;
        return false;
    }
    // Adds the per-channel sums of dy and of dy * x_hat (x_hat = (x - mean) * inv_std) into sum_dy[c] and
    // sum_dy_xhat[c]: once summed over the group they are d(beta) and d(gamma).
    virtual void backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                                     double* sum_dy_xhat) = 0;
    // dx = gamma * inv_std * (dy - sum_dy / count - x_hat * sum_dy_xhat / count), with the group's sums and
    // `count` the number of elements per channel over the whole group.
    virtual void backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                          const double* sum_dy, const double* sum_dy_xhat, double count, View dx) = 0;
};

// Group normalization (PyTorch's nn.GroupNorm): per sample n and group g of C / G consecutive channels, the
// mean and biased variance over those channels and every place. Per-(sample, group) arrays are
// indexed [n * G + g] over the view's samples; gamma and beta are per channel.
class GroupNormKernels {
public:
    virtual ~GroupNormKernels() = default;
    // Adds the sums of x and x^2 over each (n, g) into sum[n * G + g] and sum_sq[n * G + g].
    virtual void statistics(ConstView x, std::int64_t groups, double* sum, double* sum_sq) = 0;
    // y = gamma[c] * (x - mean[n, g(c)]) * inv_std[n, g(c)] + beta[c]
    virtual void forward(ConstView x, std::int64_t groups, const float* mean, const float* inv_std, const float* gamma,
                         const float* beta, View y) = 0;
    // Adds, with x_hat = (x - mean) * inv_std: the per-channel sums of dy and dy * x_hat into d_beta[c] and
    // d_gamma[c] (the weight gradients once summed over every process), and the per-(n, g) sums of
    // dy * gamma and dy * gamma * x_hat into sum_g[n * G + g] and sum_g_xhat[n * G + g].
    virtual void backward_statistics(ConstView x, ConstView dy, std::int64_t groups, const float* mean,
                                     const float* inv_std, const float* gamma, double* d_beta, double* d_gamma,
                                     double* sum_g, double* sum_g_xhat) = 0;
    // dx = inv_std * (dy * gamma - sum_g / count - x_hat * sum_g_xhat / count), with the sums over each whole
    // (n, g) and `count` its number of elements (C / G times the whole tensor's places).
    virtual void backward(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                          const float* gamma, const double* sum_g, const double* sum_g_xhat, double count,
                          View dx) = 0;
};

// Where a dropout tile lies and which mask it draws: an element is kept when dropout_keep (splitmix.hpp) of
// (key, step, its global sample, channel and place: an image's row and column, a volume's depth, row and
// column) says so, and kept elements are scaled by 1 / (1 - p).
// The view's first element is global sample n0, channel 0 and place `at`.
struct DropoutMask {
    std::uint64_t key = 0;  // the seed and the layer
    std::int64_t step = 0;
    std::int64_t n0 = 0, c0 = 0;  // the view's first sample and channel in the whole tensor
    Index at;
    float p = 0.0f;
};

class DropoutKernels {
public:
    virtual ~DropoutKernels() = default;
    // y = x * mask / (1 - p); backward the same of dy (the mask is drawn again, not stored).
    virtual void forward(ConstView x, const DropoutMask& mask, View y) = 0;
    virtual void backward(ConstView dy, const DropoutMask& mask, View dx) = 0;
};

// The element-wise kinds (layer_kinds.hpp), each by its function `f`: relu and leaky_relu are y = x where
// x > 0, slope * x elsewhere (relu is slope 0); `slope` is ignored by the others.
class ActivationKernels {
public:
    virtual ~ActivationKernels() = default;
    // y = f(x), element by element.
    virtual void forward(frontend::Activation f, ConstView x, float slope, View y) = 0;
    // dx = dy * f'(x): for relu and leaky_relu, dy where x > 0, slope * dy elsewhere.
    virtual void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) = 0;
};

enum class PoolKind { max, average };

class PoolKernels {
public:
    virtual ~PoolKernels() = default;
    // y(n,c,o) = the max (or mean) of x(n, c, o*s + a) over the window's taps a. Padding in the margins must
    // be -infinity for max pooling and zero for average (which divides by the taps, as PyTorch's default
    // count_include_pad does).
    virtual void forward(PoolKind kind, ConstView x, View y, const Window& window) = 0;
    // Of blocked views, the window may leave the padding outside x (Window::zeros_outside).
    // dx (x's dims, overwritten): max routes each dy to the first maximum of its window (in the order of the
    // taps, the last dimension fastest); average spreads dy / taps over the window.
    virtual void backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window) = 0;
    // Adds the sum over the places of x(n, c) into sums[n * C + c] (global average pooling, before the
    // division).
    virtual void global_sum(ConstView x, double* sums) = 0;
    // dx(n, c, o) = values[n * C + c] * scale, for every element of dx.
    virtual void broadcast(const float* values, float scale, View dx) = 0;
};

class FcKernels {
public:
    virtual ~FcKernels() = default;
    // y(n, k) = bias(k) + sum_i x(n, i) * w(k, i), where i runs over x's channels and places in order; y is
    // {N, K} and w is {K, I}. bias may be null.
    virtual void forward(ConstView x, ConstView w, const float* bias, View y) = 0;
    virtual void backward_data(ConstView dy, ConstView w, View dx) = 0;                // overwrites dx
    virtual void backward_weights(ConstView x, ConstView dy, View dw, float* db) = 0;  // overwrites both
};

// One Adam or AdamW step's scalars, computed in double on the host as PyTorch computes them: step_size =
// lr / (1 - beta1^t), bias2_sqrt = sqrt(1 - beta2^t), decay_factor = 1 - lr * weight_decay for AdamW.
struct AdamStep {
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float decay = 0.0f;         // Adam's weight decay, added to the gradient
    float decay_factor = 1.0f;  // AdamW's decoupled decay
    float step_size = 0.0f, bias2_sqrt = 1.0f;
};

// The scalars of update number t (from 1) with learning rate lr.
AdamStep adam_step(bool decoupled, double lr, double beta1, double beta2, double eps, double weight_decay,
                   std::int64_t t);

// The reference's Adam update, element by element (the CPU kernels' too).
void adam_update(float* w, float* m, float* v, const float* g, std::int64_t count, const AdamStep& s);

// Gradients of `count` floats at `data`, in a kernel set's memory.
struct GradientArray {
    float* data;
    std::int64_t count;
};

// The reference's unscaling, element by element (the CPU kernels' too).
bool unscale_arrays(const std::vector<GradientArray>& gradients, float factor);

class EltwiseKernels {
public:
    virtual ~EltwiseKernels() = default;
    virtual void add(const std::vector<ConstView>& xs, View y) = 0;  // y = the sum of xs
    // add, then the leaky ReLU of `slope` (relu's is 0), in one pass: as BatchNormKernels::forward_relu.
    virtual bool add_relu(const std::vector<ConstView>& xs, float slope, View y) {
        (void)xs, (void)slope, (void)y;
        return false;
    }
    virtual void copy(ConstView x, View y) = 0;                      // y = x (concat writes channel ranges)
    virtual void accumulate(ConstView x, View y) = 0;                // y += x (gradients of shared tensors)
    // SGD with momentum and weight decay, as PyTorch's: g' = g + decay * w; m = momentum * m + g'; w -= lr * m.
    virtual void sgd(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum, float decay) = 0;
    // Adam and AdamW, as PyTorch's (torch.optim.Adam and AdamW, one tensor at a time), per element in float:
    // w *= decay_factor (AdamW; 1 for Adam); g' = g + decay * w (Adam; decay 0 for AdamW);
    // m = beta1 * m + (1 - beta1) * g'; v = beta2 * v + (1 - beta2) * g' * g';
    // w -= step_size * m / (sqrt(v) / bias2_sqrt + eps), rounded in that order (no fused multiply-adds).
    virtual void adam(float* w, float* m, float* v, const float* g, std::int64_t count, const AdamStep& step) = 0;
    // Loss scaling's unscaling (PyTorch GradScaler's unscale_): every element of every array multiplied by
    // `factor`; returns whether all of them were finite before.
    virtual bool unscale(const std::vector<GradientArray>& gradients, float factor) = 0;
};

class LossKernels {
public:
    virtual ~LossKernels() = default;
    // Softmax cross-entropy over the channels, for every sample and place of `logits` (labels are {n, 1} for
    // logits {n, k}, else {n, 1, logits' extents}). Returns the sum of -log softmax(logits)[label] over the view, and,
    // when dlogits.base is not null, writes dlogits = (softmax - one_hot(label)) * scale.
    virtual double cross_entropy(ConstView logits, LabelView labels, float scale, View dlogits) = 0;
    // A regression loss (layer_kinds.hpp) element by element over `prediction` and `target` (of its dims, in
    // this kernel set's memory). Returns the sum of l(x, t) over the view: (x - t)^2, |x - t|, or
    // max(x, 0) - x t + log1p(exp(-|x|)); and, when dprediction.base is not null, writes dprediction =
    // l'(x, t) * scale: 2 (x - t), sign(x - t) (0 where x == t, as PyTorch), or sigmoid(x) - t.
    virtual double regression(frontend::Regression loss, ConstView prediction, ConstView target, float scale,
                              View dprediction) = 0;
};

struct SyntheticData;  // synthetic.hpp

// The synthetic data set's inputs and float targets made where a kernel set's tensors are (a GPU's), rather
// than on the host and copied: the tile of `tile`'s dims whose first element is global sample `sample0`,
// channel 0, place `at`, the same values as SyntheticData::fill_inputs and fill_targets.
class SyntheticKernels {
public:
    virtual ~SyntheticKernels() = default;
    virtual void inputs(const SyntheticData& data, std::int64_t sample0, const Index& at, View tile) = 0;
    virtual void targets(const SyntheticData& data, std::int64_t sample0, const Index& at, View tile) = 0;
};

// One implementation of every kind; tests may mix them (of one memory).
struct Kernels {
    ConvKernels* conv = nullptr;
    BatchNormKernels* batchnorm = nullptr;
    ActivationKernels* activation = nullptr;
    PoolKernels* pool = nullptr;
    FcKernels* fc = nullptr;
    EltwiseKernels* eltwise = nullptr;
    LossKernels* loss = nullptr;
    Memory* memory = nullptr;               // null: the host's
    SyntheticKernels* synthetic = nullptr;  // null: the data source makes inputs on the host
    // Convolutions of layers whose precision is bfloat16 (or float16): each pass's two inputs rounded to
    // 16 bits, their products summed in float32; the results float32 (oneDNN's, on the CPU) or rounded to 16
    // bits too (cuDNN's, on the GPU, as under PyTorch's autocast). Null where the kernels have none (they
    // compute in float32 then, the layers' outputs still kept in 16 bits).
    ConvKernels* conv_bfloat16 = nullptr;
    ConvKernels* conv_float16 = nullptr;
    UpsampleKernels* upsample = nullptr;
    DeconvKernels* deconv = nullptr;
    GroupNormKernels* groupnorm = nullptr;
    DropoutKernels* dropout = nullptr;
    // Whether conv, batchnorm, the (leaky) ReLU's activation and eltwise's add, copy and accumulate take views
    // whose channels lie in blocks of blocked_lanes (view.hpp), every view of a call in that layout (a
    // convolution's x and y, or dx and dy, each in either), and convolutions' windows whose zeros lie outside x.
    bool blocked = false;
    const char* planar_why = "the kernels take planar tiles";  // what keeps `blocked` false

    Memory& mem() const { return memory ? *memory : host_memory(); }
    // The convolutions with the products of 16-bit precision `p`; null for float32 or where there are none.
    ConvKernels* conv16(scheduler::Precision p) const {
        return p == scheduler::Precision::bfloat16  ? conv_bfloat16
               : p == scheduler::Precision::float16 ? conv_float16
                                                    : nullptr;
    }
};

Kernels reference_kernels();  // plain loops: slow, obviously right
Kernels cpu_kernels();        // oneDNN convolutions, Halide generators for the rest

// A transposed convolution through a kernel set's convolutions (its forward is their backward data, its
// backward data their forward, its weight gradient their weight gradient with the roles of x and dy
// swapped), with scratch in `memory`: the CPU's (oneDNN) and the GPU's (cuDNN) deconvolution. `pool`
// sums the bias gradient (global_sum), `eltwise` adds the overlap of the scratch into the output tile.
std::unique_ptr<DeconvKernels> deconv_over_conv(ConvKernels& conv, PoolKernels& pool, EltwiseKernels& eltwise,
                                                Memory& memory);

}  // namespace dsl::backend
