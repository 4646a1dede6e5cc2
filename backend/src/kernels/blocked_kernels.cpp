// Batch norm, the leaky ReLU, add and copy over blocked views: each a loop over runs of places, a place a block
// of 16 channels (one AVX-512 vector), the runs on OpenMP's threads (Tasks).
// Built with -ffp-contract=off (backend/CMakeLists.txt): every product and sum rounds as the Halide
// pipelines' do.
#include "blocked_kernels.hpp"
#include "avx512_clone.hpp"
#include "kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace dsl::backend::blocked {
namespace {

constexpr std::int64_t L = blocked_lanes;

// The runs of blocked views of `dims` that the kernels' tasks take, each on one thread: `span` consecutive
// rows of one sample's block of channels (the places along every spatial dimension but the last), numbered
// in that order, a row's places each a block of L channels. A task's rows are one run of floats where in every
// view a block's rows follow one another (no margins within it), so that a task is some 32K floats; else one
// row. The tasks depend on the views alone (not on the threads), and so do the statistics' sums.
struct Tasks {
    Dims dims;
    std::int64_t blocks = 0, outer = 1, width = 1, span = 1, per_plane = 1, count = 0;

    template <typename... Views>
    explicit Tasks(const Dims& d, const Views&... views) : dims(d), blocks(d.c / L) {
        const int r = d.rank();
        for (int k = 0; k + 1 < r; ++k) outer *= d.space[k];
        width = r > 0 ? d.space[r - 1] : 1;
        set_span((follow(views) && ...) ? std::clamp<std::int64_t>(32768 / (width * L), 1, outer) : 1);
    }
    void set_span(std::int64_t rows) {
        span = rows;
        per_plane = (outer + span - 1) / span;
        count = dims.n * blocks * per_plane;
    }
    // Whether a block's rows follow one another in `v`.
    template <typename T>
    bool follow(const BasicView<T>& v) const {
        for (int k = 0; k + 1 < dims.rank(); ++k)
            if (v.stride[k] != v.stride[k + 1] * dims.space[k + 1]) return false;
        return true;
    }
    // The first of task `k`'s places (each L floats) in `v`.
    template <typename T>
    T* first(const BasicView<T>& v, std::int64_t k) const {
        std::int64_t rest = k % per_plane * span;
        const std::int64_t nb = k / per_plane;
        Index i = Index::filled(dims.rank(), 0);
        for (int d = dims.rank() - 2; d >= 0; --d) i[d] = rest % dims.space[d], rest /= dims.space[d];
        return &v.at(nb / blocks, first_channel(k), i);
    }
    // Its places: `span` rows' (fewer in a block's last task).
    std::int64_t places(std::int64_t k) const { return std::min(span, outer - k % per_plane * span) * width; }
    std::int64_t first_channel(std::int64_t k) const { return k / per_plane % blocks * L; }
};

template <typename T>
void check_blocked(const BasicView<T>& v, const Dims& dims, const char* what) {
    check_same_dims(v.dims, dims, what);
    DSL_INTERNAL_CHECK(v.lanes == L && dims.c % L == 0 && dims.rank() > 0 && v.stride[dims.rank() - 1] == L,
                       std::string(what) + ": a view that is not blocked in 16 channels");
}

// f(k) for every task k, on OpenMP's threads.
template <typename F>
void each_task(const Tasks& tasks, F&& f) {
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < tasks.count; ++k) f(k);
}

// Per-channel sums of two terms over every task's places, in double: each task's sums on its own (on the
// threads), then added up task by task in order, so that the result does not depend on the threads.
template <typename Terms>
void channel_sums(const Tasks& tasks, double* first, double* second, Terms&& terms) {
    std::vector<double> parts(static_cast<std::size_t>(tasks.count * 2 * L));
    each_task(tasks, [&](std::int64_t k) {
        double a[L] = {}, b[L] = {};
        terms(k, a, b);
        for (std::int64_t l = 0; l < L; ++l) parts[static_cast<std::size_t>((2 * k) * L + l)] = a[l];
        for (std::int64_t l = 0; l < L; ++l) parts[static_cast<std::size_t>((2 * k + 1) * L + l)] = b[l];
    });
    for (std::int64_t k = 0; k < tasks.count; ++k) {
        const std::int64_t c0 = tasks.first_channel(k);
        for (std::int64_t l = 0; l < L; ++l) {
            first[c0 + l] += parts[static_cast<std::size_t>((2 * k) * L + l)];
            second[c0 + l] += parts[static_cast<std::size_t>((2 * k + 1) * L + l)];
        }
    }
}

float leaky(float v, float slope) { return v > 0.0f ? v : slope * v; }

// One run each, `width` places of L channels (or `count` floats), in the pipelines' arithmetic.
DSL_AVX512_CLONE void statistics_run(const float* __restrict in, std::int64_t width, double* __restrict s,
                                     double* __restrict s2) {
    for (std::int64_t j = 0; j < width; ++j, in += L)
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) {
            const double v = in[l];
            s[l] += v;
            s2[l] += v * v;
        }
}

struct Channels {  // a block's per-channel values, in double
    double a[L], b[L], c[L], d[L];
};

// out = gamma * (x - mean) * inv_std + beta (a, b, c, d), then the leaky ReLU where `fused`.
DSL_AVX512_CLONE void batchnorm_run(const float* __restrict in, float* __restrict out, std::int64_t width,
                                    const Channels& k, bool fused, float slope) {
    for (std::int64_t j = 0; j < width; ++j, in += L, out += L)
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) {
            const auto v = static_cast<float>(k.a[l] * (static_cast<double>(in[l]) - k.b[l]) * k.c[l] + k.d[l]);
            out[l] = fused ? leaky(v, slope) : v;
        }
}

// Sums of dy and of dy * x_hat, x_hat = (x - mean) * inv_std (a, b).
DSL_AVX512_CLONE void backward_statistics_run(const float* __restrict in, const float* __restrict dy,
                                              std::int64_t width, const Channels& k, double* __restrict s,
                                              double* __restrict s2) {
    for (std::int64_t j = 0; j < width; ++j, in += L, dy += L)
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) {
            const double x_hat = (static_cast<double>(in[l]) - k.a[l]) * k.b[l];
            const double g = dy[l];
            s[l] += g;
            s2[l] += g * x_hat;
        }
}

// dx = gamma * inv_std * (dy - sum_dy / count - x_hat * (sum_dy_xhat / count)): mean and inv_std (a, b),
// gamma * inv_std (c), sum_dy / count (d), sum_dy_xhat / count (e).
DSL_AVX512_CLONE void batchnorm_backward_run(const float* __restrict in, const float* __restrict dy,
                                             float* __restrict out, std::int64_t width, const Channels& k,
                                             const double* __restrict e) {
    for (std::int64_t j = 0; j < width; ++j, in += L, dy += L, out += L)
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) {
            const double x_hat = (static_cast<double>(in[l]) - k.a[l]) * k.b[l];
            out[l] = static_cast<float>(k.c[l] * (static_cast<double>(dy[l]) - k.d[l] - x_hat * e[l]));
        }
}

DSL_AVX512_CLONE void relu_run(const float* __restrict in, float* __restrict out, std::int64_t count, float slope) {
#pragma omp simd
    for (std::int64_t e = 0; e < count; ++e) out[e] = leaky(in[e], slope);
}

DSL_AVX512_CLONE void relu_backward_run(const float* __restrict in, const float* __restrict dy, float* __restrict out,
                                        std::int64_t count, float slope) {
#pragma omp simd
    for (std::int64_t e = 0; e < count; ++e) out[e] = in[e] > 0.0f ? dy[e] : slope * dy[e];
}

// out = a + b in double, rounded once, then the leaky ReLU where `fused`. out may be a or b (not restrict).
DSL_AVX512_CLONE void add_run(const float* a, const float* b, float* out, std::int64_t count, bool fused, float slope) {
#pragma omp simd
    for (std::int64_t e = 0; e < count; ++e) {
        const auto v = static_cast<float>(static_cast<double>(a[e]) + static_cast<double>(b[e]));
        out[e] = fused ? leaky(v, slope) : v;
    }
}

}  // namespace

void batchnorm_statistics(ConstView x, double* sum, double* sum_sq) {
    check_blocked(x, x.dims, "blocked batchnorm statistics");
    const Tasks tasks(x.dims, x);
    channel_sums(tasks, sum, sum_sq, [&](std::int64_t k, double* s, double* s2) {
        statistics_run(tasks.first(x, k), tasks.places(k), s, s2);
    });
}

void batchnorm_forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                       std::optional<float> relu, View y) {
    check_blocked(x, y.dims, "blocked batchnorm forward");
    check_blocked(y, y.dims, "blocked batchnorm forward");
    const Tasks tasks(y.dims, x, y);
    each_task(tasks, [&](std::int64_t k) {
        const std::int64_t c0 = tasks.first_channel(k);
        const float* in = tasks.first(x, k);
        Channels ch;
        for (std::int64_t l = 0; l < L; ++l)
            ch.a[l] = gamma[c0 + l], ch.b[l] = mean[c0 + l], ch.c[l] = inv_std[c0 + l], ch.d[l] = beta[c0 + l];
        batchnorm_run(in, tasks.first(y, k), tasks.places(k), ch, relu.has_value(), relu.value_or(0.0f));
    });
}

void batchnorm_backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                                   double* sum_dy_xhat) {
    check_blocked(x, x.dims, "blocked batchnorm backward statistics");
    check_blocked(dy, x.dims, "blocked batchnorm backward statistics");
    const Tasks tasks(x.dims, x, dy);
    channel_sums(tasks, sum_dy, sum_dy_xhat, [&](std::int64_t k, double* s, double* s2) {
        const std::int64_t c0 = tasks.first_channel(k);
        const float* in = tasks.first(x, k);
        Channels ch;
        for (std::int64_t l = 0; l < L; ++l) ch.a[l] = mean[c0 + l], ch.b[l] = inv_std[c0 + l];
        backward_statistics_run(in, tasks.first(dy, k), tasks.places(k), ch, s, s2);
    });
}

void batchnorm_backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                        const double* sum_dy, const double* sum_dy_xhat, double count, View dx) {
    check_blocked(x, dx.dims, "blocked batchnorm backward");
    check_blocked(dy, dx.dims, "blocked batchnorm backward");
    check_blocked(dx, dx.dims, "blocked batchnorm backward");
    DSL_INTERNAL_CHECK(count > 0, "batchnorm backward: empty group");
    const Tasks tasks(dx.dims, x, dy, dx);
    each_task(tasks, [&](std::int64_t k) {
        const std::int64_t c0 = tasks.first_channel(k);
        const float* in = tasks.first(x, k);
        Channels ch;
        double e[L];
        for (std::int64_t l = 0; l < L; ++l) {
            ch.a[l] = mean[c0 + l], ch.b[l] = inv_std[c0 + l];
            ch.c[l] = static_cast<double>(gamma[c0 + l]) * ch.b[l];
            ch.d[l] = sum_dy[c0 + l] / count, e[l] = sum_dy_xhat[c0 + l] / count;
        }
        batchnorm_backward_run(in, tasks.first(dy, k), tasks.first(dx, k), tasks.places(k), ch, e);
    });
}

void leaky_relu_forward(ConstView x, float slope, View y) {
    check_blocked(x, y.dims, "blocked activation forward");
    check_blocked(y, y.dims, "blocked activation forward");
    const Tasks tasks(y.dims, x, y);
    each_task(tasks,
              [&](std::int64_t k) { relu_run(tasks.first(x, k), tasks.first(y, k), tasks.places(k) * L, slope); });
}

void leaky_relu_backward(ConstView x, ConstView dy, float slope, View dx) {
    check_blocked(x, dx.dims, "blocked activation backward");
    check_blocked(dy, dx.dims, "blocked activation backward");
    check_blocked(dx, dx.dims, "blocked activation backward");
    const Tasks tasks(dx.dims, x, dy, dx);
    each_task(tasks, [&](std::int64_t k) {
        relu_backward_run(tasks.first(x, k), tasks.first(dy, k), tasks.first(dx, k), tasks.places(k) * L, slope);
    });
}

void add(const std::vector<ConstView>& xs, std::optional<float> relu, View y) {
    DSL_INTERNAL_CHECK(!xs.empty(), "add: no inputs");
    DSL_INTERNAL_CHECK(!relu || xs.size() == 2, "add: a ReLU after other than two inputs");
    for (const ConstView& x : xs) check_blocked(x, y.dims, "blocked add");
    check_blocked(y, y.dims, "blocked add");
    if (xs.size() == 1) return copy(xs[0], y);
    Tasks tasks(y.dims, y);
    for (const ConstView& x : xs)
        if (!tasks.follow(x)) tasks.set_span(1);
    // y may be xs[0] or xs[1] (each element is read before it is written), not a later input.
    each_task(tasks, [&](std::int64_t k) {
        float* out = tasks.first(y, k);
        const std::int64_t count = tasks.places(k) * L;
        add_run(tasks.first(xs[0], k), tasks.first(xs[1], k), out, count, relu.has_value(), relu.value_or(0.0f));
        for (std::size_t i = 2; i < xs.size(); ++i) add_run(out, tasks.first(xs[i], k), out, count, false, 0.0f);
    });
}

void copy(ConstView x, View y) {
    check_blocked(x, y.dims, "blocked copy");
    check_blocked(y, y.dims, "blocked copy");
    const Tasks tasks(y.dims, x, y);
    each_task(tasks, [&](std::int64_t k) { std::copy_n(tasks.first(x, k), tasks.places(k) * L, tasks.first(y, k)); });
}

void accumulate(ConstView x, View y) { add({y, x}, std::nullopt, y); }

}  // namespace dsl::backend::blocked
