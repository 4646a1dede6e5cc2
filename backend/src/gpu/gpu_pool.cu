// Pooling on the GPU: max and average pooling over windows (the backward as a gather), and global
// pooling's per-plane sums and broadcast.
#include "gpu_common.cuh"
#include "gpu_map.cuh"
#include "gpu_reduce.cuh"

#include "../kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <cstdint>
#include <limits>

namespace dsl::backend::gpu {

namespace {

struct Broadcast {
    const double* values;  // [n * channels + c]
    std::int64_t channels;
    float scale;
    __device__ float row(std::int64_t n, std::int64_t c, std::int64_t) const {
        return __fmul_rn(static_cast<float>(values[n * channels + c]), scale);
    }
    template <int S>
    __device__ float operator()(float value, const float (&)[S], std::int64_t) const {
        return value;
    }
};

struct PoolWindow {
    std::int64_t kh, kw, sh, sw, dh, dw;
};

PoolWindow pool_window(const Window& w) {
    return {w.kernel[0], w.kernel[1], w.stride[0], w.stride[1], w.dilation[0], w.dilation[1]};
}

// Output row i of a pooling reads x's rows from i * sh.
struct PoolRow {
    Operand<const float> x;
    PoolWindow win;
    __device__ const float* row(std::int64_t n, std::int64_t c, std::int64_t i) const {
        return x.base + (n * x.sn + c * x.sc + i * win.sh * x.sh);
    }
    // Scans the window of output column j in the reference's order (a, then b) and keeps the first maximum:
    // ties, and the backward with them, go to the earliest element.
    __device__ std::int64_t first_max(const float* p, std::int64_t j, float* best_value) const {
        const float* q = p + j * win.sw;
        float best = q[0];
        std::int64_t best_offset = 0;
        for (std::int64_t a = 0; a < win.kh; ++a)
            for (std::int64_t b = 0; b < win.kw; ++b) {
                const float v = q[a * win.dh * x.sh + b * win.dw];
                if (v > best) {
                    best = v;
                    best_offset = a * win.kw + b;
                }
            }
        *best_value = best;
        return best_offset;
    }
};

struct MaxPool : PoolRow {
    template <int S>
    __device__ float operator()(const float* p, const float (&)[S], std::int64_t j) const {
        float best;
        first_max(p, j, &best);
        return best;
    }
};

// The offset a * kw + b of each window's first maximum, for the backward's gather.
struct MaxPoolArgmax : PoolRow {
    template <int S>
    __device__ std::int32_t operator()(const float* p, const float (&)[S], std::int64_t j) const {
        float best;
        return static_cast<std::int32_t>(first_max(p, j, &best));
    }
};

// The sum in double over the window divided by its area, as PyTorch's count_include_pad.
struct AveragePool : PoolRow {
    template <int S>
    __device__ float operator()(const float* p, const float (&)[S], std::int64_t j) const {
        const float* q = p + j * win.sw;
        double acc = 0.0;
        for (std::int64_t a = 0; a < win.kh; ++a)
            for (std::int64_t b = 0; b < win.kw; ++b) acc += q[a * win.dh * x.sh + b * win.dw];
        return static_cast<float>(acc / double(win.kh * win.kw));
    }
};

// dx of pooling as a gather: each element of dx sums the gradients of the windows that contain it, so dx
// is overwritten without atomics. Windows are visited in the reference's order (output row, then column),
// so the double sums round as its scatter does.
struct PoolGather {
    Operand<const float> dy;
    const std::int32_t* argmax;  // dense over dy's dims; null for average pooling
    std::int64_t channels, out_h, out_w;
    PoolWindow win;
    struct Row {
        const float* dy;
        const std::int32_t* argmax;
        std::int64_t y;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t y) const {
        return {dy.base + (n * dy.sn + c * dy.sc), argmax ? argmax + (n * channels + c) * out_h * out_w : nullptr, y};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&)[S], std::int64_t x) const {
        const double area = double(win.kh * win.kw);
        double acc = 0.0;
        // Descending window offsets give ascending output rows and columns.
        for (std::int64_t a = win.kh - 1; a >= 0; --a) {
            const std::int64_t ty = r.y - a * win.dh;
            if (ty < 0 || ty % win.sh != 0 || ty / win.sh >= out_h) continue;
            const std::int64_t i = ty / win.sh;
            for (std::int64_t b = win.kw - 1; b >= 0; --b) {
                const std::int64_t tx = x - b * win.dw;
                if (tx < 0 || tx % win.sw != 0 || tx / win.sw >= out_w) continue;
                const std::int64_t j = tx / win.sw;
                const double g = r.dy[i * dy.sh + j];
                if (!r.argmax)
                    acc += g / area;
                else if (r.argmax[i * out_w + j] == a * win.kw + b)
                    acc += g;
            }
        }
        return static_cast<float>(acc);
    }
};

class GpuPool final : public PoolKernels {
public:
    void forward(PoolKind kind, ConstView x, View y, const Window& window) override {
        const ConstPlanes xp = planes(x);
        const Planes yp = planes(y);
        check_pool(xp.dims, yp.dims, window);
        const PoolRow rows{input(xp), pool_window(window)};
        if (kind == PoolKind::max)
            map("max pool forward", yp.dims, Merge::none, operand(yp), no_inputs(), MaxPool{rows});
        else
            map("average pool forward", yp.dims, Merge::none, operand(yp), no_inputs(), AveragePool{rows});
    }

    void backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window) override {
        const ConstPlanes xp = planes(x), dyp = planes(dy);
        const Planes dxp = planes(dx);
        check_pool(xp.dims, dyp.dims, window);
        check_same_dims(xp, dxp, "pool backward");
        if (dxp.dims.elements() == 0) return;
        const PlaneDims& o = dyp.dims;
        std::int32_t* argmax = nullptr;
        if (kind == PoolKind::max && o.elements() > 0) {
            DSL_INTERNAL_CHECK(window.kernel[0] * window.kernel[1] <= std::numeric_limits<std::int32_t>::max(),
                               "pool: window too large");
            argmax = context().argmax.as<std::int32_t>(o.elements());
            map("max pool argmax", o, Merge::none, dense_operand(argmax, o), no_inputs(),
                MaxPoolArgmax{{input(xp), pool_window(window)}});
        }
        map("pool backward", dxp.dims, Merge::none, operand(dxp), no_inputs(),
            PoolGather{input(dyp), argmax, o.c, o.h, o.w, pool_window(window)});
    }

    void global_sum(ConstView x, double* sums) override {
        const ConstPlanes xp = planes(x);
        const std::int64_t plane_count = xp.dims.n * xp.dims.c;
        if (plane_count == 0) return;
        Context& ctx = context();
        double* totals = ctx.totals.as<double>(plane_count);
        reduce("global pool sum", xp.dims, Over::planes, {xp}, SumTerm{}, totals);
        const double* host = ctx.fetch(totals, plane_count);
        for (std::int64_t i = 0; i < plane_count; ++i) sums[i] += host[i];
    }

    void broadcast(const float* values, float scale, View dx) override {
        const Planes dxp = planes(dx);
        if (dxp.dims.elements() == 0) return;
        const double* device = context().upload(dxp.dims.n * dxp.dims.c, {values});
        map("broadcast", dxp.dims, Merge::rows, operand(dxp), no_inputs(), Broadcast{device, dxp.dims.c, scale});
    }
};

}  // namespace

PoolKernels* pool_kernels() {
    static GpuPool instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
