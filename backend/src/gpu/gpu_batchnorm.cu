// Batch and group normalization on the GPU: per-channel (or per-plane, a volume's planes together) statistics
// and gradient sums (reductions in double), and the forward and backward formulas in the reference's order of
// operations.
#include "gpu_common.cuh"
#include "gpu_map.cuh"
#include "gpu_reduce.cuh"

#include "../kernels/kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsl::backend::gpu {

namespace {

// The batch-norm formulas in double, in the reference's order of operations; the _rn intrinsics keep the
// compiler from contracting them into fused multiply-adds, which would round differently.
// With `relu`, the leaky ReLU of `slope` (relu's is 0) of each value after: the ReLU that reads a batch norm,
// fused into it, as the activation's kernel computes it.
struct NormForward {
    const double* mean_inv_std;  // mean at [c], inv_std at [channels + c]
    std::int64_t channels;
    const float *gamma, *beta;
    bool relu = false;
    float slope = 0.0f;
    struct Row {
        double gamma, mean, inv_std, beta;
    };
    __device__ Row row(std::int64_t, std::int64_t c, std::int64_t, std::int64_t) const {
        return {gamma[c], mean_inv_std[c], mean_inv_std[channels + c], beta[c]};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&v)[S], std::int64_t) const {
        const double scaled = __dmul_rn(__dmul_rn(r.gamma, __dsub_rn(double(v[0]), r.mean)), r.inv_std);
        const auto y = static_cast<float>(__dadd_rn(scaled, r.beta));
        return relu ? leaky(y, slope) : y;
    }
};

// Inputs x, dy.
struct NormBackward {
    const double* values;  // mean, inv_std, sum_dy / count, sum_dy_xhat, each `channels` long
    std::int64_t channels;
    double count;
    const float* gamma;
    struct Row {
        double scale, mean, inv_std, mean_dy, sum_dy_xhat;
    };
    __device__ Row row(std::int64_t, std::int64_t c, std::int64_t, std::int64_t) const {
        const double inv_std = values[channels + c];
        return {__dmul_rn(double(gamma[c]), inv_std), values[c], inv_std, values[2 * channels + c],
                values[3 * channels + c]};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&v)[S], std::int64_t) const {
        const double x_hat = __dmul_rn(__dsub_rn(double(v[0]), r.mean), r.inv_std);
        const double term = __ddiv_rn(__dmul_rn(x_hat, r.sum_dy_xhat), count);
        return static_cast<float>(__dmul_rn(r.scale, __dsub_rn(__dsub_rn(double(v[1]), r.mean_dy), term)));
    }
};

// Σ x and Σ x²
struct MomentsTerm {
    static constexpr int inputs = 1, quantities = 2;
    struct Group {};
    __device__ Group group(std::int64_t, std::int64_t) const { return {}; }
    __device__ void add(Group, const float (&v)[1], double (&acc)[2]) const {
        const double x = v[0];
        acc[0] += x;
        acc[1] += x * x;
    }
};

// Σ dy and Σ dy * x_hat over inputs x, dy.
struct NormGradientTerm {
    static constexpr int inputs = 2, quantities = 2;
    const double* mean_inv_std;  // mean at [c], inv_std at [channels + c]
    std::int64_t channels;
    struct Group {
        double mean, inv_std;
    };
    __device__ Group group(std::int64_t, std::int64_t c) const { return {mean_inv_std[c], mean_inv_std[channels + c]}; }
    __device__ void add(const Group& grp, const float (&v)[2], double (&acc)[2]) const {
        const double g = v[1];
        const double x_hat = __dmul_rn(__dsub_rn(double(v[0]), grp.mean), grp.inv_std);
        acc[0] += g;
        acc[1] += __dmul_rn(g, x_hat);
    }
};

class GpuBatchNorm final : public BatchNormKernels {
public:
    void statistics(ConstView x, double* sum, double* sum_sq) override {
        const ConstVolumes xv = volumes(x);
        const std::int64_t c = xv.dims.c;
        if (c == 0) return;
        Context& ctx = context();
        double* totals = ctx.totals.as<double>(2 * c);
        reduce("batchnorm statistics", xv.dims, Over::channels, {xv}, MomentsTerm{}, totals);
        const double* host = ctx.fetch(totals, 2 * c);
        for (std::int64_t k = 0; k < c; ++k) {
            sum[k] += host[2 * k];
            sum_sq[k] += host[2 * k + 1];
        }
    }

    void forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                 View y) override {
        forward(x, NormForward{nullptr, 0, gamma, beta}, mean, inv_std, y);
    }

    bool forward_relu(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                      float slope, View y) override {
        forward(x, NormForward{nullptr, 0, gamma, beta, true, slope}, mean, inv_std, y);
        return true;
    }

    void backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                             double* sum_dy_xhat) override {
        const ConstVolumes xv = volumes(x), dyv = volumes(dy);
        check_same_dims(x, dy, "batchnorm backward_statistics");
        const std::int64_t c = xv.dims.c;
        if (c == 0) return;
        Context& ctx = context();
        const double* values = ctx.upload(c, {mean, inv_std});
        double* totals = ctx.totals.as<double>(2 * c);
        reduce("batchnorm backward statistics", xv.dims, Over::channels, {xv, dyv}, NormGradientTerm{values, c},
               totals);
        const double* host = ctx.fetch(totals, 2 * c);
        for (std::int64_t k = 0; k < c; ++k) {
            sum_dy[k] += host[2 * k];
            sum_dy_xhat[k] += host[2 * k + 1];
        }
    }

    void backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                  const double* sum_dy, const double* sum_dy_xhat, double count, View dx) override {
        const ConstVolumes xv = volumes(x), dyv = volumes(dy);
        const Volumes dxv = volumes(dx);
        check_same_dims(x, dy, "batchnorm backward");
        check_same_dims(x, dx, "batchnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "batchnorm backward: empty group");
        if (dxv.dims.elements() == 0) return;
        const std::int64_t c = xv.dims.c;
        // sum_dy / count once per channel: the reference's per-element quotient, the same in every element.
        std::vector<double> mean_dy(static_cast<std::size_t>(c));
        for (std::int64_t k = 0; k < c; ++k) mean_dy[static_cast<std::size_t>(k)] = sum_dy[k] / count;
        const double* values = context().upload(c, {mean, inv_std, mean_dy.data(), sum_dy_xhat});
        map("batchnorm backward", dxv.dims, Merge::rows, operand(dxv), inputs(xv, dyv),
            NormBackward{values, c, count, gamma});
    }

private:
    // `f` with its statistics' values filled in.
    static void forward(ConstView x, NormForward f, const float* mean, const float* inv_std, View y) {
        const ConstVolumes xv = volumes(x);
        const Volumes yv = volumes(y);
        check_same_dims(x, y, "batchnorm forward");
        if (yv.dims.elements() == 0) return;
        f.channels = xv.dims.c;
        f.mean_inv_std = context().upload(f.channels, {mean, inv_std});
        map("batchnorm forward", yv.dims, Merge::rows, operand(yv), inputs(xv), f);
    }
};

// Group norm: per (n, c) sums over its places, added into per-(n, g) sums on the host. Group g of sample n is at
// [n * groups + c / per] of the host's arrays, uploaded as doubles: mean, inv_std (and backward's terms).
struct GroupNormForward {
    const double* values;  // mean at [s], inv_std at [stats + s]
    std::int64_t stats, groups, per;
    const float *gamma, *beta;
    struct Row {
        double gamma, mean, inv_std, beta;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t, std::int64_t) const {
        const std::int64_t s = n * groups + c / per;
        return {gamma[c], values[s], values[stats + s], beta[c]};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&v)[S], std::int64_t) const {
        const double scaled = __dmul_rn(__dmul_rn(r.gamma, __dsub_rn(double(v[0]), r.mean)), r.inv_std);
        return static_cast<float>(__dadd_rn(scaled, r.beta));
    }
};

// Σ dy, Σ dy * x_hat, Σ dy * gamma and Σ dy * gamma * x_hat over an (n, c), from inputs x, dy.
struct GroupNormGradientTerm {
    static constexpr int inputs = 2, quantities = 4;
    const double* values;  // mean at [s], inv_std at [stats + s]
    std::int64_t stats, groups, per;
    const float* gamma;
    struct Group {
        double mean, inv_std, gamma;
    };
    __device__ Group group(std::int64_t n, std::int64_t c) const {
        const std::int64_t s = n * groups + c / per;
        return {values[s], values[stats + s], gamma[c]};
    }
    __device__ void add(const Group& grp, const float (&v)[2], double (&acc)[4]) const {
        const double d = v[1];
        const double x_hat = __dmul_rn(__dsub_rn(double(v[0]), grp.mean), grp.inv_std);
        const double dg = __dmul_rn(d, grp.gamma);
        acc[0] += d;
        acc[1] += __dmul_rn(d, x_hat);
        acc[2] += dg;
        acc[3] += __dmul_rn(dg, x_hat);
    }
};

// Inputs x, dy: inv_std * (dy * gamma - sum_g / count - x_hat * sum_g_xhat / count).
struct GroupNormBackward {
    const double* values;  // mean, inv_std, sum_g / count, sum_g_xhat: each `stats` long
    std::int64_t stats, groups, per;
    double count;
    const float* gamma;
    struct Row {
        double gamma, mean, inv_std, mean_g, sum_g_xhat;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t, std::int64_t) const {
        const std::int64_t s = n * groups + c / per;
        return {gamma[c], values[s], values[stats + s], values[2 * stats + s], values[3 * stats + s]};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&v)[S], std::int64_t) const {
        const double x_hat = __dmul_rn(__dsub_rn(double(v[0]), r.mean), r.inv_std);
        const double term = __ddiv_rn(__dmul_rn(x_hat, r.sum_g_xhat), count);
        const double g = __dmul_rn(double(v[1]), r.gamma);
        return static_cast<float>(__dmul_rn(r.inv_std, __dsub_rn(__dsub_rn(g, r.mean_g), term)));
    }
};

class GpuGroupNorm final : public GroupNormKernels {
public:
    void statistics(ConstView x, std::int64_t groups, double* sum, double* sum_sq) override {
        const ConstVolumes xv = volumes(x);
        const std::int64_t plane_count = xv.dims.n * xv.dims.c, per = per_group(xv.dims, groups);
        if (plane_count == 0) return;
        Context& ctx = context();
        double* totals = ctx.totals.as<double>(2 * plane_count);
        reduce("groupnorm statistics", xv.dims, Over::planes, {xv}, MomentsTerm{}, totals);
        const double* host = ctx.fetch(totals, 2 * plane_count);
        for (std::int64_t p = 0; p < plane_count; ++p) {
            const std::int64_t s = p / xv.dims.c * groups + p % xv.dims.c / per;
            sum[s] += host[2 * p];
            sum_sq[s] += host[2 * p + 1];
        }
    }

    void forward(ConstView x, std::int64_t groups, const float* mean, const float* inv_std, const float* gamma,
                 const float* beta, View y) override {
        const ConstVolumes xv = volumes(x);
        const Volumes yv = volumes(y);
        check_same_dims(x, y, "groupnorm forward");
        if (yv.dims.elements() == 0) return;
        const std::int64_t stats = xv.dims.n * groups, per = per_group(xv.dims, groups);
        const double* values = context().upload(stats, {mean, inv_std});
        map("groupnorm forward", yv.dims, Merge::rows, operand(yv), inputs(xv),
            GroupNormForward{values, stats, groups, per, gamma, beta});
    }

    void backward_statistics(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                             const float* gamma, double* d_beta, double* d_gamma, double* sum_g,
                             double* sum_g_xhat) override {
        const ConstVolumes xv = volumes(x), dyv = volumes(dy);
        check_same_dims(x, dy, "groupnorm backward_statistics");
        const std::int64_t plane_count = xv.dims.n * xv.dims.c, per = per_group(xv.dims, groups);
        if (plane_count == 0) return;
        const std::int64_t stats = xv.dims.n * groups;
        Context& ctx = context();
        const double* values = ctx.upload(stats, {mean, inv_std});
        double* totals = ctx.totals.as<double>(4 * plane_count);
        reduce("groupnorm backward statistics", xv.dims, Over::planes, {xv, dyv},
               GroupNormGradientTerm{values, stats, groups, per, gamma}, totals);
        const double* host = ctx.fetch(totals, 4 * plane_count);
        for (std::int64_t p = 0; p < plane_count; ++p) {
            const std::int64_t c = p % xv.dims.c, s = p / xv.dims.c * groups + c / per;
            d_beta[c] += host[4 * p];
            d_gamma[c] += host[4 * p + 1];
            sum_g[s] += host[4 * p + 2];
            sum_g_xhat[s] += host[4 * p + 3];
        }
    }

    void backward(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                  const float* gamma, const double* sum_g, const double* sum_g_xhat, double count, View dx) override {
        const ConstVolumes xv = volumes(x), dyv = volumes(dy);
        const Volumes dxv = volumes(dx);
        check_same_dims(x, dy, "groupnorm backward");
        check_same_dims(x, dx, "groupnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "groupnorm backward: empty group");
        if (dxv.dims.elements() == 0) return;
        const std::int64_t stats = xv.dims.n * groups, per = per_group(xv.dims, groups);
        std::vector<double> mean_g(static_cast<std::size_t>(stats));
        for (std::int64_t s = 0; s < stats; ++s) mean_g[static_cast<std::size_t>(s)] = sum_g[s] / count;
        const double* values = context().upload(stats, {mean, inv_std, mean_g.data(), sum_g_xhat});
        map("groupnorm backward", dxv.dims, Merge::rows, operand(dxv), inputs(xv, dyv),
            GroupNormBackward{values, stats, groups, per, count, gamma});
    }

private:
    static std::int64_t per_group(const VolumeDims& d, std::int64_t groups) {
        DSL_INTERNAL_CHECK(groups > 0 && d.c % groups == 0, "groupnorm: channels not divisible into groups");
        return d.c / groups;
    }
};

}  // namespace

GroupNormKernels* groupnorm_kernels() {
    static GpuGroupNorm instance;
    return &instance;
}

BatchNormKernels* batchnorm_kernels() {
    static GpuBatchNorm instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
