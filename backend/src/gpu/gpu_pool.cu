// Pooling on the GPU: max and average pooling over the windows of images and volumes (the backward as a
// gather), and global pooling's per-plane (per-volume) sums and broadcast.
#include "gpu_common.cuh"
#include "gpu_map.cuh"
#include "gpu_reduce.cuh"

#include "../kernels/kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <cstdint>
#include <limits>

namespace dsl::backend::gpu {

namespace {

struct Broadcast {
    const double* values;  // [n * channels + c]
    std::int64_t channels;
    float scale;
    __device__ float row(std::int64_t n, std::int64_t c, std::int64_t, std::int64_t) const {
        return __fmul_rn(static_cast<float>(values[n * channels + c]), scale);
    }
    template <int S>
    __device__ float operator()(float value, const float (&)[S], std::int64_t) const {
        return value;
    }
};

// A window's taps, strides and dilations along depth, rows and columns; an image's depth is one tap of stride
// and dilation 1, so that its windows are scanned and gathered as before.
struct PoolWindow {
    std::int64_t kd, kh, kw, sd, sh, sw, dd, dh, dw;
    __device__ std::int64_t taps() const { return kd * kh * kw; }
};

PoolWindow pool_window(const Window& w, bool volume) {
    const Index &k = w.kernel, &s = w.stride, &d = w.dilation;
    if (volume) return {k[0], k[1], k[2], s[0], s[1], s[2], d[0], d[1], d[2]};
    return {1, k[0], k[1], 1, s[0], s[1], 1, d[0], d[1]};
}

// Output row (z, i) of a pooling reads x's rows from (z * sd, i * sh).
struct PoolRow {
    Operand<const float> x;
    PoolWindow win;
    __device__ const float* row(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t i) const {
        return x.base + (n * x.sn + c * x.sc + z * win.sd * x.sd + i * win.sh * x.sh);
    }
    // Scans the window of output column j in the reference's order (the taps' depth, row, then column) and
    // keeps the first maximum: ties, and the backward with them, go to the earliest element.
    __device__ std::int64_t first_max(const float* p, std::int64_t j, float* best_value) const {
        const float* q = p + j * win.sw;
        float best = q[0];
        std::int64_t best_offset = 0;
        for (std::int64_t e = 0; e < win.kd; ++e)
            for (std::int64_t a = 0; a < win.kh; ++a)
                for (std::int64_t b = 0; b < win.kw; ++b) {
                    const float v = q[e * win.dd * x.sd + a * win.dh * x.sh + b * win.dw];
                    if (v > best) {
                        best = v;
                        best_offset = (e * win.kh + a) * win.kw + b;
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

// The offset (e * kh + a) * kw + b of each window's first maximum, for the backward's gather.
struct MaxPoolArgmax : PoolRow {
    template <int S>
    __device__ std::int32_t operator()(const float* p, const float (&)[S], std::int64_t j) const {
        float best;
        return static_cast<std::int32_t>(first_max(p, j, &best));
    }
};

// The sum in double over the window divided by its taps, as PyTorch's count_include_pad.
struct AveragePool : PoolRow {
    template <int S>
    __device__ float operator()(const float* p, const float (&)[S], std::int64_t j) const {
        const float* q = p + j * win.sw;
        double acc = 0.0;
        for (std::int64_t e = 0; e < win.kd; ++e)
            for (std::int64_t a = 0; a < win.kh; ++a)
                for (std::int64_t b = 0; b < win.kw; ++b) acc += q[e * win.dd * x.sd + a * win.dh * x.sh + b * win.dw];
        return static_cast<float>(acc / double(win.taps()));
    }
};

// dx of pooling as a gather: each element of dx sums the gradients of the windows that contain it, so dx
// is overwritten without atomics. Windows are visited in the reference's order (output depth, row, then
// column), so the double sums round as its scatter does.
struct PoolGather {
    Operand<const float> dy;
    const std::int32_t* argmax;  // dense over dy's dims; null for average pooling
    std::int64_t channels, out_d, out_h, out_w;
    PoolWindow win;
    struct Row {
        const float* dy;
        const std::int32_t* argmax;
        std::int64_t z, y;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y) const {
        return {dy.base + (n * dy.sn + c * dy.sc),
                argmax ? argmax + (n * channels + c) * out_d * out_h * out_w : nullptr, z, y};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&)[S], std::int64_t x) const {
        const double taps = double(win.taps());
        double acc = 0.0;
        // Descending window offsets give ascending output places.
        for (std::int64_t e = win.kd - 1; e >= 0; --e) {
            const std::int64_t tz = r.z - e * win.dd;
            if (tz < 0 || tz % win.sd != 0 || tz / win.sd >= out_d) continue;
            const std::int64_t k = tz / win.sd;
            for (std::int64_t a = win.kh - 1; a >= 0; --a) {
                const std::int64_t ty = r.y - a * win.dh;
                if (ty < 0 || ty % win.sh != 0 || ty / win.sh >= out_h) continue;
                const std::int64_t i = ty / win.sh;
                for (std::int64_t b = win.kw - 1; b >= 0; --b) {
                    const std::int64_t tx = x - b * win.dw;
                    if (tx < 0 || tx % win.sw != 0 || tx / win.sw >= out_w) continue;
                    const std::int64_t j = tx / win.sw;
                    const double g = r.dy[k * dy.sd + i * dy.sh + j];
                    if (!r.argmax)
                        acc += g / taps;
                    else if (r.argmax[(k * out_h + i) * out_w + j] == (e * win.kh + a) * win.kw + b)
                        acc += g;
                }
            }
        }
        return static_cast<float>(acc);
    }
};

class GpuPool final : public PoolKernels {
public:
    void forward(PoolKind kind, ConstView x, View y, const Window& window) override {
        check_pool(x.dims, y.dims, window);
        const ConstVolumes xv = volumes(x);
        const Volumes yv = volumes(y);
        const PoolRow rows{input(xv), pool_window(window, is_volume(x.dims))};
        if (kind == PoolKind::max)
            map("max pool forward", yv.dims, Merge::none, operand(yv), no_inputs(), MaxPool{rows});
        else
            map("average pool forward", yv.dims, Merge::none, operand(yv), no_inputs(), AveragePool{rows});
    }

    void backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window) override {
        check_pool(x.dims, dy.dims, window);
        check_same_dims(x, dx, "pool backward");
        const ConstVolumes xv = volumes(x), dyv = volumes(dy);
        const Volumes dxv = volumes(dx);
        if (dxv.dims.elements() == 0) return;
        const PoolWindow win = pool_window(window, is_volume(x.dims));
        const VolumeDims& o = dyv.dims;
        std::int32_t* argmax = nullptr;
        if (kind == PoolKind::max && o.elements() > 0) {
            DSL_INTERNAL_CHECK(product(window.kernel) <= std::numeric_limits<std::int32_t>::max(),
                               "pool: window too large");
            argmax = context().argmax.as<std::int32_t>(o.elements());
            map("max pool argmax", o, Merge::none, dense_operand(argmax, o), no_inputs(),
                MaxPoolArgmax{{input(xv), win}});
        }
        map("pool backward", dxv.dims, Merge::none, operand(dxv), no_inputs(),
            PoolGather{input(dyv), argmax, o.c, o.d, o.h, o.w, win});
    }

    void global_sum(ConstView x, double* sums) override {
        const ConstVolumes xv = volumes(x);
        const std::int64_t plane_count = xv.dims.n * xv.dims.c;
        if (plane_count == 0) return;
        Context& ctx = context();
        double* totals = ctx.totals.as<double>(plane_count);
        reduce("global pool sum", xv.dims, Over::planes, {xv}, SumTerm{}, totals);
        const double* host = ctx.fetch(totals, plane_count);
        for (std::int64_t i = 0; i < plane_count; ++i) sums[i] += host[i];
    }

    void broadcast(const float* values, float scale, View dx) override {
        const Volumes dxv = volumes(dx);
        if (dxv.dims.elements() == 0) return;
        const double* device = context().upload(dxv.dims.n * dxv.dims.c, {values});
        map("broadcast", dxv.dims, Merge::rows, operand(dxv), no_inputs(), Broadcast{device, dxv.dims.c, scale});
    }
};

}  // namespace

PoolKernels* pool_kernels() {
    static GpuPool instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
