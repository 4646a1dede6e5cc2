// Upsampling and transposed convolution: the reference loops (accumulating in double), the CPU's upsampling
// and the transposed convolution through a kernel set's convolutions.
//
// The CPU's upsampling is C++ over OpenMP's threads rather than oneDNN's resampling primitive: oneDNN
// resamples whole tensors (output o from (o + 0.5) / scale - 0.5 of its own input), while a tile of a split
// starts at any output row, whose bilinear weights and sources depend on its global index.
#include "resample_kernels.hpp"
#include "planes.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <optional>
#include <vector>

namespace dsl::backend {

using scheduler::upsample_source;
using scheduler::UpsampleSource;

namespace {

// The sources of a view's outputs along one dimension, as indices into the input view.
std::vector<UpsampleSource> sources(std::int64_t first, std::int64_t count, std::int64_t x_first,
                                    const Upsample& u, std::int64_t in) {
    std::vector<UpsampleSource> out(static_cast<std::size_t>(count));
    for (std::int64_t o = 0; o < count; ++o) {
        UpsampleSource s = upsample_source(first + o, u.scale, u.bilinear, in);
        s.i0 -= x_first, s.i1 -= x_first;
        out[static_cast<std::size_t>(o)] = s;
    }
    return out;
}

class ReferenceUpsample final : public UpsampleKernels {
public:
    void forward(const Upsample& u, ConstView x, View y) override { forward(u, planes(x), planes(y)); }
    void backward(const Upsample& u, ConstView dy, View dx) override { backward(u, planes(dy), planes(dx)); }

private:
    static void forward(const Upsample& u, ConstPlanes x, Planes y) {
        check_upsample(u, x.dims, y.dims, "upsample forward");
        const auto rows = sources(u.at.y[0], y.dims.h, u.at.x[0], u, u.in[0]);
        const auto cols = sources(u.at.y[1], y.dims.w, u.at.x[1], u, u.in[1]);
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t c = 0; c < y.dims.c; ++c)
                for (std::int64_t o = 0; o < y.dims.h; ++o)
                    for (std::int64_t p = 0; p < y.dims.w; ++p) {
                        const UpsampleSource& r = rows[static_cast<std::size_t>(o)];
                        const UpsampleSource& q = cols[static_cast<std::size_t>(p)];
                        const double ly = r.lambda, lx = q.lambda;
                        y.at(n, c, o, p) = static_cast<float>(
                            (1 - ly) * ((1 - lx) * x.at(n, c, r.i0, q.i0) + lx * x.at(n, c, r.i0, q.i1)) +
                            ly * ((1 - lx) * x.at(n, c, r.i1, q.i0) + lx * x.at(n, c, r.i1, q.i1)));
                    }
    }

    static void backward(const Upsample& u, ConstPlanes dy, Planes dx) {
        check_upsample(u, dx.dims, dy.dims, "upsample backward");
        const auto rows = sources(u.at.y[0], dy.dims.h, u.at.x[0], u, u.in[0]);
        const auto cols = sources(u.at.y[1], dy.dims.w, u.at.x[1], u, u.in[1]);
        std::vector<double> acc;
        for (std::int64_t n = 0; n < dy.dims.n; ++n)
            for (std::int64_t c = 0; c < dy.dims.c; ++c) {
                acc.assign(static_cast<std::size_t>(dx.dims.h * dx.dims.w), 0.0);
                auto at = [&](std::int64_t i, std::int64_t j) -> double& {
                    return acc[static_cast<std::size_t>(i * dx.dims.w + j)];
                };
                for (std::int64_t o = 0; o < dy.dims.h; ++o)
                    for (std::int64_t p = 0; p < dy.dims.w; ++p) {
                        const UpsampleSource& r = rows[static_cast<std::size_t>(o)];
                        const UpsampleSource& q = cols[static_cast<std::size_t>(p)];
                        const double g = dy.at(n, c, o, p), ly = r.lambda, lx = q.lambda;
                        at(r.i0, q.i0) += (1 - ly) * (1 - lx) * g;
                        at(r.i0, q.i1) += (1 - ly) * lx * g;
                        at(r.i1, q.i0) += ly * (1 - lx) * g;
                        at(r.i1, q.i1) += ly * lx * g;
                    }
                for (std::int64_t i = 0; i < dx.dims.h; ++i)
                    for (std::int64_t j = 0; j < dx.dims.w; ++j) dx.at(n, c, i, j) = static_cast<float>(at(i, j));
            }
    }
};

// The output (o, p) that input (i, j) adds into through tap (a, b), in the output view's indices.
struct Taps {
    const Deconv& d;
    std::int64_t out_row(std::int64_t i, std::int64_t a) const {
        return (d.at.x[0] + i) * d.stride[0] - d.pad[0] + a - d.at.y[0];
    }
    std::int64_t out_col(std::int64_t j, std::int64_t b) const {
        return (d.at.x[1] + j) * d.stride[1] - d.pad[1] + b - d.at.y[1];
    }
};

class ReferenceDeconv final : public DeconvKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y, const Deconv& d) override {
        forward(planes(x), planes(w), bias, planes(y), d);
    }
    void backward_data(ConstView dy, ConstView w, View dx, const Deconv& d) override {
        backward_data(planes(dy), planes(w), planes(dx), d);
    }
    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Deconv& d) override {
        backward_weights(planes(x), planes(dy), planes(dw), db, d);
    }

private:
    static void forward(ConstPlanes x, ConstPlanes w, const float* bias, Planes y, const Deconv& d) {
        check_deconv(x.dims, w.dims, y.dims, d, "deconv forward");
        const Taps t{d};
        std::vector<double> acc;
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t f = 0; f < y.dims.c; ++f) {
                acc.assign(static_cast<std::size_t>(y.dims.h * y.dims.w), bias ? bias[f] : 0.0);
                for (std::int64_t c = 0; c < x.dims.c; ++c)
                    for (std::int64_t i = 0; i < x.dims.h; ++i)
                        for (std::int64_t j = 0; j < x.dims.w; ++j)
                            for (std::int64_t a = 0; a < d.kernel[0]; ++a)
                                for (std::int64_t b = 0; b < d.kernel[1]; ++b) {
                                    const std::int64_t o = t.out_row(i, a), p = t.out_col(j, b);
                                    if (o < 0 || o >= y.dims.h || p < 0 || p >= y.dims.w) continue;
                                    acc[static_cast<std::size_t>(o * y.dims.w + p)] +=
                                        double(x.at(n, c, i, j)) * w.at(c, f, a, b);
                                }
                for (std::int64_t o = 0; o < y.dims.h; ++o)
                    for (std::int64_t p = 0; p < y.dims.w; ++p)
                        y.at(n, f, o, p) = static_cast<float>(acc[static_cast<std::size_t>(o * y.dims.w + p)]);
            }
    }

    static void backward_data(ConstPlanes dy, ConstPlanes w, Planes dx, const Deconv& d) {
        check_deconv(dx.dims, w.dims, dy.dims, d, "deconv backward_data");
        const Taps t{d};
        for (std::int64_t n = 0; n < dx.dims.n; ++n)
            for (std::int64_t c = 0; c < dx.dims.c; ++c)
                for (std::int64_t i = 0; i < dx.dims.h; ++i)
                    for (std::int64_t j = 0; j < dx.dims.w; ++j) {
                        double acc = 0.0;
                        for (std::int64_t f = 0; f < dy.dims.c; ++f)
                            for (std::int64_t a = 0; a < d.kernel[0]; ++a)
                                for (std::int64_t b = 0; b < d.kernel[1]; ++b) {
                                    const std::int64_t o = t.out_row(i, a), p = t.out_col(j, b);
                                    if (o < 0 || o >= dy.dims.h || p < 0 || p >= dy.dims.w) continue;
                                    acc += double(dy.at(n, f, o, p)) * w.at(c, f, a, b);
                                }
                        dx.at(n, c, i, j) = static_cast<float>(acc);
                    }
    }

    static void backward_weights(ConstPlanes x, ConstPlanes dy, Planes dw, float* db, const Deconv& d) {
        check_deconv(x.dims, dw.dims, dy.dims, d, "deconv backward_weights");
        const Taps t{d};
        for (std::int64_t c = 0; c < dw.dims.n; ++c)
            for (std::int64_t f = 0; f < dw.dims.c; ++f)
                for (std::int64_t a = 0; a < d.kernel[0]; ++a)
                    for (std::int64_t b = 0; b < d.kernel[1]; ++b) {
                        double acc = 0.0;
                        for (std::int64_t n = 0; n < x.dims.n; ++n)
                            for (std::int64_t i = 0; i < x.dims.h; ++i)
                                for (std::int64_t j = 0; j < x.dims.w; ++j) {
                                    const std::int64_t o = t.out_row(i, a), p = t.out_col(j, b);
                                    if (o < 0 || o >= dy.dims.h || p < 0 || p >= dy.dims.w) continue;
                                    acc += double(x.at(n, c, i, j)) * dy.at(n, f, o, p);
                                }
                        dw.at(c, f, a, b) = static_cast<float>(acc);
                    }
        if (!db) return;
        for (std::int64_t f = 0; f < dy.dims.c; ++f) {
            double acc = 0.0;
            for (std::int64_t n = 0; n < dy.dims.n; ++n)
                for (std::int64_t o = 0; o < dy.dims.h; ++o)
                    for (std::int64_t p = 0; p < dy.dims.w; ++p) acc += dy.at(n, f, o, p);
            db[f] = static_cast<float>(acc);
        }
    }
};

// The CPU's: the reference's arithmetic in float, planes over threads; the backward gathers per input row
// (the outputs that read row i are a short contiguous run) so that threads never write the same element.
class CpuUpsample final : public UpsampleKernels {
public:
    void forward(const Upsample& u, ConstView x, View y) override { forward(u, planes(x), planes(y)); }
    void backward(const Upsample& u, ConstView dy, View dx) override { backward(u, planes(dy), planes(dx)); }

private:
    static void forward(const Upsample& u, ConstPlanes x, Planes y) {
        check_upsample(u, x.dims, y.dims, "upsample forward");
        const auto rows = sources(u.at.y[0], y.dims.h, u.at.x[0], u, u.in[0]);
        const auto cols = sources(u.at.y[1], y.dims.w, u.at.x[1], u, u.in[1]);
        const std::int64_t planes = y.dims.n * y.dims.c;
#pragma omp parallel for schedule(static)
        for (std::int64_t plane = 0; plane < planes; ++plane) {
            const std::int64_t n = plane / y.dims.c, c = plane % y.dims.c;
            for (std::int64_t o = 0; o < y.dims.h; ++o) {
                const UpsampleSource& r = rows[static_cast<std::size_t>(o)];
                const float* x0 = &x.at(n, c, r.i0, 0);
                const float* x1 = &x.at(n, c, r.i1, 0);
                float* out = &y.at(n, c, o, 0);
                const float ly = r.lambda, hy = 1.0f - ly;
                for (std::int64_t p = 0; p < y.dims.w; ++p) {
                    const UpsampleSource& q = cols[static_cast<std::size_t>(p)];
                    const float lx = q.lambda, hx = 1.0f - lx;
                    out[p] = hy * (hx * x0[q.i0] + lx * x0[q.i1]) + ly * (hx * x1[q.i0] + lx * x1[q.i1]);
                }
            }
        }
    }

    static void backward(const Upsample& u, ConstPlanes dy, Planes dx) {
        check_upsample(u, dx.dims, dy.dims, "upsample backward");
        const auto rows = sources(u.at.y[0], dy.dims.h, u.at.x[0], u, u.in[0]);
        const auto cols = sources(u.at.y[1], dy.dims.w, u.at.x[1], u, u.in[1]);
        const std::int64_t planes = dx.dims.n * dx.dims.c;
#pragma omp parallel
        {
#pragma omp for schedule(static)
            for (std::int64_t plane = 0; plane < planes; ++plane) {
                const std::int64_t n = plane / dx.dims.c, c = plane % dx.dims.c;
                for (std::int64_t i = 0; i < dx.dims.h; ++i) std::fill_n(&dx.at(n, c, i, 0), dx.dims.w, 0.0f);
                for (std::int64_t o = 0; o < dy.dims.h; ++o) {
                    const UpsampleSource& r = rows[static_cast<std::size_t>(o)];
                    const float* g = &dy.at(n, c, o, 0);
                    float* d0 = &dx.at(n, c, r.i0, 0);
                    float* d1 = &dx.at(n, c, r.i1, 0);
                    const float ly = r.lambda, hy = 1.0f - ly;
                    for (std::int64_t p = 0; p < dy.dims.w; ++p) {
                        const UpsampleSource& q = cols[static_cast<std::size_t>(p)];
                        const float lx = q.lambda, hx = 1.0f - lx;
                        d0[q.i0] += hy * hx * g[p];
                        d0[q.i1] += hy * lx * g[p];
                        d1[q.i0] += ly * hx * g[p];
                        d1[q.i1] += ly * lx * g[p];
                    }
                }
            }
        }
    }
};

// The transposed convolution's outputs that its input view adds into: `d` from global place `first` (along
// each spatial dimension, [first, first + extent)), the conv's input whose backward data it is.
struct Span {
    Index first;
    Dims d;
};

Span spread(const Deconv& d, const Dims& x, std::int64_t channels) {
    Span s{Index::filled(x.rank(), 0), Dims{x.n, channels, x.space}};
    for (int k = 0; k < x.rank(); ++k) {
        s.first[k] = d.at.x[k] * d.stride[k] - d.pad[k];
        s.d.space[k] = scheduler::window_extent(x.space[k], d.kernel[k], d.stride[k], 1);
    }
    return s;
}

// Where span `s` meets a view of `v` whose first element is at global place `at`: the place of the common
// part's first element in the span and in the view, and its dims; none when they do not meet.
struct Overlap {
    Index in_span, in_view;
    Dims d;
};

std::optional<Overlap> overlap(const Span& s, const Index& at, const Dims& v) {
    Overlap o{Index::filled(v.rank(), 0), Index::filled(v.rank(), 0), v};
    for (int k = 0; k < v.rank(); ++k) {
        const Range r = Range{s.first[k], s.first[k] + s.d.space[k]}.meet(Range{at[k], at[k] + v.space[k]});
        if (r.empty()) return std::nullopt;
        o.in_span[k] = r.lo - s.first[k];
        o.in_view[k] = r.lo - at[k];
        o.d.space[k] = r.size();
    }
    return o;
}

Window conv_window(const Deconv& d) {
    Window w;
    w.kernel = d.kernel;
    w.stride = d.stride;
    return w;
}

class DeconvOverConv final : public DeconvKernels {
public:
    DeconvOverConv(ConvKernels& conv, PoolKernels& pool, EltwiseKernels& eltwise, Memory& memory)
        : conv_(conv), pool_(pool), eltwise_(eltwise), mem_(memory), scratch_(memory) {}

    void forward(ConstView x, ConstView w, const float* bias, View y, const Deconv& d) override {
        check_deconv(planes(x.dims), planes(w.dims), planes(y.dims), d, "deconv forward");
        if (y.dims.elements() == 0) return;
        if (bias) {
            bias_.resize(static_cast<std::size_t>(y.dims.c));
            mem_.download(bias, bias_.data(), y.dims.c);
            values_.resize(static_cast<std::size_t>(y.dims.n * y.dims.c));
            for (std::int64_t n = 0; n < y.dims.n; ++n)
                std::copy(bias_.begin(), bias_.end(), values_.begin() + n * y.dims.c);
            pool_.broadcast(values_.data(), 1.0f, y);
        } else {
            mem_.fill(y, 0.0f);
        }
        if (x.dims.elements() == 0) return;
        // The conv's backward data spreads x over its whole span; the part within y is added to the bias.
        const Span s = spread(d, x.dims, y.dims.c);
        const View spread_view = dense_view(scratch_.reserve(s.d.elements()), s.d);
        conv_.backward_data(x, w, spread_view, conv_window(d));
        const std::optional<Overlap> o = overlap(s, d.at.y, y.dims);
        if (!o) return;
        eltwise_.accumulate(spread_view.sub(0, 0, o->in_span, o->d), y.sub(0, 0, o->in_view, o->d));
    }

    void backward_data(ConstView dy, ConstView w, View dx, const Deconv& d) override {
        check_deconv(planes(dx.dims), planes(w.dims), planes(dy.dims), d, "deconv backward_data");
        if (dx.dims.elements() == 0) return;
        const View g = gradient_span(dy, d, dx.dims);
        conv_.forward(g, w, nullptr, dx, conv_window(d));
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Deconv& d) override {
        check_deconv(planes(x.dims), planes(dw.dims), planes(dy.dims), d, "deconv backward_weights");
        if (x.dims.elements() == 0 || dy.dims.elements() == 0)
            mem_.fill(dw, 0.0f);
        else
            conv_.backward_weights(gradient_span(dy, d, x.dims), x, dw, nullptr, conv_window(d));
        if (!db) return;
        sums_.assign(static_cast<std::size_t>(dy.dims.n * dy.dims.c), 0.0);
        if (dy.dims.elements() > 0) pool_.global_sum(dy, sums_.data());
        bias_.assign(static_cast<std::size_t>(dy.dims.c), 0.0f);
        for (std::int64_t f = 0; f < dy.dims.c; ++f) {
            double acc = 0.0;
            for (std::int64_t n = 0; n < dy.dims.n; ++n) acc += sums_[static_cast<std::size_t>(n * dy.dims.c + f)];
            bias_[static_cast<std::size_t>(f)] = static_cast<float>(acc);
        }
        mem_.upload(bias_.data(), db, dy.dims.c);
    }

private:
    // dy over the whole span that x's view adds into, zero where dy's view does not reach: what the conv
    // reads as its input.
    View gradient_span(ConstView dy, const Deconv& d, const Dims& x) {
        const Span s = spread(d, x, dy.dims.c);
        const View g = dense_view(scratch_.reserve(s.d.elements()), s.d);
        mem_.fill(g, 0.0f);
        if (const std::optional<Overlap> o = overlap(s, d.at.y, dy.dims))
            eltwise_.copy(dy.sub(0, 0, o->in_view, o->d), g.sub(0, 0, o->in_span, o->d));
        return g;
    }

    ConvKernels& conv_;
    PoolKernels& pool_;
    EltwiseKernels& eltwise_;
    Memory& mem_;
    Buffer scratch_;
    std::vector<float> bias_, values_;
    std::vector<double> sums_;
};

}  // namespace

UpsampleKernels& reference_upsample() {
    static ReferenceUpsample instance;
    return instance;
}

DeconvKernels& reference_deconv() {
    static ReferenceDeconv instance;
    return instance;
}

UpsampleKernels& cpu_upsample() {
    static CpuUpsample instance;
    return instance;
}

std::unique_ptr<DeconvKernels> deconv_over_conv(ConvKernels& conv, PoolKernels& pool, EltwiseKernels& eltwise,
                                                Memory& memory) {
    return std::make_unique<DeconvOverConv>(conv, pool, eltwise, memory);
}

}  // namespace dsl::backend
