// The losses on the GPU: softmax cross-entropy and the regression losses, with their gradients.
#include "gpu_common.cuh"
#include "gpu_map.cuh"
#include "gpu_reduce.cuh"

#include "../kernels/kernel_checks.hpp"
#include "../kernels/regression_formula.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace dsl::backend::gpu {

namespace {

// Softmax cross-entropy: G lanes per pixel (or voxel: a place; a warp when a sample is one place with many
// classes, one thread per place otherwise); each block writes its sum of losses, and the host adds the blocks'
// sums in order.

constexpr int loss_blocks_max = 1024;

template <int G>
__device__ double group_max(double v) {
    if constexpr (G > 1)
        for (int offset = G / 2; offset > 0; offset /= 2) {
            const double o = __shfl_xor_sync(0xffffffffu, v, offset);
            v = v < o ? o : v;
        }
    return v;
}

template <int G>
__device__ double group_sum(double v) {
    if constexpr (G > 1)
        for (int offset = G / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <int G>
__global__ void __launch_bounds__(256)
    cross_entropy_kernel(VolumeDims d, Operand<const float> logits, Operand<float> dlogits, const std::int32_t* labels,
                         float scale, double* partials) {
    const int lane = threadIdx.x % G;
    const std::int64_t per_block = blockDim.x / G;
    const std::int64_t pixels = d.n * d.points();
    double total = 0.0;
    for (std::int64_t p = std::int64_t(blockIdx.x) * per_block + threadIdx.x / G; p < pixels;
         p += std::int64_t(gridDim.x) * per_block) {
        const std::int64_t j = p % d.w, t = p / d.w, i = t % d.h, u = t / d.h;
        const std::int64_t z = d.d == 1 ? 0 : u % d.d, n = d.d == 1 ? u : u / d.d;
        const float* l = logits.base + (n * logits.sn + z * logits.sd + i * logits.sh + j);
        const std::int32_t label = labels[p];
        // log-sum-exp shifted by the maximum, so large logits do not overflow.
        double max_logit = -INFINITY;
        for (std::int64_t k = lane; k < d.c; k += G) {
            const double v = l[k * logits.sc];
            max_logit = max_logit < v ? v : max_logit;
        }
        max_logit = group_max<G>(max_logit);
        double sum_exp = 0.0;
        for (std::int64_t k = lane; k < d.c; k += G) sum_exp += exp(double(l[k * logits.sc]) - max_logit);
        sum_exp = group_sum<G>(sum_exp);
        const double log_sum_exp = max_logit + log(sum_exp);
        const double label_logit = l[label * logits.sc];
        if (dlogits.base) {
            // dlogits may be logits: every lane has read the label's logit before any lane writes.
            if constexpr (G > 1) __syncwarp();
            float* dl = dlogits.base + (n * dlogits.sn + z * dlogits.sd + i * dlogits.sh + j);
            for (std::int64_t k = lane; k < d.c; k += G) {
                const double probability = exp(double(l[k * logits.sc]) - log_sum_exp);
                dl[k * dlogits.sc] = static_cast<float>((probability - (k == label ? 1.0 : 0.0)) * scale);
            }
        }
        if (lane == 0) total += log_sum_exp - label_logit;
    }
    store_block_sum(total, partials);
}

// A regression loss: one thread per element, in double as the reference; each block writes its sum.
__global__ void __launch_bounds__(256)
    regression_kernel(VolumeDims d, frontend::Regression loss, Operand<const float> x, Operand<const float> t,
                      Operand<float> dx, float scale, double* partials) {
    const std::int64_t elements = d.elements();
    double total = 0.0;
    for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < elements;
         e += std::int64_t(gridDim.x) * blockDim.x) {
        const std::int64_t j = e % d.w, r = e / d.w, i = r % d.h, q = r / d.h;
        const std::int64_t z = d.d == 1 ? 0 : q % d.d, s = d.d == 1 ? q : q / d.d, c = s % d.c, n = s / d.c;
        const double xv = x.base[n * x.sn + c * x.sc + z * x.sd + i * x.sh + j];
        const double tv = t.base[n * t.sn + c * t.sc + z * t.sd + i * t.sh + j];
        const RegressionTerm<double> term = regression_term(loss, xv, tv);
        total += term.value;
        if (dx.base) dx.base[n * dx.sn + c * dx.sc + z * dx.sd + i * dx.sh + j] = static_cast<float>(term.grad * scale);
    }
    store_block_sum(total, partials);
}

class GpuLoss final : public LossKernels {
public:
    double cross_entropy(ConstView logits, LabelView labels, float scale, View dlogits) override {
        check_labels(logits.dims, labels.dims);
        if (dlogits.base) check_same_dims(logits, dlogits, "cross_entropy");
        const ConstVolumes lp = volumes(logits);
        const LabelVolumes lb = volumes(labels);
        const Volumes dp = volumes(dlogits);
        const VolumeDims& d = lp.dims;
        const std::int64_t pixels = d.n * d.points();
        if (pixels == 0) return 0.0;
        Context& ctx = context();
        // Labels are checked here, on the host, where a bad one can be reported as the reference does.
        auto* host =
            static_cast<std::int32_t*>(ctx.staging.get(static_cast<std::size_t>(pixels) * sizeof(std::int32_t)));
        std::int64_t p = 0;
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t z = 0; z < d.d; ++z)
                for (std::int64_t i = 0; i < d.h; ++i)
                    for (std::int64_t j = 0; j < d.w; ++j) {
                        const std::int32_t label = lb.at(n, 0, z, i, j);
                        check_label(label, d.c);
                        host[p++] = label;
                    }
        auto* device = ctx.labels.as<std::int32_t>(pixels);
        check(cudaMemcpyAsync(device, host, static_cast<std::size_t>(pixels) * sizeof(std::int32_t),
                              cudaMemcpyHostToDevice, gpu::stream()),
              "upload of labels");
        ctx.staging.read_by_stream();

        // A warp per pixel where a pixel is a whole sample (classification: many classes, contiguous).
        const int lanes = d.points() == 1 ? 32 : 1;
        const std::int64_t per_block = 256 / lanes;
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(pixels, per_block), loss_blocks_max));
        double* partials = ctx.partials.as<double>(blocks);
        const Operand<float> out = operand(dp);
        if (lanes == 32)
            cross_entropy_kernel<32><<<blocks, 256, 0, gpu::stream()>>>(d, input(lp), out, device, scale, partials);
        else
            cross_entropy_kernel<1><<<blocks, 256, 0, gpu::stream()>>>(d, input(lp), out, device, scale, partials);
        check_launch("cross_entropy");
        const double* sums = ctx.fetch(partials, blocks);
        double total = 0.0;
        for (unsigned b = 0; b < blocks; ++b) total += sums[b];
        return total;
    }

    double regression(frontend::Regression loss, ConstView prediction, ConstView target, float scale,
                      View dprediction) override {
        check_same_dims(prediction, target, "regression");
        if (dprediction.base) check_same_dims(prediction, dprediction, "regression");
        const ConstVolumes xp = volumes(prediction), tp = volumes(target);
        const Volumes dp = volumes(dprediction);
        const VolumeDims& d = xp.dims;
        DSL_INTERNAL_CHECK(loss != frontend::Regression::none, "regression: not a regression loss");
        const std::int64_t elements = d.elements();
        if (elements == 0) return 0.0;
        Context& ctx = context();
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(elements, 256), loss_blocks_max));
        double* partials = ctx.partials.as<double>(blocks);
        regression_kernel<<<blocks, 256, 0, gpu::stream()>>>(d, loss, input(xp), input(tp), operand(dp), scale,
                                                             partials);
        check_launch("regression");
        const double* sums = ctx.fetch(partials, blocks);
        double total = 0.0;
        for (unsigned b = 0; b < blocks; ++b) total += sums[b];
        return total;
    }
};

}  // namespace

LossKernels* loss_kernels() {
    static GpuLoss instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
