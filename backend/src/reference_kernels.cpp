// The reference kernels: plain loops over strided views, accumulating in double; the oracle that the CPU
// kernels and the distributed runs are tested against, so every loop reads like its formula in kernels.hpp.
// Each kernel sees its views as planes (planes.hpp): the public overrides convert them and call the loops.
#include "kernel_checks.hpp"
#include "planes.hpp"
#include "regression_formula.hpp"
#include "resample_kernels.hpp"
#include "splitmix.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/base/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsl::backend {
namespace {

// Element (n, c, y, x) of a dense double buffer shaped like `d`: where transposes gather before writing once.
struct DoubleBuffer {
    PlaneDims d;
    std::vector<double> values;
    explicit DoubleBuffer(PlaneDims dims) : d(dims), values(static_cast<std::size_t>(dims.elements()), 0.0) {}
    double& at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) {
        return values[static_cast<std::size_t>(((n * d.c + c) * d.h + y) * d.w + x)];
    }
    void store(Planes v) {
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t c = 0; c < d.c; ++c)
                for (std::int64_t y = 0; y < d.h; ++y)
                    for (std::int64_t x = 0; x < d.w; ++x) v.at(n, c, y, x) = static_cast<float>(at(n, c, y, x));
    }
};

class ReferenceConv final : public ConvKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y, const Window& win) override {
        forward(planes(x), planes(w), bias, planes(y), win);
    }
    void backward_data(ConstView dy, ConstView w, View dx, const Window& win) override {
        backward_data(planes(dy), planes(w), planes(dx), win);
    }
    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& win) override {
        backward_weights(planes(x), planes(dy), planes(dw), db, win);
    }

private:
    static void forward(ConstPlanes x, ConstPlanes w, const float* bias, Planes y, const Window& win) {
        check(x, w, y, win);
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t f = 0; f < y.dims.c; ++f)
                for (std::int64_t i = 0; i < y.dims.h; ++i)
                    for (std::int64_t j = 0; j < y.dims.w; ++j) {
                        double acc = bias ? bias[f] : 0.0;
                        for (std::int64_t c = 0; c < x.dims.c; ++c)
                            for (std::int64_t a = 0; a < win.kernel[0]; ++a)
                                for (std::int64_t b = 0; b < win.kernel[1]; ++b)
                                    acc += double(x.at(n, c, i * win.stride[0] + a * win.dilation[0],
                                                       j * win.stride[1] + b * win.dilation[1])) *
                                           w.at(f, c, a, b);
                        y.at(n, f, i, j) = static_cast<float>(acc);
                    }
    }

    static void backward_data(ConstPlanes dy, ConstPlanes w, Planes dx, const Window& win) {
        check(dx, w, dy, win);
        DoubleBuffer acc(dx.dims);
        for (std::int64_t n = 0; n < dy.dims.n; ++n)
            for (std::int64_t f = 0; f < dy.dims.c; ++f)
                for (std::int64_t i = 0; i < dy.dims.h; ++i)
                    for (std::int64_t j = 0; j < dy.dims.w; ++j)
                        for (std::int64_t c = 0; c < dx.dims.c; ++c)
                            for (std::int64_t a = 0; a < win.kernel[0]; ++a)
                                for (std::int64_t b = 0; b < win.kernel[1]; ++b)
                                    acc.at(n, c, i * win.stride[0] + a * win.dilation[0],
                                           j * win.stride[1] + b * win.dilation[1]) +=
                                        double(dy.at(n, f, i, j)) * w.at(f, c, a, b);
        acc.store(dx);
    }

    static void backward_weights(ConstPlanes x, ConstPlanes dy, Planes dw, float* db, const Window& win) {
        check(x, dw, dy, win);
        for (std::int64_t f = 0; f < dw.dims.n; ++f) {
            for (std::int64_t c = 0; c < dw.dims.c; ++c)
                for (std::int64_t a = 0; a < win.kernel[0]; ++a)
                    for (std::int64_t b = 0; b < win.kernel[1]; ++b) {
                        double acc = 0.0;
                        for (std::int64_t n = 0; n < dy.dims.n; ++n)
                            for (std::int64_t i = 0; i < dy.dims.h; ++i)
                                for (std::int64_t j = 0; j < dy.dims.w; ++j)
                                    acc +=
                                        double(dy.at(n, f, i, j)) * x.at(n, c, i * win.stride[0] + a * win.dilation[0],
                                                                         j * win.stride[1] + b * win.dilation[1]);
                        dw.at(f, c, a, b) = static_cast<float>(acc);
                    }
            if (db) {
                double acc = 0.0;
                for (std::int64_t n = 0; n < dy.dims.n; ++n)
                    for (std::int64_t i = 0; i < dy.dims.h; ++i)
                        for (std::int64_t j = 0; j < dy.dims.w; ++j) acc += dy.at(n, f, i, j);
                db[f] = static_cast<float>(acc);
            }
        }
    }

    static void check(const auto& x, const auto& w, const auto& y, const Window& win) {
        check_conv(x.dims, w.dims, y.dims, win);
    }
};

class ReferenceBatchNorm final : public BatchNormKernels {
public:
    void statistics(ConstView x, double* sum, double* sum_sq) override { statistics(planes(x), sum, sum_sq); }
    void forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                 View y) override {
        forward(planes(x), mean, inv_std, gamma, beta, planes(y));
    }
    void backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                             double* sum_dy_xhat) override {
        backward_statistics(planes(x), planes(dy), mean, inv_std, sum_dy, sum_dy_xhat);
    }
    void backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                  const double* sum_dy, const double* sum_dy_xhat, double count, View dx) override {
        backward(planes(x), planes(dy), mean, inv_std, gamma, sum_dy, sum_dy_xhat, count, planes(dx));
    }

private:
    static void statistics(ConstPlanes x, double* sum, double* sum_sq) {
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) {
                        const double v = x.at(n, c, i, j);
                        sum[c] += v;
                        sum_sq[c] += v * v;
                    }
    }

    static void forward(ConstPlanes x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                        Planes y) {
        check_same_dims(x, y, "batchnorm forward");
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j)
                        y.at(n, c, i, j) = static_cast<float>(
                            double(gamma[c]) * (double(x.at(n, c, i, j)) - mean[c]) * inv_std[c] + beta[c]);
    }

    static void backward_statistics(ConstPlanes x, ConstPlanes dy, const float* mean, const float* inv_std,
                                    double* sum_dy, double* sum_dy_xhat) {
        check_same_dims(x, dy, "batchnorm backward_statistics");
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) {
                        const double g = dy.at(n, c, i, j);
                        const double x_hat = (double(x.at(n, c, i, j)) - mean[c]) * inv_std[c];
                        sum_dy[c] += g;
                        sum_dy_xhat[c] += g * x_hat;
                    }
    }

    static void backward(ConstPlanes x, ConstPlanes dy, const float* mean, const float* inv_std, const float* gamma,
                         const double* sum_dy, const double* sum_dy_xhat, double count, Planes dx) {
        check_same_dims(x, dy, "batchnorm backward");
        check_same_dims(x, dx, "batchnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "batchnorm backward: empty group");
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) {
                        const double x_hat = (double(x.at(n, c, i, j)) - mean[c]) * inv_std[c];
                        dx.at(n, c, i, j) = static_cast<float>(
                            double(gamma[c]) * inv_std[c] *
                            (double(dy.at(n, c, i, j)) - sum_dy[c] / count - x_hat * sum_dy_xhat[c] / count));
                    }
    }
};

// An element-wise kind's function and its derivative at one element, in float.
float activate(frontend::Activation f, float v, float slope) {
    switch (f) {
        case frontend::Activation::relu:
        case frontend::Activation::leaky_relu: return v > 0.0f ? v : slope * v;
        case frontend::Activation::sigmoid: return 1.0f / (1.0f + std::exp(-v));
        case frontend::Activation::tanh: return std::tanh(v);
        case frontend::Activation::gelu: return v * 0.5f * (1.0f + std::erf(v * 0.70710678118654752f));
        case frontend::Activation::none: break;
    }
    throw dsl::InternalError("activation kernels called without a function");
}

// dy * f'(v). At v = 0, relu's is the slope's, as PyTorch's gradient is.
float activate_backward(frontend::Activation f, float v, float g, float slope) {
    switch (f) {
        case frontend::Activation::relu:
        case frontend::Activation::leaky_relu: return v > 0.0f ? g : slope * g;
        case frontend::Activation::sigmoid: {
            const float y = activate(f, v, slope);
            return g * y * (1.0f - y);
        }
        case frontend::Activation::tanh: {
            const float y = std::tanh(v);
            return g * (1.0f - y * y);
        }
        case frontend::Activation::gelu: {
            // 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
            const float cdf = 0.5f * (1.0f + std::erf(v * 0.70710678118654752f));
            const float pdf = 0.39894228040143268f * std::exp(-0.5f * v * v);
            return g * (cdf + v * pdf);
        }
        case frontend::Activation::none: break;
    }
    throw dsl::InternalError("activation kernels called without a function");
}

class ReferenceActivation final : public ActivationKernels {
public:
    void forward(frontend::Activation f, ConstView x, float slope, View y) override {
        forward(f, planes(x), slope, planes(y));
    }
    void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) override {
        backward(f, planes(x), planes(dy), slope, planes(dx));
    }

private:
    static void forward(frontend::Activation f, ConstPlanes x, float slope, Planes y) {
        check_same_dims(x, y, "activation forward");
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) y.at(n, c, i, j) = activate(f, x.at(n, c, i, j), slope);
    }

    static void backward(frontend::Activation f, ConstPlanes x, ConstPlanes dy, float slope, Planes dx) {
        check_same_dims(x, dy, "activation backward");
        check_same_dims(x, dx, "activation backward");
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j)
                        dx.at(n, c, i, j) = activate_backward(f, x.at(n, c, i, j), dy.at(n, c, i, j), slope);
    }
};

// Pooling windows honour the dilation as convolutions do (input_extent includes it); the layers the front
// end accepts pool with dilation 1, where this is the formula of kernels.hpp.
class ReferencePool final : public PoolKernels {
public:
    void forward(PoolKind kind, ConstView x, View y, const Window& win) override {
        forward(kind, planes(x), planes(y), win);
    }
    void backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& win) override {
        backward(kind, planes(x), planes(dy), planes(dx), win);
    }
    void global_sum(ConstView x, double* sums) override { global_sum(planes(x), sums); }
    void broadcast(const float* values, float scale, View dx) override { broadcast(values, scale, planes(dx)); }

private:
    static void forward(PoolKind kind, ConstPlanes x, Planes y, const Window& win) {
        check(x, y, win);
        const double area = double(win.kernel[0] * win.kernel[1]);
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t c = 0; c < y.dims.c; ++c)
                for (std::int64_t i = 0; i < y.dims.h; ++i)
                    for (std::int64_t j = 0; j < y.dims.w; ++j) {
                        if (kind == PoolKind::max) {
                            const auto [a, b] = first_max(x, n, c, i, j, win);
                            y.at(n, c, i, j) = input(x, n, c, i, j, a, b, win);
                        } else {
                            double acc = 0.0;
                            for (std::int64_t a = 0; a < win.kernel[0]; ++a)
                                for (std::int64_t b = 0; b < win.kernel[1]; ++b) acc += input(x, n, c, i, j, a, b, win);
                            y.at(n, c, i, j) = static_cast<float>(acc / area);
                        }
                    }
    }

    static void backward(PoolKind kind, ConstPlanes x, ConstPlanes dy, Planes dx, const Window& win) {
        check(x, dy, win);
        check_same_dims(x, dx, "pool backward");
        const double area = double(win.kernel[0] * win.kernel[1]);
        DoubleBuffer acc(dx.dims);
        for (std::int64_t n = 0; n < dy.dims.n; ++n)
            for (std::int64_t c = 0; c < dy.dims.c; ++c)
                for (std::int64_t i = 0; i < dy.dims.h; ++i)
                    for (std::int64_t j = 0; j < dy.dims.w; ++j) {
                        const double g = dy.at(n, c, i, j);
                        if (kind == PoolKind::max) {
                            const auto [a, b] = first_max(x, n, c, i, j, win);
                            acc.at(n, c, i * win.stride[0] + a * win.dilation[0],
                                   j * win.stride[1] + b * win.dilation[1]) += g;
                        } else {
                            for (std::int64_t a = 0; a < win.kernel[0]; ++a)
                                for (std::int64_t b = 0; b < win.kernel[1]; ++b)
                                    acc.at(n, c, i * win.stride[0] + a * win.dilation[0],
                                           j * win.stride[1] + b * win.dilation[1]) += g / area;
                        }
                    }
        acc.store(dx);
    }

    static void global_sum(ConstPlanes x, double* sums) {
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c) {
                double acc = 0.0;
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) acc += x.at(n, c, i, j);
                sums[n * x.dims.c + c] += acc;
            }
    }

    static void broadcast(const float* values, float scale, Planes dx) {
        for (std::int64_t n = 0; n < dx.dims.n; ++n)
            for (std::int64_t c = 0; c < dx.dims.c; ++c) {
                const float v = values[n * dx.dims.c + c] * scale;
                for (std::int64_t i = 0; i < dx.dims.h; ++i)
                    for (std::int64_t j = 0; j < dx.dims.w; ++j) dx.at(n, c, i, j) = v;
            }
    }

    static void check(const ConstPlanes& x, const auto& y, const Window& win) { check_pool(x.dims, y.dims, win); }

    static float input(const ConstPlanes& x, std::int64_t n, std::int64_t c, std::int64_t i, std::int64_t j,
                       std::int64_t a, std::int64_t b, const Window& win) {
        return x.at(n, c, i * win.stride[0] + a * win.dilation[0], j * win.stride[1] + b * win.dilation[1]);
    }

    // The window offset of the first maximum in scan order (a, then b): ties go to the earliest, as the
    // backward must agree with every implementation on where the gradient goes.
    static std::array<std::int64_t, 2> first_max(const ConstPlanes& x, std::int64_t n, std::int64_t c, std::int64_t i,
                                                 std::int64_t j, const Window& win) {
        std::array<std::int64_t, 2> best{0, 0};
        float best_value = input(x, n, c, i, j, 0, 0, win);
        for (std::int64_t a = 0; a < win.kernel[0]; ++a)
            for (std::int64_t b = 0; b < win.kernel[1]; ++b) {
                const float v = input(x, n, c, i, j, a, b, win);
                if (v > best_value) {
                    best_value = v;
                    best = {a, b};
                }
            }
        return best;
    }
};

// FC sees x as a matrix [N, C*H*W]; feature i of x is (c, y, x) in row-major order.
class ReferenceFc final : public FcKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y) override {
        forward(planes(x), planes(w), bias, planes(y));
    }
    void backward_data(ConstView dy, ConstView w, View dx) override {
        backward_data(planes(dy), planes(w), planes(dx));
    }
    void backward_weights(ConstView x, ConstView dy, View dw, float* db) override {
        backward_weights(planes(x), planes(dy), planes(dw), db);
    }

private:
    static void forward(ConstPlanes x, ConstPlanes w, const float* bias, Planes y) {
        check(x, w, y);
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t k = 0; k < y.dims.c; ++k) {
                double acc = bias ? bias[k] : 0.0;
                for_each_feature(x.dims, [&](std::int64_t i, std::int64_t c, std::int64_t h, std::int64_t ww) {
                    acc += double(x.at(n, c, h, ww)) * w.at(k, i, 0, 0);
                });
                y.at(n, k, 0, 0) = static_cast<float>(acc);
            }
    }

    static void backward_data(ConstPlanes dy, ConstPlanes w, Planes dx) {
        check(dx, w, dy);
        for (std::int64_t n = 0; n < dx.dims.n; ++n)
            for_each_feature(dx.dims, [&](std::int64_t i, std::int64_t c, std::int64_t h, std::int64_t ww) {
                double acc = 0.0;
                for (std::int64_t k = 0; k < dy.dims.c; ++k) acc += double(dy.at(n, k, 0, 0)) * w.at(k, i, 0, 0);
                dx.at(n, c, h, ww) = static_cast<float>(acc);
            });
    }

    static void backward_weights(ConstPlanes x, ConstPlanes dy, Planes dw, float* db) {
        check(x, dw, dy);
        for (std::int64_t k = 0; k < dy.dims.c; ++k) {
            for_each_feature(x.dims, [&](std::int64_t i, std::int64_t c, std::int64_t h, std::int64_t ww) {
                double acc = 0.0;
                for (std::int64_t n = 0; n < x.dims.n; ++n) acc += double(dy.at(n, k, 0, 0)) * x.at(n, c, h, ww);
                dw.at(k, i, 0, 0) = static_cast<float>(acc);
            });
            if (db) {
                double acc = 0.0;
                for (std::int64_t n = 0; n < dy.dims.n; ++n) acc += dy.at(n, k, 0, 0);
                db[k] = static_cast<float>(acc);
            }
        }
    }

    template <typename F>
    static void for_each_feature(const PlaneDims& d, F&& f) {
        std::int64_t i = 0;
        for (std::int64_t c = 0; c < d.c; ++c)
            for (std::int64_t h = 0; h < d.h; ++h)
                for (std::int64_t ww = 0; ww < d.w; ++ww) f(i++, c, h, ww);
    }

    static void check(const auto& x, const auto& w, const auto& y) { check_fc(x.dims, w.dims, y.dims); }
};

class ReferenceEltwise final : public EltwiseKernels {
public:
    // y may be one of xs (an in-place sum): each element reads every input before it is written.
    void add(const std::vector<ConstView>& xs, View y) override {
        std::vector<ConstPlanes> ps;
        for (const ConstView& x : xs) ps.push_back(planes(x));
        add(ps, planes(y));
    }
    void copy(ConstView x, View y) override { copy(planes(x), planes(y)); }
    void accumulate(ConstView x, View y) override { accumulate(planes(x), planes(y)); }

    void sgd(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum, float decay) override {
        for (std::int64_t i = 0; i < count; ++i) {
            const float grad = g[i] + decay * w[i];
            m[i] = momentum * m[i] + grad;
            w[i] -= lr * m[i];
        }
    }

    void adam(float* w, float* m, float* v, const float* g, std::int64_t count, const AdamStep& step) override {
        adam_update(w, m, v, g, count, step);
    }

private:
    static void add(const std::vector<ConstPlanes>& xs, Planes y) {
        for (const ConstPlanes& x : xs) check_same_dims(x, y, "add");
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t c = 0; c < y.dims.c; ++c)
                for (std::int64_t i = 0; i < y.dims.h; ++i)
                    for (std::int64_t j = 0; j < y.dims.w; ++j) {
                        double acc = 0.0;
                        for (const ConstPlanes& x : xs) acc += x.at(n, c, i, j);
                        y.at(n, c, i, j) = static_cast<float>(acc);
                    }
    }

    static void copy(ConstPlanes x, Planes y) {
        check_same_dims(x, y, "copy");
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t c = 0; c < y.dims.c; ++c)
                for (std::int64_t i = 0; i < y.dims.h; ++i)
                    for (std::int64_t j = 0; j < y.dims.w; ++j) y.at(n, c, i, j) = x.at(n, c, i, j);
    }

    static void accumulate(ConstPlanes x, Planes y) {
        check_same_dims(x, y, "accumulate");
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t c = 0; c < y.dims.c; ++c)
                for (std::int64_t i = 0; i < y.dims.h; ++i)
                    for (std::int64_t j = 0; j < y.dims.w; ++j) y.at(n, c, i, j) += x.at(n, c, i, j);
    }
};

class ReferenceLoss final : public LossKernels {
public:
    double cross_entropy(ConstView logits, LabelView labels, float scale, View dlogits) override {
        return cross_entropy(planes(logits), planes(labels), scale, planes(dlogits));
    }
    double regression(frontend::Regression loss, ConstView prediction, ConstView target, float scale,
                      View dprediction) override {
        return regression(loss, planes(prediction), planes(target), scale, planes(dprediction));
    }

private:
    static double cross_entropy(ConstPlanes logits, LabelPlanes labels, float scale, Planes dlogits) {
        const PlaneDims& d = logits.dims;
        check_labels(d, labels.dims);
        if (dlogits.base) check_same_dims(logits, dlogits, "cross_entropy");
        double total = 0.0;
        std::vector<double> probabilities;
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t i = 0; i < d.h; ++i)
                for (std::int64_t j = 0; j < d.w; ++j) {
                    const std::int32_t label = labels.at(n, 0, i, j);
                    check_label(label, d.c);
                    // log-sum-exp shifted by the maximum, so large logits do not overflow.
                    double max_logit = -std::numeric_limits<double>::infinity();
                    for (std::int64_t k = 0; k < d.c; ++k)
                        max_logit = std::max(max_logit, double(logits.at(n, k, i, j)));
                    double sum_exp = 0.0;
                    for (std::int64_t k = 0; k < d.c; ++k)
                        sum_exp += std::exp(double(logits.at(n, k, i, j)) - max_logit);
                    const double log_sum_exp = max_logit + std::log(sum_exp);
                    total += log_sum_exp - double(logits.at(n, label, i, j));
                    if (!dlogits.base) continue;
                    // Every probability is read before any is written, so dlogits may be logits itself.
                    probabilities.resize(static_cast<std::size_t>(d.c));
                    for (std::int64_t k = 0; k < d.c; ++k)
                        probabilities[k] = std::exp(double(logits.at(n, k, i, j)) - log_sum_exp);
                    for (std::int64_t k = 0; k < d.c; ++k)
                        dlogits.at(n, k, i, j) =
                            static_cast<float>((probabilities[k] - (k == label ? 1.0 : 0.0)) * scale);
                }
        return total;
    }

    static double regression(frontend::Regression loss, ConstPlanes prediction, ConstPlanes target, float scale,
                             Planes dprediction) {
        const PlaneDims& d = prediction.dims;
        check_same_dims(prediction, target, "regression");
        if (dprediction.base) check_same_dims(prediction, dprediction, "regression");
        DSL_INTERNAL_CHECK(loss != frontend::Regression::none, "regression: not a regression loss");
        double total = 0.0;
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t c = 0; c < d.c; ++c)
                for (std::int64_t i = 0; i < d.h; ++i)
                    for (std::int64_t j = 0; j < d.w; ++j) {
                        const double x = prediction.at(n, c, i, j), t = target.at(n, c, i, j);
                        const RegressionTerm<double> r = regression_term(loss, x, t);
                        total += r.value;
                        if (dprediction.base) dprediction.at(n, c, i, j) = static_cast<float>(r.grad * scale);
                    }
        return total;
    }
};

class ReferenceGroupNorm final : public GroupNormKernels {
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
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) {
                        const double v = x.at(n, c, i, j);
                        sum[n * groups + c / per] += v;
                        sum_sq[n * groups + c / per] += v * v;
                    }
    }

    static void forward(ConstPlanes x, std::int64_t groups, const float* mean, const float* inv_std, const float* gamma,
                        const float* beta, Planes y) {
        check_same_dims(x, y, "groupnorm forward");
        const std::int64_t per = per_group(x.dims, groups);
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c) {
                const std::int64_t g = n * groups + c / per;
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j)
                        y.at(n, c, i, j) = static_cast<float>(
                            double(gamma[c]) * (double(x.at(n, c, i, j)) - mean[g]) * inv_std[g] + beta[c]);
            }
    }

    static void backward_statistics(ConstPlanes x, ConstPlanes dy, std::int64_t groups, const float* mean,
                                    const float* inv_std, const float* gamma, double* d_beta, double* d_gamma,
                                    double* sum_g, double* sum_g_xhat) {
        check_same_dims(x, dy, "groupnorm backward_statistics");
        const std::int64_t per = per_group(x.dims, groups);
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c) {
                const std::int64_t g = n * groups + c / per;
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) {
                        const double d = dy.at(n, c, i, j);
                        const double x_hat = (double(x.at(n, c, i, j)) - mean[g]) * inv_std[g];
                        d_beta[c] += d;
                        d_gamma[c] += d * x_hat;
                        sum_g[g] += d * gamma[c];
                        sum_g_xhat[g] += d * gamma[c] * x_hat;
                    }
            }
    }

    static void backward(ConstPlanes x, ConstPlanes dy, std::int64_t groups, const float* mean, const float* inv_std,
                         const float* gamma, const double* sum_g, const double* sum_g_xhat, double count, Planes dx) {
        check_same_dims(x, dy, "groupnorm backward");
        check_same_dims(x, dx, "groupnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "groupnorm backward: empty group");
        const std::int64_t per = per_group(x.dims, groups);
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c) {
                const std::int64_t g = n * groups + c / per;
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j) {
                        const double x_hat = (double(x.at(n, c, i, j)) - mean[g]) * inv_std[g];
                        dx.at(n, c, i, j) =
                            static_cast<float>(inv_std[g] * (double(dy.at(n, c, i, j)) * gamma[c] - sum_g[g] / count -
                                                              x_hat * sum_g_xhat[g] / count));
                    }
            }
    }

    static std::int64_t per_group(const PlaneDims& d, std::int64_t groups) {
        DSL_INTERNAL_CHECK(groups > 0 && d.c % groups == 0, "groupnorm: channels not divisible into groups");
        return d.c / groups;
    }
};

class ReferenceDropout final : public DropoutKernels {
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
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c)
                for (std::int64_t i = 0; i < x.dims.h; ++i)
                    for (std::int64_t j = 0; j < x.dims.w; ++j)
                        y.at(n, c, i, j) = dropout_keep(m.key, m.step, m.n0 + n, c, at.y + i, at.x + j, threshold)
                                               ? x.at(n, c, i, j) * scale
                                               : 0.0f;
    }
};

ReferenceConv conv_instance;
ReferenceBatchNorm batchnorm_instance;
ReferenceActivation activation_instance;
ReferencePool pool_instance;
ReferenceFc fc_instance;
ReferenceEltwise eltwise_instance;
ReferenceLoss loss_instance;
ReferenceGroupNorm groupnorm_instance;
ReferenceDropout dropout_instance;

}  // namespace

AdamStep adam_step(bool decoupled, double lr, double beta1, double beta2, double eps, double weight_decay,
                   std::int64_t t) {
    const double tt = static_cast<double>(t);
    AdamStep s;
    s.beta1 = static_cast<float>(beta1);
    s.beta2 = static_cast<float>(beta2);
    s.eps = static_cast<float>(eps);
    s.decay = decoupled ? 0.0f : static_cast<float>(weight_decay);
    s.decay_factor = decoupled ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
    s.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, tt)));
    s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, tt)));
    return s;
}

// Each operation rounded to float in turn (the host build makes no fused multiply-adds: no -mfma); the CUDA
// kernel spells out the same roundings (__fmul_rn, ...), so the two agree bit for bit.
void adam_update(float* w, float* m, float* v, const float* g, std::int64_t count, const AdamStep& s) {
    const float one_minus_beta1 = 1.0f - s.beta1, one_minus_beta2 = 1.0f - s.beta2;
    for (std::int64_t i = 0; i < count; ++i) {
        float p = w[i];
        if (s.decay_factor != 1.0f) p = p * s.decay_factor;
        float grad = g[i];
        if (s.decay != 0.0f) grad = grad + s.decay * p;
        const float mi = s.beta1 * m[i] + one_minus_beta1 * grad;
        const float vi = s.beta2 * v[i] + one_minus_beta2 * grad * grad;
        m[i] = mi;
        v[i] = vi;
        const float denom = std::sqrt(vi) / s.bias2_sqrt + s.eps;
        w[i] = p - s.step_size * (mi / denom);
    }
}

Kernels reference_kernels() {
    Kernels k{&conv_instance, &batchnorm_instance, &activation_instance, &pool_instance,
              &fc_instance,   &eltwise_instance,   &loss_instance};
    k.upsample = &reference_upsample();
    k.deconv = &reference_deconv();
    k.groupnorm = &groupnorm_instance;
    k.dropout = &dropout_instance;
    return k;
}

}  // namespace dsl::backend
