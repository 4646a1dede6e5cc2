// Upsampling on the GPU (one thread per element: the forward gathers an output's sources, the backward
// gathers the outputs that read an input, so that no two threads write one element and the sums are the
// same on every run), and the transposed convolution through cuDNN's convolutions (deconv_over_conv).
#include "gpu_common.cuh"

#include "../resample_kernels.hpp"

#include <dsl/base/error.hpp>
#include <dsl/scheduler/window.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>

namespace dsl::backend::gpu {

namespace {

struct Strided {
    std::int64_t sn, sc, sh;
};

struct Geometry {
    std::int64_t n, c, h, w;  // the view the threads run over
    std::int64_t scale, in_h, in_w, x_y0, x_x0, y_y0, y_x0;
    bool bilinear;
};

__global__ void upsample_forward_kernel(const float* x, Strided xs, float* y, Strided ys, Geometry g) {
    const std::int64_t total = g.n * g.c * g.h * g.w;
    for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
         e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t p = e % g.w, o = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.c, n = e / (g.w * g.h * g.c);
        const scheduler::UpsampleSource r = scheduler::upsample_source(g.y_y0 + o, g.scale, g.bilinear, g.in_h);
        const scheduler::UpsampleSource q = scheduler::upsample_source(g.y_x0 + p, g.scale, g.bilinear, g.in_w);
        const float* base = x + n * xs.sn + c * xs.sc;
        const float* x0 = base + (r.i0 - g.x_y0) * xs.sh;
        const float* x1 = base + (r.i1 - g.x_y0) * xs.sh;
        const std::int64_t j0 = q.i0 - g.x_x0, j1 = q.i1 - g.x_x0;
        const float ly = r.lambda, hy = 1.0f - ly, lx = q.lambda, hx = 1.0f - lx;
        y[n * ys.sn + c * ys.sc + o * ys.sh + p] = hy * (hx * x0[j0] + lx * x0[j1]) + ly * (hx * x1[j0] + lx * x1[j1]);
    }
}

// The weight with which output o reads input i along one dimension.
__device__ float weight(const scheduler::UpsampleSource& s, std::int64_t i) {
    return (s.i0 == i ? 1.0f - s.lambda : 0.0f) + (s.i1 == i ? s.lambda : 0.0f);
}

// Over dx's elements; dy's view holds outputs [y_y0, y_y0 + dy_h) and [y_x0, y_x0 + dy_w).
__global__ void upsample_backward_kernel(const float* dy, Strided ys, std::int64_t dy_h, std::int64_t dy_w, float* dx,
                                         Strided xs, Geometry g) {
    const std::int64_t total = g.n * g.c * g.h * g.w;
    for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
         e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t j = e % g.w, i = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.c, n = e / (g.w * g.h * g.c);
        const std::int64_t gi = g.x_y0 + i, gj = g.x_x0 + j;
        // The outputs that read input gi: their sources lie within one input of o / scale.
        const std::int64_t o0 = max(g.y_y0, (gi - 1) * g.scale), o1 = min(g.y_y0 + dy_h, (gi + 2) * g.scale + 1);
        const std::int64_t p0 = max(g.y_x0, (gj - 1) * g.scale), p1 = min(g.y_x0 + dy_w, (gj + 2) * g.scale + 1);
        float acc = 0.0f;
        for (std::int64_t o = o0; o < o1; ++o) {
            const float wy = weight(scheduler::upsample_source(o, g.scale, g.bilinear, g.in_h), gi);
            if (wy == 0.0f) continue;
            const float* row = dy + n * ys.sn + c * ys.sc + (o - g.y_y0) * ys.sh - g.y_x0;
            for (std::int64_t p = p0; p < p1; ++p) {
                const float wx = weight(scheduler::upsample_source(p, g.scale, g.bilinear, g.in_w), gj);
                if (wx != 0.0f) acc += wy * wx * row[p];
            }
        }
        dx[n * xs.sn + c * xs.sc + i * xs.sh + j] = acc;
    }
}

unsigned blocks_for(std::int64_t total) {
    return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(ceil_div(total, 256), 65535)));
}

template <typename T>
Strided strided(const PlaneView<T>& p) {
    return {p.stride_n, p.stride_c, p.stride_h};
}

// The threads run over `d`; index 0 of the upsampling's places and extents is the rows', 1 the columns'.
Geometry geometry(const PlaneDims& d, const Upsample& u) {
    DSL_INTERNAL_CHECK(u.in.rank() == 2 && u.at.x.rank() == 2 && u.at.y.rank() == 2,
                       "upsample: the input's extents and the views' places must be an image's");
    return Geometry{d.n,     d.c,       d.h,       d.w,       u.scale,   u.in[0],
                    u.in[1], u.at.x[0], u.at.x[1], u.at.y[0], u.at.y[1], u.bilinear};
}

class GpuUpsample final : public UpsampleKernels {
public:
    void forward(const Upsample& u, ConstView x, View y) override {
        const ConstPlanes xp = planes(x);
        const Planes yp = planes(y);
        check_upsample(u, xp.dims, yp.dims, "upsample forward");
        const PlaneDims& d = yp.dims;
        if (d.elements() == 0) return;
        upsample_forward_kernel<<<blocks_for(d.elements()), 256, 0, gpu::stream()>>>(xp.base, strided(xp), yp.base,
                                                                                     strided(yp), geometry(d, u));
        check_launch("upsample forward");
    }

    void backward(const Upsample& u, ConstView dy, View dx) override {
        const ConstPlanes dyp = planes(dy);
        const Planes dxp = planes(dx);
        check_upsample(u, dxp.dims, dyp.dims, "upsample backward");
        const PlaneDims& d = dxp.dims;
        if (d.elements() == 0) return;
        upsample_backward_kernel<<<blocks_for(d.elements()), 256, 0, gpu::stream()>>>(
            dyp.base, strided(dyp), dyp.dims.h, dyp.dims.w, dxp.base, strided(dxp), geometry(d, u));
        check_launch("upsample backward");
    }
};

}  // namespace

UpsampleKernels* upsample_kernels() {
    static GpuUpsample instance;
    return &instance;
}

DeconvKernels* deconv_kernels() {
    static const std::unique_ptr<DeconvKernels> instance =
        deconv_over_conv(*conv_kernels(), *pool_kernels(), *eltwise_kernels(), *memory_kernels());
    return instance.get();
}

}  // namespace dsl::backend::gpu
