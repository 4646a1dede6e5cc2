// Element-wise layers on the GPU: activations, add (sums of any number of inputs), copy, accumulate, and
// the SGD step.
#include "gpu_common.cuh"
#include "gpu_map.cuh"

#include "../kernels/kernel_checks.hpp"
#include "../random/splitmix.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace dsl::backend::gpu {

namespace {

// The sum of `count` inputs in double, rounded once, as the reference adds; with `relu`, its leaky ReLU of
// `slope` after (the ReLU that reads an add, fused into it).
struct SumInputs : PerElement {
    int count;
    bool relu = false;
    float slope = 0.0f;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        double acc = 0.0;
#pragma unroll
        for (int k = 0; k < S; ++k)
            if (k < count) acc += v[k];
        const auto sum = static_cast<float>(acc);
        return relu ? leaky(sum, slope) : sum;
    }
};

struct LeakyForward : PerElement {
    float slope;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return leaky(v[0], slope);
    }
};

// Inputs x, dy.
struct LeakyBackward : PerElement {
    float slope;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return v[0] > 0.0f ? v[1] : slope * v[1];
    }
};

// 1 / (1 + exp(-x)), in float.
__device__ inline float sigmoid_of(float x) { return 1.0f / (1.0f + expf(-x)); }

struct SigmoidForward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return sigmoid_of(v[0]);
    }
};

// Inputs x, dy: dy * y * (1 - y), with y recomputed from x.
struct SigmoidBackward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        const float y = sigmoid_of(v[0]);
        return v[1] * y * (1.0f - y);
    }
};

// tanh(x), and its gradient dy * (1 - y^2) with y recomputed from x.
struct TanhForward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return tanhf(v[0]);
    }
};

struct TanhBackward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        const float y = tanhf(v[0]);
        return v[1] * (1.0f - y * y);
    }
};

// The exact GELU: x * (1 + erf(x / sqrt 2)) / 2; its gradient (1 + erf(x / sqrt 2)) / 2 + x * phi(x).
struct GeluForward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return v[0] * 0.5f * (1.0f + erff(v[0] * 0.70710678118654752f));
    }
};

struct GeluBackward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        const float cdf = 0.5f * (1.0f + erff(v[0] * 0.70710678118654752f));
        const float pdf = 0.39894228040143268f * expf(-0.5f * v[0] * v[0]);
        return v[1] * (cdf + v[0] * pdf);
    }
};

// Dropout: x * scale where the mask (splitmix.hpp's, of the element's global coordinates) keeps it, else 0.
// The view's first element is global (n0, c0, z0, y0, x0). A row hashes its coordinates once, an image's
// (n, c, y) and a volume's (n, c, z, y), and each element its column: dropout_keep's hash, split at the row.
struct DropoutOp {
    std::uint64_t key;
    std::int64_t step, n0, c0, z0, y0, x0;
    bool volume;
    std::uint32_t threshold;
    float scale;
    __device__ std::uint64_t row(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y) const {
        std::uint64_t h = dropout_stream(key, step, n0 + n, c0 + c);
        if (volume) h = dropout_along(h, z0 + z);
        return dropout_along(h, y0 + y);
    }
    template <int S>
    __device__ float operator()(std::uint64_t row, const float (&v)[S], std::int64_t x) const {
        return dropout_kept(dropout_along(row, x0 + x), threshold) ? __fmul_rn(v[0], scale) : 0.0f;
    }
};

__global__ void sgd_kernel(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum,
                           float decay) {
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += std::int64_t(gridDim.x) * blockDim.x) {
        // Rounded step by step as the reference (no fused multiply-adds).
        const float grad = __fadd_rn(g[i], __fmul_rn(decay, w[i]));
        const float velocity = __fadd_rn(__fmul_rn(momentum, m[i]), grad);
        m[i] = velocity;
        w[i] = __fsub_rn(w[i], __fmul_rn(lr, velocity));
    }
}

// g *= factor; `found` set where an element was not finite (every writer writes the same).
__global__ void unscale_kernel(float* g, std::int64_t count, float factor, double* found) {
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += std::int64_t(gridDim.x) * blockDim.x) {
        const float v = g[i];
        if (!isfinite(v)) *found = 1.0;
        g[i] = __fmul_rn(v, factor);
    }
}

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::int64_t count, AdamStep s) {
    const float one_minus_beta1 = 1.0f - s.beta1, one_minus_beta2 = 1.0f - s.beta2;
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += std::int64_t(gridDim.x) * blockDim.x) {
        // Rounded step by step as the reference (adam_update).
        float p = w[i];
        if (s.decay_factor != 1.0f) p = __fmul_rn(p, s.decay_factor);
        float grad = g[i];
        if (s.decay != 0.0f) grad = __fadd_rn(grad, __fmul_rn(s.decay, p));
        const float mi = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(one_minus_beta1, grad));
        const float vi = __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(one_minus_beta2, grad), grad));
        m[i] = mi;
        v[i] = vi;
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias2_sqrt), s.eps);
        w[i] = __fsub_rn(p, __fmul_rn(s.step_size, __fdiv_rn(mi, denom)));
    }
}

class GpuDropout final : public DropoutKernels {
public:
    void forward(ConstView x, const DropoutMask& m, View y) override { apply("dropout forward", x, m, y); }
    void backward(ConstView dy, const DropoutMask& m, View dx) override { apply("dropout backward", dy, m, dx); }

private:
    // Every coordinate is needed: no rows are folded.
    static void apply(const char* kernel, ConstView x, const DropoutMask& m, View y) {
        check_same_dims(x, y, kernel);
        check_place(m.at, y.dims, kernel);
        const ConstVolumes xv = volumes(x);
        const Volumes yv = volumes(y);
        const VolumePlace at = volume_place(m.at);
        map(kernel, yv.dims, Merge::none, operand(yv), inputs(xv),
            DropoutOp{m.key, m.step, m.n0, m.c0, at.z, at.y, at.x, is_volume(y.dims), dropout_threshold(m.p),
                      1.0f / (1.0f - m.p)});
    }
};

class GpuActivation final : public ActivationKernels {
public:
    void forward(frontend::Activation f, ConstView x, float slope, View y) override {
        const ConstVolumes xv = volumes(x);
        const Volumes yv = volumes(y);
        check_same_dims(x, y, "activation forward");
        const VolumeDims& d = yv.dims;
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return map("activation forward", d, Merge::all, operand(yv), inputs(xv), LeakyForward{{}, slope});
            case frontend::Activation::sigmoid:
                return map("sigmoid forward", d, Merge::all, operand(yv), inputs(xv), SigmoidForward{});
            case frontend::Activation::tanh:
                return map("tanh forward", d, Merge::all, operand(yv), inputs(xv), TanhForward{});
            case frontend::Activation::gelu:
                return map("gelu forward", d, Merge::all, operand(yv), inputs(xv), GeluForward{});
            case frontend::Activation::none: break;
        }
        throw dsl::InternalError("activation kernels called without a function");
    }

    void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) override {
        const ConstVolumes xv = volumes(x), dyv = volumes(dy);
        const Volumes dxv = volumes(dx);
        check_same_dims(x, dy, "activation backward");
        check_same_dims(x, dx, "activation backward");
        const VolumeDims& d = dxv.dims;
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return map("activation backward", d, Merge::all, operand(dxv), inputs(xv, dyv),
                           LeakyBackward{{}, slope});
            case frontend::Activation::sigmoid:
                return map("sigmoid backward", d, Merge::all, operand(dxv), inputs(xv, dyv), SigmoidBackward{});
            case frontend::Activation::tanh:
                return map("tanh backward", d, Merge::all, operand(dxv), inputs(xv, dyv), TanhBackward{});
            case frontend::Activation::gelu:
                return map("gelu backward", d, Merge::all, operand(dxv), inputs(xv, dyv), GeluBackward{});
            case frontend::Activation::none: break;
        }
        throw dsl::InternalError("activation kernels called without a function");
    }
};

class GpuEltwise final : public EltwiseKernels {
public:
    // y may be one of xs: each element reads every input before it is written. Up to `per_kernel` inputs
    // sum in double and round once, as the reference; more go through a dense running sum, rounded per kernel.
    void add(const std::vector<ConstView>& xs, View y) override {
        const Volumes yv = volumes(y);
        for (const ConstView& x : xs) check_same_dims(x, y, "add");
        const VolumeDims& d = yv.dims;
        if (d.elements() == 0) return;
        if (xs.empty()) return zero(yv);
        // Two inputs (a residual connection) have a kernel of their own, which needs fewer registers.
        if (xs.size() <= 2) return sum<2>(d, xs, 0, xs.size(), operand(yv), {});
        if (xs.size() <= per_kernel) return sum<per_kernel>(d, xs, 0, xs.size(), operand(yv), {});
        float* running = context().sum.as<float>(d.elements());
        const ConstVolumes partial = dense_volumes<const float>(running, d);
        sum<per_kernel>(d, xs, 0, per_kernel, dense_operand(running, d), {});
        for (std::size_t k = per_kernel; k < xs.size(); k += per_kernel - 1)
            sum<per_kernel>(d, xs, k, std::min(xs.size(), k + per_kernel - 1), dense_operand(running, d), partial);
        map("copy", d, Merge::all, operand(yv), inputs(partial), Copy{});
    }

    // Two inputs, as the CPU's: one kernel sums them.
    bool add_relu(const std::vector<ConstView>& xs, float slope, View y) override {
        if (xs.size() != 2) return false;
        const Volumes yv = volumes(y);
        for (const ConstView& x : xs) check_same_dims(x, y, "add");
        if (yv.dims.elements() > 0) sum<2>(yv.dims, xs, 0, 2, operand(yv), {}, slope);
        return true;
    }

    void copy(ConstView x, View y) override {
        check_same_dims(x, y, "copy");
        const Volumes yv = volumes(y);
        map("copy", yv.dims, Merge::all, operand(yv), inputs(volumes(x)), Copy{});
    }

    void accumulate(ConstView x, View y) override {
        const ConstVolumes xv = volumes(x);
        const Volumes yv = volumes(y);
        check_same_dims(x, y, "accumulate");
        map("accumulate", yv.dims, Merge::all, operand(yv), inputs(ConstVolumes(yv), xv), Add2{});
    }

    void sgd(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum, float decay) override {
        if (count <= 0) return;
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(count, 256), 65535));
        sgd_kernel<<<blocks, 256, 0, gpu::stream()>>>(w, m, g, count, lr, momentum, decay);
        check_launch("sgd");
    }

    void adam(float* w, float* m, float* v, const float* g, std::int64_t count, const AdamStep& step) override {
        if (count <= 0) return;
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(count, 256), 65535));
        adam_kernel<<<blocks, 256, 0, gpu::stream()>>>(w, m, v, g, count, step);
        check_launch("adam");
    }

    // Every array's kernel sets one flag; one download reads it.
    bool unscale(const std::vector<GradientArray>& gradients, float factor) override {
        double* found = context().totals.as<double>(1);
        check(cudaMemsetAsync(found, 0, sizeof(double), gpu::stream()), "cudaMemsetAsync (unscale)");
        for (const GradientArray& a : gradients) {
            if (a.count <= 0) continue;
            const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(a.count, 256), 65535));
            unscale_kernel<<<blocks, 256, 0, gpu::stream()>>>(a.data, a.count, factor, found);
            check_launch("unscale");
        }
        return *context().fetch(found, 1) == 0.0;
    }

private:
    static constexpr int per_kernel = 8;

    // out = xs[begin, end) (plus `first` when it has a base) in one kernel of up to N inputs, over `d`; with
    // `relu`, the leaky ReLU of that slope of each sum.
    template <int N>
    static void sum(const VolumeDims& d, const std::vector<ConstView>& xs, std::size_t begin, std::size_t end,
                    Operand<float> out, const ConstVolumes& first, std::optional<float> relu = std::nullopt) {
        Inputs<N> in;
        in.count = 0;
        if (first.base) in.op[in.count++] = input(first);
        for (std::size_t k = begin; k < end; ++k) in.op[in.count++] = input(xs[k]);
        map("add", d, Merge::all, out, in, SumInputs{{}, in.count, relu.has_value(), relu.value_or(0.0f)});
    }
};

}  // namespace

ActivationKernels* activation_kernels() {
    static GpuActivation instance;
    return &instance;
}

DropoutKernels* dropout_kernels() {
    static GpuDropout instance;
    return &instance;
}

EltwiseKernels* eltwise_kernels() {
    static GpuEltwise instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
