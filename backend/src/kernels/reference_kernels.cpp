// The reference kernels: plain loops over strided views, accumulating in double; the oracle that the CPU
// kernels and the distributed runs are tested against, so every loop reads like its formula in kernels.hpp.
// The loops are written once for images and volumes: each kernel checks its views and then sees them in their
// spatial form (planes.hpp: a volume as it is, an image, a vector or a row as an image), with windows and
// placements of their rank. They run along rows (the last dimension, contiguous in every view), and sums run
// in the order of the formula's indices, places and taps with the last dimension fastest, so that an image's
// results are those of the loops over rows and columns.
#include "../random/splitmix.hpp"
#include "../tensors/planes.hpp"
#include "double_buffer.hpp"
#include "kernel_checks.hpp"
#include "regression_formula.hpp"
#include "resample_kernels.hpp"
#include "rounded_conv.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/base/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsl::backend {
namespace {

// The first place of a view (the weights' tap 0, the one place of an fc's output).
Index origin(const Dims& d) { return Index::filled(d.rank(), 0); }

std::int64_t last(const Index& i) { return i[i.rank() - 1]; }

// o*s, dimension by dimension: where the window of output place o starts in its input.
Index window_start(const Index& o, const Index& s) {
    Index i = o;
    for (int d = 0; d < o.rank(); ++d) i[d] *= s[d];
    return i;
}

// The taps a of a window in order (the last dimension fastest), and each one's offset a*d from its window's
// start in a view of strides `stride` (d the dilation of an input, ones for the weights' own taps).
struct Taps {
    std::vector<Index> a;

    explicit Taps(const Index& kernel) : a(window_taps(kernel)) {}
    std::size_t size() const { return a.size(); }
    std::vector<std::int64_t> offsets(const Index& stride, const Index& dilation) const {
        std::vector<std::int64_t> out;
        for (const Index& t : a) {
            std::int64_t o = 0;
            for (int d = 0; d < t.rank(); ++d) o += t[d] * dilation[d] * stride[d];
            out.push_back(o);
        }
        return out;
    }
    std::vector<std::int64_t> offsets(const Index& stride) const {
        return offsets(stride, Index::filled(stride.rank(), 1));
    }
};

// y(n,f,o) = bias(f) + sum_{c,a} x(n, c, o*s + a*d) * w(f, c, a). Along a row of outputs, x's window starts
// move by the last dimension's stride; tap a lies a*d from a window's start in x, a from w's first tap
// (Taps).
class ReferenceConv final : public ConvKernels {
    // These kernels read and write weights plain only (blocks_weights is false).
    static void check_plain(const Window& win) {
        DSL_INTERNAL_CHECK(!win.blocked_weights, "reference conv: weights in blocks");
    }

public:
    void forward(ConstView x, ConstView w, const float* bias, View y, const Window& win) override {
        check_conv(x.dims, w.dims, y.dims, win);
        check_plain(win);
        x = spatial_form(x);
        w = spatial_form(w);
        y = spatial_form(y);
        const Taps taps(win.kernel);
        const std::vector<std::int64_t> tx = taps.offsets(x.stride, win.dilation), tw = taps.offsets(w.stride);
        const std::int64_t width = row_length(y.dims), step = last(win.stride);
        for_each_row_start(y.dims, [&](std::int64_t n, std::int64_t f, const Index& o) {
            const float* x0 = &x.at(n, 0, window_start(o, win.stride));
            const float* wf = &w.at(f, 0, origin(w.dims));
            float* out = &y.at(n, f, o);
            for (std::int64_t j = 0; j < width; ++j) {
                const float* xo = x0 + j * step;
                double acc = bias ? bias[f] : 0.0;
                for (std::int64_t c = 0; c < x.dims.c; ++c)
                    for (std::size_t t = 0; t < taps.size(); ++t)
                        acc += double(xo[c * x.stride_c + tx[t]]) * wf[c * w.stride_c + tw[t]];
                out[j] = static_cast<float>(acc);
            }
        });
    }

    void backward_data(ConstView dy, ConstView w, View dx, const Window& win) override {
        check_conv(dx.dims, w.dims, dy.dims, win);
        check_plain(win);
        dy = spatial_form(dy);
        w = spatial_form(w);
        dx = spatial_form(dx);
        DoubleBuffer acc(dx.dims);
        const BasicView<double>& a = acc.view;
        const Taps taps(win.kernel);
        const std::vector<std::int64_t> ta = taps.offsets(a.stride, win.dilation), tw = taps.offsets(w.stride);
        const std::int64_t width = row_length(dy.dims), step = last(win.stride);
        for_each_row_start(dy.dims, [&](std::int64_t n, std::int64_t f, const Index& o) {
            double* a0 = &a.at(n, 0, window_start(o, win.stride));
            const float* wf = &w.at(f, 0, origin(w.dims));
            const float* g = &dy.at(n, f, o);
            for (std::int64_t j = 0; j < width; ++j) {
                double* ao = a0 + j * step;
                const double gj = g[j];
                for (std::int64_t c = 0; c < dx.dims.c; ++c)
                    for (std::size_t t = 0; t < taps.size(); ++t)
                        ao[c * a.stride_c + ta[t]] += gj * wf[c * w.stride_c + tw[t]];
            }
        });
        acc.store(dx);
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& win) override {
        check_conv(x.dims, dw.dims, dy.dims, win);
        check_plain(win);
        x = spatial_form(x);
        dy = spatial_form(dy);
        dw = spatial_form(dw);
        const Taps taps(win.kernel);
        const std::vector<std::int64_t> tx = taps.offsets(x.stride, win.dilation);
        const std::int64_t width = row_length(dy.dims), step = last(win.stride);
        // Where each row of one filter's outputs starts in dy, and its first window in x, less the channels.
        std::vector<std::int64_t> dy_rows, x_rows;
        for_each_row_start(Dims{dy.dims.n, 1, dy.dims.space}, [&](std::int64_t n, std::int64_t, const Index& o) {
            dy_rows.push_back(dy.offset(n, 0, o));
            x_rows.push_back(x.offset(n, 0, window_start(o, win.stride)));
        });
        for (std::int64_t f = 0; f < dw.dims.n; ++f) {
            for (std::int64_t c = 0; c < dw.dims.c; ++c)
                for (std::size_t t = 0; t < taps.size(); ++t) {
                    double acc = 0.0;
                    for (std::size_t r = 0; r < dy_rows.size(); ++r) {
                        const float* g = dy.base + dy_rows[r] + f * dy.stride_c;
                        const float* xa = x.base + x_rows[r] + c * x.stride_c + tx[t];
                        for (std::int64_t j = 0; j < width; ++j) acc += double(g[j]) * xa[j * step];
                    }
                    dw.at(f, c, taps.a[t]) = static_cast<float>(acc);
                }
            if (db) {
                double acc = 0.0;
                for (const std::int64_t row : dy_rows) {
                    const float* g = dy.base + row + f * dy.stride_c;
                    for (std::int64_t j = 0; j < width; ++j) acc += g[j];
                }
                db[f] = static_cast<float>(acc);
            }
        }
    }
};

class ReferenceBatchNorm final : public BatchNormKernels {
public:
    void statistics(ConstView x, double* sum, double* sum_sq) override {
        for_each_row_of(
            [&](std::int64_t, std::int64_t c, std::int64_t width, const float* in) {
                for (std::int64_t j = 0; j < width; ++j) {
                    const double v = in[j];
                    sum[c] += v;
                    sum_sq[c] += v * v;
                }
            },
            x);
    }

    void forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                 View y) override {
        check_same_dims(x, y, "batchnorm forward");
        for_each_row_of(
            [&](std::int64_t, std::int64_t c, std::int64_t width, const float* in, float* out) {
                for (std::int64_t j = 0; j < width; ++j)
                    out[j] = static_cast<float>(double(gamma[c]) * (double(in[j]) - mean[c]) * inv_std[c] + beta[c]);
            },
            x, y);
    }

    void backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                             double* sum_dy_xhat) override {
        check_same_dims(x, dy, "batchnorm backward_statistics");
        for_each_row_of(
            [&](std::int64_t, std::int64_t c, std::int64_t width, const float* in, const float* gr) {
                for (std::int64_t j = 0; j < width; ++j) {
                    const double g = gr[j];
                    const double x_hat = (double(in[j]) - mean[c]) * inv_std[c];
                    sum_dy[c] += g;
                    sum_dy_xhat[c] += g * x_hat;
                }
            },
            x, dy);
    }

    void backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                  const double* sum_dy, const double* sum_dy_xhat, double count, View dx) override {
        check_same_dims(x, dy, "batchnorm backward");
        check_same_dims(x, dx, "batchnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "batchnorm backward: empty group");
        for_each_row_of(
            [&](std::int64_t, std::int64_t c, std::int64_t width, const float* in, const float* gr, float* out) {
                for (std::int64_t j = 0; j < width; ++j) {
                    const double x_hat = (double(in[j]) - mean[c]) * inv_std[c];
                    out[j] = static_cast<float>(double(gamma[c]) * inv_std[c] *
                                                (double(gr[j]) - sum_dy[c] / count - x_hat * sum_dy_xhat[c] / count));
                }
            },
            x, dy, dx);
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
        check_same_dims(x, y, "activation forward");
        for_each_row_of(
            [&](std::int64_t, std::int64_t, std::int64_t width, const float* in, float* out) {
                for (std::int64_t j = 0; j < width; ++j) out[j] = activate(f, in[j], slope);
            },
            x, y);
    }

    void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) override {
        check_same_dims(x, dy, "activation backward");
        check_same_dims(x, dx, "activation backward");
        for_each_row_of(
            [&](std::int64_t, std::int64_t, std::int64_t width, const float* in, const float* g, float* out) {
                for (std::int64_t j = 0; j < width; ++j) out[j] = activate_backward(f, in[j], g[j], slope);
            },
            x, dy, dx);
    }
};

// y(n,c,o) = the max (or mean) of x(n, c, o*s + a*d) over the taps a, found as a convolution's. Pooling
// windows honour the dilation as convolutions do (input_extent includes it); the layers the front end accepts
// pool with dilation 1, where this is the formula of kernels.hpp.
class ReferencePool final : public PoolKernels {
public:
    void forward(PoolKind kind, ConstView x, View y, const Window& win) override {
        check_pool(x.dims, y.dims, win);
        x = spatial_form(x);
        y = spatial_form(y);
        const Taps taps(win.kernel);
        const std::vector<std::int64_t> tx = taps.offsets(x.stride, win.dilation);
        const double area = double(product(win.kernel));
        const std::int64_t width = row_length(y.dims), step = last(win.stride);
        for_each_row_start(y.dims, [&](std::int64_t n, std::int64_t c, const Index& o) {
            const float* x0 = &x.at(n, c, window_start(o, win.stride));
            float* out = &y.at(n, c, o);
            for (std::int64_t j = 0; j < width; ++j) {
                const float* xo = x0 + j * step;
                if (kind == PoolKind::max) {
                    out[j] = xo[tx[first_max(xo, tx)]];
                } else {
                    double acc = 0.0;
                    for (std::size_t t = 0; t < taps.size(); ++t) acc += xo[tx[t]];
                    out[j] = static_cast<float>(acc / area);
                }
            }
        });
    }

    void backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& win) override {
        check_pool(x.dims, dy.dims, win);
        check_same_dims(x, dx, "pool backward");
        x = spatial_form(x);
        dy = spatial_form(dy);
        dx = spatial_form(dx);
        DoubleBuffer acc(dx.dims);
        const BasicView<double>& a = acc.view;
        const Taps taps(win.kernel);
        const std::vector<std::int64_t> tx = taps.offsets(x.stride, win.dilation),
                                        ta = taps.offsets(a.stride, win.dilation);
        const double area = double(product(win.kernel));
        const std::int64_t width = row_length(dy.dims), step = last(win.stride);
        for_each_row_start(dy.dims, [&](std::int64_t n, std::int64_t c, const Index& o) {
            const Index start = window_start(o, win.stride);
            const float* x0 = &x.at(n, c, start);
            double* a0 = &a.at(n, c, start);
            const float* g = &dy.at(n, c, o);
            for (std::int64_t j = 0; j < width; ++j) {
                double* ao = a0 + j * step;
                const double gj = g[j];
                if (kind == PoolKind::max) {
                    ao[ta[first_max(x0 + j * step, tx)]] += gj;
                } else {
                    for (std::size_t t = 0; t < taps.size(); ++t) ao[ta[t]] += gj / area;
                }
            }
        });
        acc.store(dx);
    }

    void global_sum(ConstView x, double* sums) override {
        x = spatial_form(x);
        const std::int64_t width = row_length(x.dims);
        for (std::int64_t n = 0; n < x.dims.n; ++n)
            for (std::int64_t c = 0; c < x.dims.c; ++c) {
                double acc = 0.0;
                for_each_row_start(x.dims.space, [&](const Index& i) {
                    const float* in = &x.at(n, c, i);
                    for (std::int64_t j = 0; j < width; ++j) acc += in[j];
                });
                sums[n * x.dims.c + c] += acc;
            }
    }

    void broadcast(const float* values, float scale, View dx) override {
        for_each_row_of([&](std::int64_t n, std::int64_t c, std::int64_t width,
                            float* out) { std::fill_n(out, width, values[n * dx.dims.c + c] * scale); },
                        dx);
    }

private:
    // The tap of the first maximum of the window at `xo`, in the taps' order: ties go to the earliest, as the
    // backward must agree with every implementation on where the gradient goes.
    static std::size_t first_max(const float* xo, const std::vector<std::int64_t>& tx) {
        std::size_t best = 0;
        float best_value = xo[tx[0]];
        for (std::size_t t = 0; t < tx.size(); ++t)
            if (xo[tx[t]] > best_value) {
                best_value = xo[tx[t]];
                best = t;
            }
        return best;
    }
};

// FC sees x as a matrix [N, C * places]: feature i of x is (c, place) in order, the last dimension fastest, so
// that a row of x holds consecutive features. y is {N, K} and w {K, I}, each of one place.
class ReferenceFc final : public FcKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y) override {
        check_fc(x.dims, w.dims, y.dims);
        x = spatial_form(x);
        w = spatial_form(w);
        y = spatial_form(y);
        const std::int64_t width = row_length(x.dims);
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t k = 0; k < y.dims.c; ++k) {
                const float* wk = &w.at(k, 0, origin(w.dims));
                double acc = bias ? bias[k] : 0.0;
                for_each_feature_row(x.dims, [&](std::int64_t i, std::int64_t c, const Index& p) {
                    const float* in = &x.at(n, c, p);
                    for (std::int64_t j = 0; j < width; ++j) acc += double(in[j]) * wk[(i + j) * w.stride_c];
                });
                y.at(n, k, origin(y.dims)) = static_cast<float>(acc);
            }
    }

    void backward_data(ConstView dy, ConstView w, View dx) override {
        check_fc(dx.dims, w.dims, dy.dims);
        dy = spatial_form(dy);
        w = spatial_form(w);
        dx = spatial_form(dx);
        const std::int64_t width = row_length(dx.dims);
        const Index y0 = origin(dy.dims), w0 = origin(w.dims);
        for (std::int64_t n = 0; n < dx.dims.n; ++n)
            for_each_feature_row(dx.dims, [&](std::int64_t i, std::int64_t c, const Index& p) {
                float* out = &dx.at(n, c, p);
                for (std::int64_t j = 0; j < width; ++j) {
                    double acc = 0.0;
                    for (std::int64_t k = 0; k < dy.dims.c; ++k) acc += double(dy.at(n, k, y0)) * w.at(k, i + j, w0);
                    out[j] = static_cast<float>(acc);
                }
            });
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db) override {
        check_fc(x.dims, dw.dims, dy.dims);
        x = spatial_form(x);
        dy = spatial_form(dy);
        dw = spatial_form(dw);
        const std::int64_t width = row_length(x.dims);
        const Index y0 = origin(dy.dims), w0 = origin(dw.dims);
        for (std::int64_t k = 0; k < dy.dims.c; ++k) {
            for_each_feature_row(x.dims, [&](std::int64_t i, std::int64_t c, const Index& p) {
                for (std::int64_t j = 0; j < width; ++j) {
                    double acc = 0.0;
                    for (std::int64_t n = 0; n < x.dims.n; ++n) acc += double(dy.at(n, k, y0)) * (&x.at(n, c, p))[j];
                    dw.at(k, i + j, w0) = static_cast<float>(acc);
                }
            });
            if (db) {
                double acc = 0.0;
                for (std::int64_t n = 0; n < dy.dims.n; ++n) acc += dy.at(n, k, y0);
                db[k] = static_cast<float>(acc);
            }
        }
    }

private:
    // Calls f(i, c, p) for every row of x's features in order: i the feature of its first element, at channel
    // c and place p.
    template <typename F>
    static void for_each_feature_row(const Dims& d, F&& f) {
        std::int64_t i = 0;
        for (std::int64_t c = 0; c < d.c; ++c)
            for_each_row_start(d.space, [&](const Index& p) {
                f(i, c, p);
                i += row_length(d);
            });
    }
};

class ReferenceEltwise final : public EltwiseKernels {
public:
    // y may be one of xs (an in-place sum): each element reads every input before it is written.
    void add(const std::vector<ConstView>& xs, View y) override {
        std::vector<ConstView> forms;
        for (const ConstView& x : xs) {
            check_same_dims(x, y, "add");
            forms.push_back(spatial_form(x));
        }
        y = spatial_form(y);
        const std::int64_t width = row_length(y.dims);
        std::vector<const float*> rows(forms.size());
        for_each_row_start(y.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            for (std::size_t k = 0; k < forms.size(); ++k) rows[k] = &forms[k].at(n, c, i);
            float* out = &y.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) {
                double acc = 0.0;
                for (const float* in : rows) acc += in[j];
                out[j] = static_cast<float>(acc);
            }
        });
    }

    void copy(ConstView x, View y) override {
        check_same_dims(x, y, "copy");
        for_each_row_of([](std::int64_t, std::int64_t, std::int64_t width, const float* in,
                           float* out) { std::copy_n(in, width, out); },
                        x, y);
    }

    void accumulate(ConstView x, View y) override {
        check_same_dims(x, y, "accumulate");
        for_each_row_of(
            [](std::int64_t, std::int64_t, std::int64_t width, const float* in, float* out) {
                for (std::int64_t j = 0; j < width; ++j) out[j] += in[j];
            },
            x, y);
    }

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

    bool unscale(const std::vector<GradientArray>& gradients, float factor) override {
        return unscale_arrays(gradients, factor);
    }
};

class ReferenceLoss final : public LossKernels {
public:
    // Over the channels at every sample and place: element k of place j of a row is at its row's start, j
    // further, and k channel strides further.
    double cross_entropy(ConstView logits, LabelView labels, float scale, View dlogits) override {
        check_labels(logits.dims, labels.dims);
        if (dlogits.base) check_same_dims(logits, dlogits, "cross_entropy");
        logits = spatial_form(logits);
        labels = spatial_form(labels);
        if (dlogits.base) dlogits = spatial_form(dlogits);
        const Dims& d = logits.dims;
        const std::int64_t width = row_length(d);
        double total = 0.0;
        std::vector<double> probabilities;
        for_each_row_start(Dims{d.n, 1, d.space}, [&](std::int64_t n, std::int64_t, const Index& i) {
            for (std::int64_t j = 0; j < width; ++j) {
                const float* in = &logits.at(n, 0, i) + j;
                auto logit = [&](std::int64_t k) { return double(in[k * logits.stride_c]); };
                const std::int32_t label = (&labels.at(n, 0, i))[j];
                check_label(label, d.c);
                // log-sum-exp shifted by the maximum, so large logits do not overflow.
                double max_logit = -std::numeric_limits<double>::infinity();
                for (std::int64_t k = 0; k < d.c; ++k) max_logit = std::max(max_logit, logit(k));
                double sum_exp = 0.0;
                for (std::int64_t k = 0; k < d.c; ++k) sum_exp += std::exp(logit(k) - max_logit);
                const double log_sum_exp = max_logit + std::log(sum_exp);
                total += log_sum_exp - logit(label);
                if (!dlogits.base) continue;
                // Every probability is read before any is written, so dlogits may be logits itself.
                probabilities.resize(static_cast<std::size_t>(d.c));
                for (std::int64_t k = 0; k < d.c; ++k) probabilities[k] = std::exp(logit(k) - log_sum_exp);
                float* out = &dlogits.at(n, 0, i) + j;
                for (std::int64_t k = 0; k < d.c; ++k)
                    out[k * dlogits.stride_c] =
                        static_cast<float>((probabilities[k] - (k == label ? 1.0 : 0.0)) * scale);
            }
        });
        return total;
    }

    double regression(frontend::Regression loss, ConstView prediction, ConstView target, float scale,
                      View dprediction) override {
        check_same_dims(prediction, target, "regression");
        if (dprediction.base) check_same_dims(prediction, dprediction, "regression");
        DSL_INTERNAL_CHECK(loss != frontend::Regression::none, "regression: not a regression loss");
        prediction = spatial_form(prediction);
        target = spatial_form(target);
        if (dprediction.base) dprediction = spatial_form(dprediction);
        const std::int64_t width = row_length(prediction.dims);
        double total = 0.0;
        for_each_row_start(prediction.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            const float* xr = &prediction.at(n, c, i);
            const float* tr = &target.at(n, c, i);
            float* out = dprediction.base ? &dprediction.at(n, c, i) : nullptr;
            for (std::int64_t j = 0; j < width; ++j) {
                const RegressionTerm<double> r = regression_term(loss, double(xr[j]), double(tr[j]));
                total += r.value;
                if (out) out[j] = static_cast<float>(r.grad * scale);
            }
        });
        return total;
    }
};

// Per sample n and group g: the statistics are indexed [n * G + g], and channel c is in group c / (C / G).
class ReferenceGroupNorm final : public GroupNormKernels {
public:
    void statistics(ConstView x, std::int64_t groups, double* sum, double* sum_sq) override {
        x = spatial_form(x);
        const std::int64_t per = per_group(x.dims, groups), width = row_length(x.dims);
        for_each_row_start(x.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            const float* in = &x.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) {
                const double v = in[j];
                sum[n * groups + c / per] += v;
                sum_sq[n * groups + c / per] += v * v;
            }
        });
    }

    void forward(ConstView x, std::int64_t groups, const float* mean, const float* inv_std, const float* gamma,
                 const float* beta, View y) override {
        check_same_dims(x, y, "groupnorm forward");
        x = spatial_form(x);
        y = spatial_form(y);
        const std::int64_t per = per_group(x.dims, groups), width = row_length(x.dims);
        for_each_row_start(x.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            const std::int64_t g = n * groups + c / per;
            const float* in = &x.at(n, c, i);
            float* out = &y.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j)
                out[j] = static_cast<float>(double(gamma[c]) * (double(in[j]) - mean[g]) * inv_std[g] + beta[c]);
        });
    }

    void backward_statistics(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                             const float* gamma, double* d_beta, double* d_gamma, double* sum_g,
                             double* sum_g_xhat) override {
        check_same_dims(x, dy, "groupnorm backward_statistics");
        x = spatial_form(x);
        dy = spatial_form(dy);
        const std::int64_t per = per_group(x.dims, groups), width = row_length(x.dims);
        for_each_row_start(x.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            const std::int64_t g = n * groups + c / per;
            const float* in = &x.at(n, c, i);
            const float* gr = &dy.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) {
                const double d = gr[j];
                const double x_hat = (double(in[j]) - mean[g]) * inv_std[g];
                d_beta[c] += d;
                d_gamma[c] += d * x_hat;
                sum_g[g] += d * gamma[c];
                sum_g_xhat[g] += d * gamma[c] * x_hat;
            }
        });
    }

    void backward(ConstView x, ConstView dy, std::int64_t groups, const float* mean, const float* inv_std,
                  const float* gamma, const double* sum_g, const double* sum_g_xhat, double count, View dx) override {
        check_same_dims(x, dy, "groupnorm backward");
        check_same_dims(x, dx, "groupnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "groupnorm backward: empty group");
        x = spatial_form(x);
        dy = spatial_form(dy);
        dx = spatial_form(dx);
        const std::int64_t per = per_group(x.dims, groups), width = row_length(x.dims);
        for_each_row_start(x.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            const std::int64_t g = n * groups + c / per;
            const float* in = &x.at(n, c, i);
            const float* gr = &dy.at(n, c, i);
            float* out = &dx.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) {
                const double x_hat = (double(in[j]) - mean[g]) * inv_std[g];
                out[j] = static_cast<float>(
                    inv_std[g] * (double(gr[j]) * gamma[c] - sum_g[g] / count - x_hat * sum_g_xhat[g] / count));
            }
        });
    }

private:
    static std::int64_t per_group(const Dims& d, std::int64_t groups) {
        DSL_INTERNAL_CHECK(groups > 0 && d.c % groups == 0, "groupnorm: channels not divisible into groups");
        return d.c / groups;
    }
};

class ReferenceDropout final : public DropoutKernels {
public:
    void forward(ConstView x, const DropoutMask& m, View y) override {
        check_same_dims(x, y, "dropout forward");
        check_place(m.at, x.dims, "dropout forward");
        apply(spatial_form(x), m, spatial_form(y));
    }

    void backward(ConstView dy, const DropoutMask& m, View dx) override {
        check_same_dims(dy, dx, "dropout backward");
        check_place(m.at, dy.dims, "dropout backward");
        apply(spatial_form(dy), m, spatial_form(dx));
    }

private:
    // The mask's place is the view's first element's: an image's row and column, a volume's depth, row and
    // column (dropout_keep's two forms).
    static void apply(ConstView x, const DropoutMask& m, View y) {
        const Index at = spatial_form(m.at);
        const std::uint32_t threshold = dropout_threshold(m.p);
        const float scale = 1.0f / (1.0f - m.p);
        const std::int64_t width = row_length(x.dims);
        for_each_row_start(x.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            const float* in = &x.at(n, c, i);
            float* out = &y.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) {
                const bool keep =
                    i.rank() == 3 ? dropout_keep(m.key, m.step, m.n0 + n, m.c0 + c, at[0] + i[0], at[1] + i[1],
                                                 at[2] + j, threshold)
                                  : dropout_keep(m.key, m.step, m.n0 + n, m.c0 + c, at[0] + i[0], at[1] + j, threshold);
                out[j] = keep ? in[j] * scale : 0.0f;
            }
        });
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

bool unscale_arrays(const std::vector<GradientArray>& gradients, float factor) {
    bool finite = true;
    for (const GradientArray& a : gradients)
        for (std::int64_t i = 0; i < a.count; ++i) {
            finite = finite && std::isfinite(a.data[i]);
            a.data[i] *= factor;
        }
    return finite;
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
    static const std::unique_ptr<ConvKernels> rounded = rounded_to(conv_instance, scheduler::Precision::bfloat16);
    k.conv_bfloat16 = rounded.get();
    return k;
}

}  // namespace dsl::backend
