// Upsampling on the GPU, of images (bilinear) and volumes (trilinear), one thread per element: the forward
// gathers an output's sources, the backward gathers the outputs that read an input, so that no two threads
// write one element and the sums are the same on every run. The transposed convolution goes through cuDNN's
// convolutions (deconv_over_conv), of images and volumes alike.
#include "gpu_common.cuh"

#include "../kernels/resample_kernels.hpp"

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
    bool linear;
};

__global__ void upsample_forward_kernel(const float* x, Strided xs, float* y, Strided ys, Geometry g) {
    const std::int64_t total = g.n * g.c * g.h * g.w;
    for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
         e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t p = e % g.w, o = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.c, n = e / (g.w * g.h * g.c);
        const scheduler::UpsampleSource r = scheduler::upsample_source(g.y_y0 + o, g.scale, g.linear, g.in_h);
        const scheduler::UpsampleSource q = scheduler::upsample_source(g.y_x0 + p, g.scale, g.linear, g.in_w);
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
            const float wy = weight(scheduler::upsample_source(o, g.scale, g.linear, g.in_h), gi);
            if (wy == 0.0f) continue;
            const float* row = dy + n * ys.sn + c * ys.sc + (o - g.y_y0) * ys.sh - g.y_x0;
            for (std::int64_t p = p0; p < p1; ++p) {
                const float wx = weight(scheduler::upsample_source(p, g.scale, g.linear, g.in_w), gj);
                if (wx != 0.0f) acc += wy * wx * row[p];
            }
        }
        dx[n * xs.sn + c * xs.sc + i * xs.sh + j] = acc;
    }
}

// A volume's: the threads run over {n, c, d, h, w}; dimension k of the upsampling's places and extents is
// depth (0), rows (1) or columns (2).
struct Strided3 {
    std::int64_t sn, sc, sd, sh;
};

struct Geometry3 {
    std::int64_t n, c, d, h, w;  // the view the threads run over
    std::int64_t scale;
    std::int64_t in[3], x0[3], y0[3];  // the input's extents; the global places of x's and y's first elements
    bool linear;
};

// Linear interpolation along the rows and columns of one input plane, as the image's forward does.
__device__ float bilinear(const float* plane, std::int64_t sh, const scheduler::UpsampleSource& r, std::int64_t y0,
                          const scheduler::UpsampleSource& q, std::int64_t x0) {
    const float* x0_row = plane + (r.i0 - y0) * sh;
    const float* x1_row = plane + (r.i1 - y0) * sh;
    const std::int64_t j0 = q.i0 - x0, j1 = q.i1 - x0;
    const float ly = r.lambda, hy = 1.0f - ly, lx = q.lambda, hx = 1.0f - lx;
    return hy * (hx * x0_row[j0] + lx * x0_row[j1]) + ly * (hx * x1_row[j0] + lx * x1_row[j1]);
}

__global__ void upsample3_forward_kernel(const float* x, Strided3 xs, float* y, Strided3 ys, Geometry3 g) {
    const std::int64_t total = g.n * g.c * g.d * g.h * g.w;
    for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
         e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t p = e % g.w, t = e / g.w, o = t % g.h, u = t / g.h, q = u % g.d, v = u / g.d;
        const std::int64_t c = v % g.c, n = v / g.c;
        const scheduler::UpsampleSource sz = scheduler::upsample_source(g.y0[0] + q, g.scale, g.linear, g.in[0]);
        const scheduler::UpsampleSource sy = scheduler::upsample_source(g.y0[1] + o, g.scale, g.linear, g.in[1]);
        const scheduler::UpsampleSource sx = scheduler::upsample_source(g.y0[2] + p, g.scale, g.linear, g.in[2]);
        const float* base = x + n * xs.sn + c * xs.sc;
        const float lz = sz.lambda, hz = 1.0f - lz;
        const float front = bilinear(base + (sz.i0 - g.x0[0]) * xs.sd, xs.sh, sy, g.x0[1], sx, g.x0[2]);
        const float back = bilinear(base + (sz.i1 - g.x0[0]) * xs.sd, xs.sh, sy, g.x0[1], sx, g.x0[2]);
        y[n * ys.sn + c * ys.sc + q * ys.sd + o * ys.sh + p] = hz * front + lz * back;
    }
}

// Over dx's elements; dy's view holds outputs [g.y0[k], g.y0[k] + its extent) along dimension k: dy_d, dy_h, dy_w.
__global__ void upsample3_backward_kernel(const float* dy, Strided3 ys, std::int64_t dy_d, std::int64_t dy_h,
                                          std::int64_t dy_w, float* dx, Strided3 xs, Geometry3 g) {
    const std::int64_t total = g.n * g.c * g.d * g.h * g.w;
    for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
         e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t j = e % g.w, t = e / g.w, i = t % g.h, u = t / g.h, k = u % g.d, v = u / g.d;
        const std::int64_t c = v % g.c, n = v / g.c;
        const std::int64_t gk = g.x0[0] + k, gi = g.x0[1] + i, gj = g.x0[2] + j;
        // The outputs that read input (gk, gi, gj): along each dimension, their sources lie within one input of
        // o / scale.
        const std::int64_t q0 = max(g.y0[0], (gk - 1) * g.scale), q1 = min(g.y0[0] + dy_d, (gk + 2) * g.scale + 1);
        const std::int64_t o0 = max(g.y0[1], (gi - 1) * g.scale), o1 = min(g.y0[1] + dy_h, (gi + 2) * g.scale + 1);
        const std::int64_t p0 = max(g.y0[2], (gj - 1) * g.scale), p1 = min(g.y0[2] + dy_w, (gj + 2) * g.scale + 1);
        float acc = 0.0f;
        for (std::int64_t q = q0; q < q1; ++q) {
            const float wz = weight(scheduler::upsample_source(q, g.scale, g.linear, g.in[0]), gk);
            if (wz == 0.0f) continue;
            const float* plane = dy + n * ys.sn + c * ys.sc + (q - g.y0[0]) * ys.sd;
            for (std::int64_t o = o0; o < o1; ++o) {
                const float wy = weight(scheduler::upsample_source(o, g.scale, g.linear, g.in[1]), gi);
                if (wy == 0.0f) continue;
                const float wzy = wz * wy;
                const float* row = plane + (o - g.y0[1]) * ys.sh - g.y0[2];
                for (std::int64_t p = p0; p < p1; ++p) {
                    const float wx = weight(scheduler::upsample_source(p, g.scale, g.linear, g.in[2]), gj);
                    if (wx != 0.0f) acc += wzy * wx * row[p];
                }
            }
        }
        dx[n * xs.sn + c * xs.sc + k * xs.sd + i * xs.sh + j] = acc;
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
    return Geometry{d.n,     d.c,       d.h,       d.w,       u.scale,   u.in[0],
                    u.in[1], u.at.x[0], u.at.x[1], u.at.y[0], u.at.y[1], u.linear};
}

Strided3 strided3(const ConstVolumes& v) { return {v.stride_n, v.stride_c, v.stride_d, v.stride_h}; }

Geometry3 geometry3(const VolumeDims& d, const Upsample& u) {
    Geometry3 g{d.n, d.c, d.d, d.h, d.w, u.scale, {}, {}, {}, u.linear};
    for (int k = 0; k < 3; ++k) {
        g.in[k] = u.in[k];
        g.x0[k] = u.at.x[k];
        g.y0[k] = u.at.y[k];
    }
    return g;
}

// Images through the planes' kernels, volumes through their own; the checks (resample_kernels.hpp) hold the
// placement's rank to the views'.
class GpuUpsample final : public UpsampleKernels {
public:
    void forward(const Upsample& u, ConstView x, View y) override {
        check_upsample(u, x.dims, y.dims, "upsample forward");
        if (y.dims.elements() == 0) return;
        if (is_volume(y.dims)) {
            const ConstVolumes xv = volumes(x);
            const Volumes yv = volumes(y);
            upsample3_forward_kernel<<<blocks_for(yv.dims.elements()), 256, 0, gpu::stream()>>>(
                xv.base, strided3(xv), yv.base, strided3(yv), geometry3(yv.dims, u));
            check_launch("upsample forward");
            return;
        }
        const ConstPlanes xp = planes(x);
        const Planes yp = planes(y);
        const PlaneDims& d = yp.dims;
        upsample_forward_kernel<<<blocks_for(d.elements()), 256, 0, gpu::stream()>>>(xp.base, strided(xp), yp.base,
                                                                                     strided(yp), geometry(d, u));
        check_launch("upsample forward");
    }

    void backward(const Upsample& u, ConstView dy, View dx) override {
        check_upsample(u, dx.dims, dy.dims, "upsample backward");
        if (dx.dims.elements() == 0) return;
        if (is_volume(dx.dims)) {
            const ConstVolumes dyv = volumes(dy);
            const Volumes dxv = volumes(dx);
            upsample3_backward_kernel<<<blocks_for(dxv.dims.elements()), 256, 0, gpu::stream()>>>(
                dyv.base, strided3(dyv), dyv.dims.d, dyv.dims.h, dyv.dims.w, dxv.base, strided3(dxv),
                geometry3(dxv.dims, u));
            check_launch("upsample backward");
            return;
        }
        const ConstPlanes dyp = planes(dy);
        const Planes dxp = planes(dx);
        const PlaneDims& d = dxp.dims;
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
