// CPU kernels in plain C++ over OpenMP's threads (the team oneDNN and Halide use), for the kinds that neither
// has: group normalization (oneDNN 2.6 has none) and dropout (its mask is splitmix.hpp's hash of global
// coordinates). Both go plane by plane, (n, c), one plane per task (planes.hpp: the form in which they see
// their views); sums are in double, as the reference's.
#include "halide_kernels.hpp"
#include "kernel_checks.hpp"
#include "planes.hpp"
#include "splitmix.hpp"

#include <dsl/base/error.hpp>

#include <cstdint>
#include <vector>

namespace dsl::backend {
namespace {

std::int64_t per_group(const PlaneDims& d, std::int64_t groups) {
    DSL_INTERNAL_CHECK(groups > 0 && d.c % groups == 0, "groupnorm: channels not divisible into groups");
    return d.c / groups;
}

// Runs body(n, c) for every plane of `d`, in parallel.
template <typename Body>
void each_plane(const PlaneDims& d, Body&& body) {
    const std::int64_t planes = d.n * d.c;
#pragma omp parallel for schedule(static)
    for (std::int64_t p = 0; p < planes; ++p) body(p / d.c, p % d.c);
}

class CpuGroupNorm final : public GroupNormKernels {
public:
    void statistics(ConstView x, std::int64_t groups, double* sum, double* sum_sq) override {
        statistics(planes(x), groups, sum, sum_sq);
    }
    void forward(ConstView x, std::int64_t groups, const float* mean, const float* inv_std, const float* gamma,
                 const float* beta, View y) override {
        forward(planes(x), groups, mean, inv_std, gamma, beta, planes(y));
    }
    void backward_statistics(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                             const float* gamma, double* d_beta, double* d_gamma, double* sum_g,
                             double* sum_g_xhat) override {
        backward_statistics(planes(x), planes(dy), groups, mean, inv_std, gamma, d_beta, d_gamma, sum_g, sum_g_xhat);
    }
    void backward(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                  const float* gamma, const double* sum_g, const double* sum_g_xhat, double count, View dx) override {
        backward(planes(x), planes(dy), groups, mean, inv_std, gamma, sum_g, sum_g_xhat, count, planes(dx));
    }

private:
    static void statistics(ConstPlanes x, std::int64_t groups, double* sum, double* sum_sq) {
        const std::int64_t per = per_group(x.dims, groups);
        std::vector<double> s(plane_count(x.dims)), s2(plane_count(x.dims));
        each_plane(x.dims, [&](std::int64_t n, std::int64_t c) {
            double a = 0.0, b = 0.0;
            for (std::int64_t i = 0; i < x.dims.h; ++i) {
                const float* row = &x.at(n, c, i, 0);
                for (std::int64_t j = 0; j < x.dims.w; ++j) {
                    const double v = row[j];
                    a += v;
                    b += v * v;
                }
            }
            s[plane(x.dims, n, c)] = a, s2[plane(x.dims, n, c)] = b;
        });
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c) {
                sum[n * groups + c / per] += s[plane(x.dims, n, c)];
                sum_sq[n * groups + c / per] += s2[plane(x.dims, n, c)];
            }
    }

    static void forward(ConstPlanes x, std::int64_t groups, const float* mean, const float* inv_std, const float* gamma,
                        const float* beta, Planes y) {
        check_same_dims(x, y, "groupnorm forward");
        const std::int64_t per = per_group(x.dims, groups);
        each_plane(x.dims, [&](std::int64_t n, std::int64_t c) {
            const std::int64_t g = n * groups + c / per;
            // y = x * scale + shift, the reference's formula folded per plane (in double, rounded once).
            const double scale = double(gamma[c]) * inv_std[g], shift = double(beta[c]) - double(mean[g]) * scale;
            for (std::int64_t i = 0; i < x.dims.h; ++i) {
                const float* in = &x.at(n, c, i, 0);
                float* out = &y.at(n, c, i, 0);
                for (std::int64_t j = 0; j < x.dims.w; ++j) out[j] = static_cast<float>(double(in[j]) * scale + shift);
            }
        });
    }

    static void backward_statistics(ConstPlanes x, ConstPlanes dy, std::int64_t groups, const float* mean,
                                    const float* inv_std, const float* gamma, double* d_beta, double* d_gamma,
                                    double* sum_g, double* sum_g_xhat) {
        check_same_dims(x, dy, "groupnorm backward_statistics");
        const std::int64_t per = per_group(x.dims, groups);
        std::vector<double> s(plane_count(x.dims)), s2(plane_count(x.dims));
        each_plane(x.dims, [&](std::int64_t n, std::int64_t c) {
            const std::int64_t g = n * groups + c / per;
            double a = 0.0, b = 0.0;
            for (std::int64_t i = 0; i < x.dims.h; ++i) {
                const float* xr = &x.at(n, c, i, 0);
                const float* dr = &dy.at(n, c, i, 0);
                for (std::int64_t j = 0; j < x.dims.w; ++j) {
                    const double d = dr[j];
                    a += d;
                    b += d * ((double(xr[j]) - mean[g]) * inv_std[g]);
                }
            }
            s[plane(x.dims, n, c)] = a, s2[plane(x.dims, n, c)] = b;
        });
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c) {
                const double a = s[plane(x.dims, n, c)], b = s2[plane(x.dims, n, c)];
                d_beta[c] += a;
                d_gamma[c] += b;
                sum_g[n * groups + c / per] += a * gamma[c];
                sum_g_xhat[n * groups + c / per] += b * gamma[c];
            }
    }

    static void backward(ConstPlanes x, ConstPlanes dy, std::int64_t groups, const float* mean, const float* inv_std,
                         const float* gamma, const double* sum_g, const double* sum_g_xhat, double count, Planes dx) {
        check_same_dims(x, dy, "groupnorm backward");
        check_same_dims(x, dx, "groupnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "groupnorm backward: empty group");
        const std::int64_t per = per_group(x.dims, groups);
        each_plane(x.dims, [&](std::int64_t n, std::int64_t c) {
            const std::int64_t g = n * groups + c / per;
            const double m = mean[g], s = inv_std[g], gm = gamma[c];
            const double a = sum_g[g] / count, b = sum_g_xhat[g] / count;
            for (std::int64_t i = 0; i < x.dims.h; ++i) {
                const float* xr = &x.at(n, c, i, 0);
                const float* dr = &dy.at(n, c, i, 0);
                float* out = &dx.at(n, c, i, 0);
                for (std::int64_t j = 0; j < x.dims.w; ++j) {
                    const double x_hat = (double(xr[j]) - m) * s;
                    out[j] = static_cast<float>(s * (double(dr[j]) * gm - a - x_hat * b));
                }
            }
        });
    }

    static std::size_t plane_count(const PlaneDims& d) { return static_cast<std::size_t>(d.n * d.c); }
    static std::size_t plane(const PlaneDims& d, std::int64_t n, std::int64_t c) {
        return static_cast<std::size_t>(n * d.c + c);
    }
};

class CpuDropout final : public DropoutKernels {
public:
    void forward(ConstView x, const DropoutMask& m, View y) override {
        check_same_dims(x, y, "dropout forward");
        apply(planes(x), m, planes(y));
    }
    void backward(ConstView dy, const DropoutMask& m, View dx) override {
        check_same_dims(dy, dx, "dropout backward");
        apply(planes(dy), m, planes(dx));
    }

private:
    // The mask's place is the view's first row and column.
    static void apply(ConstPlanes x, const DropoutMask& m, Planes y) {
        const PlanePlace at = plane_place(m.at);
        const std::uint32_t threshold = dropout_threshold(m.p);
        const float scale = 1.0f / (1.0f - m.p);
        each_plane(x.dims, [&](std::int64_t n, std::int64_t c) {
            for (std::int64_t i = 0; i < x.dims.h; ++i) {
                const float* in = &x.at(n, c, i, 0);
                float* out = &y.at(n, c, i, 0);
                for (std::int64_t j = 0; j < x.dims.w; ++j)
                    out[j] =
                        dropout_keep(m.key, m.step, m.n0 + n, c, at.y + i, at.x + j, threshold) ? in[j] * scale : 0.0f;
            }
        });
    }
};

}  // namespace

GroupNormKernels& cpu_groupnorm() {
    static CpuGroupNorm instance;
    return instance;
}

DropoutKernels& cpu_dropout() {
    static CpuDropout instance;
    return instance;
}

}  // namespace dsl::backend
