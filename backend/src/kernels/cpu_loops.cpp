// CPU kernels in plain C++ over OpenMP's threads (the team oneDNN and Halide use), for the kinds that neither
// has: group normalization (oneDNN 2.6 has none) and dropout (its mask is splitmix.hpp's hash of global
// coordinates). Both go plane by plane, (n, c), one plane per task (planes.hpp: the form in which they see
// their views; a volume's plane is its depth slices', depth_slices.hpp); sums are in double, as the
// reference's.
#include "../random/splitmix.hpp"
#include "../tensors/planes.hpp"
#include "depth_slices.hpp"
#include "halide_kernels.hpp"
#include "kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <cstdint>
#include <vector>

namespace dsl::backend {
namespace {

std::int64_t per_group(const PlaneDims& d, std::int64_t groups) {
    DSL_INTERNAL_CHECK(groups > 0 && d.c % groups == 0, "groupnorm: channels not divisible into groups");
    return d.c / groups;
}

// Runs body(n, c) for every plane of `d` (each slice's, together), in parallel.
template <typename Body>
void each_plane(const PlaneDims& d, Body&& body) {
    const std::int64_t planes = d.n * d.c;
#pragma omp parallel for schedule(static)
    for (std::int64_t p = 0; p < planes; ++p) body(p / d.c, p % d.c);
}

class CpuGroupNorm final : public GroupNormKernels {
public:
    // Within a plane the slices' rows run in order, so that merged slices (slicing) sum as separate ones.
    void statistics(ConstView x, std::int64_t groups, double* sum, double* sum_sq) override {
        const Slicing s = slicing(true, x);
        statistics(slices(x, s), groups, sum, sum_sq);
    }
    void forward(ConstView x, std::int64_t groups, const float* mean, const float* inv_std, const float* gamma,
                 const float* beta, View y) override {
        check_same_dims(x, y, "groupnorm forward");
        const Slicing s = slicing(true, x, y);
        forward(slices(x, s), groups, mean, inv_std, gamma, beta, slices(y, s));
    }
    void backward_statistics(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                             const float* gamma, double* d_beta, double* d_gamma, double* sum_g,
                             double* sum_g_xhat) override {
        check_same_dims(x, dy, "groupnorm backward_statistics");
        const Slicing s = slicing(true, x, dy);
        backward_statistics(slices(x, s), slices(dy, s), groups, mean, inv_std, gamma, d_beta, d_gamma, sum_g,
                            sum_g_xhat);
    }
    void backward(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                  const float* gamma, const double* sum_g, const double* sum_g_xhat, double count, View dx) override {
        check_same_dims(x, dy, "groupnorm backward");
        check_same_dims(x, dx, "groupnorm backward");
        const Slicing s = slicing(true, x, dy, dx);
        backward(slices(x, s), slices(dy, s), groups, mean, inv_std, gamma, sum_g, sum_g_xhat, count, slices(dx, s));
    }

private:
    using ConstSlices = std::vector<ConstPlanes>;
    using Slices = std::vector<Planes>;

    static void statistics(const ConstSlices& xs, std::int64_t groups, double* sum, double* sum_sq) {
        if (xs.empty()) return;
        const PlaneDims& d = xs[0].dims;
        const std::int64_t per = per_group(d, groups);
        std::vector<double> s(plane_count(d)), s2(plane_count(d));
        each_plane(d, [&](std::int64_t n, std::int64_t c) {
            double a = 0.0, b = 0.0;
            for (const ConstPlanes& x : xs)
                for (std::int64_t i = 0; i < d.h; ++i) {
                    const float* row = &x.at(n, c, i, 0);
                    for (std::int64_t j = 0; j < d.w; ++j) {
                        const double v = row[j];
                        a += v;
                        b += v * v;
                    }
                }
            s[plane(d, n, c)] = a, s2[plane(d, n, c)] = b;
        });
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t c = 0; c < d.c; ++c) {
                sum[n * groups + c / per] += s[plane(d, n, c)];
                sum_sq[n * groups + c / per] += s2[plane(d, n, c)];
            }
    }

    static void forward(const ConstSlices& xs, std::int64_t groups, const float* mean, const float* inv_std,
                        const float* gamma, const float* beta, const Slices& ys) {
        if (xs.empty()) return;
        const PlaneDims& d = xs[0].dims;
        const std::int64_t per = per_group(d, groups);
        each_plane(d, [&](std::int64_t n, std::int64_t c) {
            const std::int64_t g = n * groups + c / per;
            // y = x * scale + shift, the reference's formula folded per plane (in double, rounded once).
            const double scale = double(gamma[c]) * inv_std[g], shift = double(beta[c]) - double(mean[g]) * scale;
            for (std::size_t k = 0; k < xs.size(); ++k)
                for (std::int64_t i = 0; i < d.h; ++i) {
                    const float* in = &xs[k].at(n, c, i, 0);
                    float* out = &ys[k].at(n, c, i, 0);
                    for (std::int64_t j = 0; j < d.w; ++j) out[j] = static_cast<float>(double(in[j]) * scale + shift);
                }
        });
    }

    static void backward_statistics(const ConstSlices& xs, const ConstSlices& dys, std::int64_t groups,
                                    const float* mean, const float* inv_std, const float* gamma, double* d_beta,
                                    double* d_gamma, double* sum_g, double* sum_g_xhat) {
        if (xs.empty()) return;
        const PlaneDims& d = xs[0].dims;
        const std::int64_t per = per_group(d, groups);
        std::vector<double> s(plane_count(d)), s2(plane_count(d));
        each_plane(d, [&](std::int64_t n, std::int64_t c) {
            const std::int64_t g = n * groups + c / per;
            double a = 0.0, b = 0.0;
            for (std::size_t k = 0; k < xs.size(); ++k)
                for (std::int64_t i = 0; i < d.h; ++i) {
                    const float* xr = &xs[k].at(n, c, i, 0);
                    const float* dr = &dys[k].at(n, c, i, 0);
                    for (std::int64_t j = 0; j < d.w; ++j) {
                        const double v = dr[j];
                        a += v;
                        b += v * ((double(xr[j]) - mean[g]) * inv_std[g]);
                    }
                }
            s[plane(d, n, c)] = a, s2[plane(d, n, c)] = b;
        });
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t c = 0; c < d.c; ++c) {
                const double a = s[plane(d, n, c)], b = s2[plane(d, n, c)];
                d_beta[c] += a;
                d_gamma[c] += b;
                sum_g[n * groups + c / per] += a * gamma[c];
                sum_g_xhat[n * groups + c / per] += b * gamma[c];
            }
    }

    static void backward(const ConstSlices& xs, const ConstSlices& dys, std::int64_t groups, const float* mean,
                         const float* inv_std, const float* gamma, const double* sum_g, const double* sum_g_xhat,
                         double count, const Slices& dxs) {
        DSL_INTERNAL_CHECK(count > 0, "groupnorm backward: empty group");
        if (xs.empty()) return;
        const PlaneDims& d = xs[0].dims;
        const std::int64_t per = per_group(d, groups);
        each_plane(d, [&](std::int64_t n, std::int64_t c) {
            const std::int64_t g = n * groups + c / per;
            const double m = mean[g], s = inv_std[g], gm = gamma[c];
            const double a = sum_g[g] / count, b = sum_g_xhat[g] / count;
            for (std::size_t k = 0; k < xs.size(); ++k)
                for (std::int64_t i = 0; i < d.h; ++i) {
                    const float* xr = &xs[k].at(n, c, i, 0);
                    const float* dr = &dys[k].at(n, c, i, 0);
                    float* out = &dxs[k].at(n, c, i, 0);
                    for (std::int64_t j = 0; j < d.w; ++j) {
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
        apply(x, m, y);
    }
    void backward(ConstView dy, const DropoutMask& m, View dx) override {
        check_same_dims(dy, dx, "dropout backward");
        apply(dy, m, dx);
    }

private:
    // The mask's place is the view's first element's: an image's row and column, a volume's depth too, which
    // each slice adds to. The hash of a plane, then of a slice and of a row, is made once for all they hold.
    static void apply(ConstView xv, const DropoutMask& m, View yv) {
        check_place(m.at, xv.dims, "dropout");
        const Slicing s = slicing(false, xv, yv);
        const ConstSlices xs = slices(xv, s);
        const Slices ys = slices(yv, s);
        if (xs.empty()) return;
        const PlaneDims& d = xs[0].dims;
        const bool volume = xv.dims.rank() == 3;
        const PlanePlace at = volume ? PlanePlace{m.at[1], m.at[2]} : plane_place(m.at);
        const std::uint32_t threshold = dropout_threshold(m.p);
        const float scale = 1.0f / (1.0f - m.p);
        each_plane(d, [&](std::int64_t n, std::int64_t c) {
            const std::uint64_t plane = dropout_stream(m.key, m.step, m.n0 + n, m.c0 + c);
            for (std::size_t k = 0; k < xs.size(); ++k) {
                const std::uint64_t depth = volume ? dropout_along(plane, m.at[0] + std::int64_t(k)) : plane;
                for (std::int64_t i = 0; i < d.h; ++i) {
                    const std::uint64_t row = dropout_along(depth, at.y + i);
                    const float* in = &xs[k].at(n, c, i, 0);
                    float* out = &ys[k].at(n, c, i, 0);
                    for (std::int64_t j = 0; j < d.w; ++j)
                        out[j] = dropout_kept(dropout_along(row, at.x + j), threshold) ? in[j] * scale : 0.0f;
                }
            }
        });
    }

    using ConstSlices = std::vector<ConstPlanes>;
    using Slices = std::vector<Planes>;
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
