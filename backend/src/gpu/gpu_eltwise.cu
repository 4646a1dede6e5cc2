// Element-wise layers on the GPU: activations, add (sums of any number of inputs), copy, accumulate, and
// the SGD step.
#include "gpu_common.cuh"
#include "gpu_map.cuh"

#include "../kernel_checks.hpp"
#include "../splitmix.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsl::backend::gpu {

namespace {

// The sum of `count` inputs in double, rounded once, as the reference adds.
struct SumInputs : PerElement {
    int count;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        double acc = 0.0;
#pragma unroll
        for (int k = 0; k < S; ++k)
            if (k < count) acc += v[k];
        return static_cast<float>(acc);
    }
};

struct LeakyForward : PerElement {
    float slope;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return v[0] > 0.0f ? v[0] : slope * v[0];
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
struct DropoutOp {
    DropoutMask m;
    std::uint32_t threshold;
    float scale;
    struct Row {
        std::int64_t n, c, y;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t y) const { return {n, c, y}; }
    template <int S>
    __device__ float operator()(const Row& r, const float (&v)[S], std::int64_t x) const {
        return dropout_keep(m.key, m.step, m.n0 + r.n, r.c, m.y0 + r.y, m.x0 + x, threshold) ? __fmul_rn(v[0], scale)
                                                                                              : 0.0f;
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

class GpuDropout final : public DropoutKernels {
public:
    void forward(ConstView x, const DropoutMask& m, View y) override {
        check_same_dims(x, y, "dropout forward");
        apply("dropout forward", x, m, y);
    }
    void backward(ConstView dy, const DropoutMask& m, View dx) override {
        check_same_dims(dy, dx, "dropout backward");
        apply("dropout backward", dy, m, dx);
    }

private:
    // Every coordinate is needed: no rows are folded.
    static void apply(const char* kernel, ConstView x, const DropoutMask& m, View y) {
        map(kernel, y.dims, Merge::none, operand(y), inputs(x), DropoutOp{m, dropout_threshold(m.p), 1.0f / (1.0f - m.p)});
    }
};

class GpuActivation final : public ActivationKernels {
public:
    void forward(frontend::Activation f, ConstView x, float slope, View y) override {
        check_same_dims(x, y, "activation forward");
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return map("activation forward", y.dims, Merge::all, operand(y), inputs(x), LeakyForward{{}, slope});
            case frontend::Activation::sigmoid:
                return map("sigmoid forward", y.dims, Merge::all, operand(y), inputs(x), SigmoidForward{});
            case frontend::Activation::tanh:
                return map("tanh forward", y.dims, Merge::all, operand(y), inputs(x), TanhForward{});
            case frontend::Activation::gelu:
                return map("gelu forward", y.dims, Merge::all, operand(y), inputs(x), GeluForward{});
            case frontend::Activation::none: break;
        }
        throw dsl::InternalError("activation kernels called without a function");
    }

    void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) override {
        check_same_dims(x, dy, "activation backward");
        check_same_dims(x, dx, "activation backward");
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return map("activation backward", dx.dims, Merge::all, operand(dx), inputs(x, dy),
                           LeakyBackward{{}, slope});
            case frontend::Activation::sigmoid:
                return map("sigmoid backward", dx.dims, Merge::all, operand(dx), inputs(x, dy), SigmoidBackward{});
            case frontend::Activation::tanh:
                return map("tanh backward", dx.dims, Merge::all, operand(dx), inputs(x, dy), TanhBackward{});
            case frontend::Activation::gelu:
                return map("gelu backward", dx.dims, Merge::all, operand(dx), inputs(x, dy), GeluBackward{});
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
        for (const ConstView& x : xs) check_same_dims(x, y, "add");
        if (y.dims.elements() == 0) return;
        if (xs.empty()) return zero(y);
        // Two inputs (a residual connection) have a kernel of their own, which needs fewer registers.
        if (xs.size() <= 2) return sum<2>(xs, 0, xs.size(), operand(y), {});
        if (xs.size() <= per_kernel) return sum<per_kernel>(xs, 0, xs.size(), operand(y), {});
        float* running = context().sum.as<float>(y.dims.elements());
        const ConstView partial{running, y.dims, y.dims.c * y.dims.h * y.dims.w, y.dims.h * y.dims.w, y.dims.w};
        sum<per_kernel>(xs, 0, per_kernel, dense_operand(running, y.dims), {});
        for (std::size_t k = per_kernel; k < xs.size(); k += per_kernel - 1)
            sum<per_kernel>(xs, k, std::min(xs.size(), k + per_kernel - 1), dense_operand(running, y.dims), partial);
        copy(partial, y);
    }

    void copy(ConstView x, View y) override {
        check_same_dims(x, y, "copy");
        map("copy", y.dims, Merge::all, operand(y), inputs(x), Copy{});
    }

    void accumulate(ConstView x, View y) override {
        check_same_dims(x, y, "accumulate");
        map("accumulate", y.dims, Merge::all, operand(y), inputs(ConstView(y), x), Add2{});
    }

    void sgd(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum, float decay) override {
        if (count <= 0) return;
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(count, 256), 65535));
        sgd_kernel<<<blocks, 256, 0, gpu::stream()>>>(w, m, g, count, lr, momentum, decay);
        check_launch("sgd");
    }

private:
    static constexpr int per_kernel = 8;

    // out = xs[begin, end) (plus `first` when it has a base) in one kernel of up to N inputs.
    template <int N>
    static void sum(const std::vector<ConstView>& xs, std::size_t begin, std::size_t end, Operand<float> out,
                    ConstView first) {
        Inputs<N> in;
        in.count = 0;
        if (first.base) in.op[in.count++] = input(first);
        for (std::size_t k = begin; k < end; ++k) in.op[in.count++] = input(xs[k]);
        map("add", xs[0].dims, Merge::all, out, in, SumInputs{{}, in.count});
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
