// Upsampling and transposed convolution of images and volumes: the reference loops (accumulating in double),
// the CPU's upsampling and the transposed convolution through a kernel set's convolutions.
//
// The CPU's upsampling is C++ over OpenMP's threads rather than oneDNN's resampling primitive: oneDNN
// resamples whole tensors (output o from (o + 0.5) / scale - 0.5 of its own input), while a tile of a split
// starts at any output row, whose bilinear weights and sources depend on its global index.
#include "resample_kernels.hpp"
#include "../tensors/planes.hpp"
#include "double_buffer.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

namespace dsl::backend {

using scheduler::upsample_source;
using scheduler::UpsampleSource;

namespace {

// The sources of a view's outputs along one dimension, as indices into the input view.
std::vector<UpsampleSource> sources(std::int64_t first, std::int64_t count, std::int64_t x_first, const Upsample& u,
                                    std::int64_t in) {
    std::vector<UpsampleSource> out(static_cast<std::size_t>(count));
    for (std::int64_t o = 0; o < count; ++o) {
        UpsampleSource s = upsample_source(first + o, u.scale, u.linear, in);
        s.i0 -= x_first, s.i1 -= x_first;
        out[static_cast<std::size_t>(o)] = s;
    }
    return out;
}

// The sources of an output view's places along each of its spatial dimensions, as indices into the input
// view.
using Sources = std::array<std::vector<UpsampleSource>, max_space>;

Sources all_sources(const Upsample& u, const Dims& y) {
    Sources s;
    for (int d = 0; d < y.rank(); ++d) s[d] = sources(u.at.y[d], y.space[d], u.at.x[d], u, u.in[d]);
    return s;
}

// The reference works in double, on views in their spatial form (an image's or a volume's), one formula for
// both. The forward reads the 2^rank corners of output o and folds them one dimension at a time, the last
// first, into (1 - l) * the value at i0 + l * the value at i1 (bilinear's nesting, and trilinear's); the
// backward adds dy into each corner, weighed by the product of its dimensions' weights (in the dimensions'
// order), every corner even where its weight is 0. Corner k lies at i1 along dimension d where its bit
// rank - 1 - d is set (the last dimension's bit fastest); along a row, the corners of the dimensions before
// the last are rows of x (or of dx), fixed for the row.
class ReferenceUpsample final : public UpsampleKernels {
public:
    void forward(const Upsample& u, ConstView x, View y) override {
        check_upsample(u, x.dims, y.dims, "upsample forward");
        x = spatial_form(x);
        y = spatial_form(y);
        const Sources s = all_sources(u, y.dims);
        const int rank = y.dims.rank(), outer = 1 << (rank - 1);
        const std::vector<UpsampleSource>& cols = s[rank - 1];
        std::array<const float*, 1 << (max_space - 1)> rows{};
        std::array<double, 1 << max_space> v{};
        for_each_row_start(y.dims, [&](std::int64_t n, std::int64_t c, const Index& o) {
            for (int m = 0; m < outer; ++m) rows[m] = &x.at(n, c, corner_row(s, o, m));
            float* out = &y.at(n, c, o);
            for (std::int64_t j = 0; j < row_length(y.dims); ++j) {
                const UpsampleSource& q = cols[static_cast<std::size_t>(j)];
                for (int m = 0; m < outer; ++m) v[2 * m] = rows[m][q.i0], v[2 * m + 1] = rows[m][q.i1];
                for (int d = rank - 1; d >= 0; --d) {
                    const double l = d == rank - 1 ? q.lambda : s[d][static_cast<std::size_t>(o[d])].lambda;
                    for (int k = 0; k < 1 << d; ++k) v[k] = (1 - l) * v[2 * k] + l * v[2 * k + 1];
                }
                out[j] = static_cast<float>(v[0]);
            }
        });
    }

    void backward(const Upsample& u, ConstView dy, View dx) override {
        check_upsample(u, dx.dims, dy.dims, "upsample backward");
        dy = spatial_form(dy);
        dx = spatial_form(dx);
        const Sources s = all_sources(u, dy.dims);
        const int rank = dy.dims.rank(), outer = 1 << (rank - 1);
        const std::vector<UpsampleSource>& cols = s[rank - 1];
        DoubleBuffer acc(dx.dims);
        std::array<double*, 1 << (max_space - 1)> rows{};
        std::array<double, 1 << (max_space - 1)> weights{};  // of the dimensions before the last
        for_each_row_start(dy.dims, [&](std::int64_t n, std::int64_t c, const Index& o) {
            for (int m = 0; m < outer; ++m) {
                rows[m] = &acc.view.at(n, c, corner_row(s, o, m));
                for (int d = 0; d < rank - 1; ++d) {
                    const double l = s[d][static_cast<std::size_t>(o[d])].lambda;
                    const double w = (m >> (rank - 2 - d)) & 1 ? l : 1 - l;
                    weights[m] = d == 0 ? w : weights[m] * w;
                }
            }
            const float* g = &dy.at(n, c, o);
            for (std::int64_t j = 0; j < row_length(dy.dims); ++j) {
                const UpsampleSource& q = cols[static_cast<std::size_t>(j)];
                const double l = q.lambda;
                for (int m = 0; m < outer; ++m) {
                    rows[m][q.i0] += weights[m] * (1 - l) * g[j];
                    rows[m][q.i1] += weights[m] * l * g[j];
                }
            }
        });
        acc.store(dx);
    }

private:
    // The first place of the row of corner m of the dimensions before the last (its bit rank - 2 - d set: at
    // i1 along d), for the row of outputs at o.
    static Index corner_row(const Sources& s, const Index& o, int m) {
        const int rank = o.rank();
        Index i = Index::filled(rank, 0);
        for (int d = 0; d < rank - 1; ++d) {
            const UpsampleSource& q = s[d][static_cast<std::size_t>(o[d])];
            i[d] = (m >> (rank - 2 - d)) & 1 ? q.i1 : q.i0;
        }
        return i;
    }
};

// Input place i of x's view adds into output place (at.x + i)*s - p + a - at.y of y's view through tap a,
// along each dimension. By rows: the output row (the dimensions before the last; false when outside y's
// `extent`) of input row i through a tap of those dimensions a, and the output column of input column j
// through the last dimension's tap b. Of an output and an input row, at most one tap of the dimensions before
// the last joins them, so the loops may take those taps outside the columns.
bool deconv_row(const Deconv& d, const Index& i, const Index& a, const Index& extent, Index& o) {
    o = Index::filled(i.rank(), 0);
    for (int k = 0; k + 1 < i.rank(); ++k) {
        o[k] = (d.at.x[k] + i[k]) * d.stride[k] - d.pad[k] + a[k] - d.at.y[k];
        if (o[k] < 0 || o[k] >= extent[k]) return false;
    }
    return true;
}

std::int64_t deconv_column(const Deconv& d, std::int64_t j, std::int64_t b) {
    const int k = d.kernel.rank() - 1;
    return (d.at.x[k] + j) * d.stride[k] - d.pad[k] + b - d.at.y[k];
}

// The reference works in double, on views in their spatial form; w is {C, F, kernel}. Every loop visits
// an element's terms in the formula's order: inputs (or outputs) and then taps, with the last dimension
// fastest.
class ReferenceDeconv final : public DeconvKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y, const Deconv& d) override {
        check_deconv(x.dims, w.dims, y.dims, d, "deconv forward");
        x = spatial_form(x);
        w = spatial_form(w);
        y = spatial_form(y);
        const std::vector<Index> row_taps = window_taps(rows_of(d.kernel));
        const std::int64_t width = row_length(x.dims), out_width = row_length(y.dims), kb = last(d.kernel);
        DoubleBuffer acc(y.dims);
        for_each_row_start(y.dims, [&](std::int64_t n, std::int64_t f, const Index& o) {
            std::fill_n(&acc.view.at(n, f, o), out_width, bias ? bias[f] : 0.0);
        });
        Index o;
        for (std::int64_t n = 0; n < y.dims.n; ++n)
            for (std::int64_t f = 0; f < y.dims.c; ++f)
                for_each_row_start(Dims{1, x.dims.c, x.dims.space}, [&](std::int64_t, std::int64_t c, const Index& i) {
                    const float* in = &x.at(n, c, i);
                    for (const Index& a : row_taps) {
                        if (!deconv_row(d, i, a, y.dims.space, o)) continue;
                        double* out = &acc.view.at(n, f, o);
                        const float* wa = &w.at(c, f, a);
                        for (std::int64_t j = 0; j < width; ++j)
                            for (std::int64_t b = 0; b < kb; ++b) {
                                const std::int64_t p = deconv_column(d, j, b);
                                if (p >= 0 && p < out_width) out[p] += double(in[j]) * wa[b];
                            }
                    }
                });
        acc.store(y);
    }

    void backward_data(ConstView dy, ConstView w, View dx, const Deconv& d) override {
        check_deconv(dx.dims, w.dims, dy.dims, d, "deconv backward_data");
        dy = spatial_form(dy);
        w = spatial_form(w);
        dx = spatial_form(dx);
        const std::vector<Index> row_taps = window_taps(rows_of(d.kernel));
        const std::int64_t width = row_length(dx.dims), out_width = row_length(dy.dims), kb = last(d.kernel);
        Index o;
        std::vector<const float*> rows(row_taps.size());  // of dy's channel 0, or null where outside
        for_each_row_start(dx.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            for (std::size_t t = 0; t < row_taps.size(); ++t)
                rows[t] = deconv_row(d, i, row_taps[t], dy.dims.space, o) ? &dy.at(n, 0, o) : nullptr;
            float* out = &dx.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) {
                double acc = 0.0;
                for (std::int64_t f = 0; f < dy.dims.c; ++f)
                    for (std::size_t t = 0; t < row_taps.size(); ++t) {
                        if (!rows[t]) continue;
                        const float* wa = &w.at(c, f, row_taps[t]);
                        for (std::int64_t b = 0; b < kb; ++b) {
                            const std::int64_t p = deconv_column(d, j, b);
                            if (p >= 0 && p < out_width) acc += double(rows[t][f * dy.stride_c + p]) * wa[b];
                        }
                    }
                out[j] = static_cast<float>(acc);
            }
        });
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Deconv& d) override {
        check_deconv(x.dims, dw.dims, dy.dims, d, "deconv backward_weights");
        x = spatial_form(x);
        dy = spatial_form(dy);
        dw = spatial_form(dw);
        const std::vector<Index> row_taps = window_taps(rows_of(d.kernel));
        const std::int64_t width = row_length(x.dims), out_width = row_length(dy.dims), kb = last(d.kernel);
        Index o;
        for (std::int64_t c = 0; c < dw.dims.n; ++c)
            for (std::int64_t f = 0; f < dw.dims.c; ++f)
                for (const Index& a : row_taps)
                    for (std::int64_t b = 0; b < kb; ++b) {
                        double acc = 0.0;
                        for_each_row_start(Dims{x.dims.n, 1, x.dims.space},
                                           [&](std::int64_t n, std::int64_t, const Index& i) {
                                               if (!deconv_row(d, i, a, dy.dims.space, o)) return;
                                               const float* in = &x.at(n, c, i);
                                               const float* g = &dy.at(n, f, o);
                                               for (std::int64_t j = 0; j < width; ++j) {
                                                   const std::int64_t p = deconv_column(d, j, b);
                                                   if (p >= 0 && p < out_width) acc += double(in[j]) * g[p];
                                               }
                                           });
                        (&dw.at(c, f, a))[b] = static_cast<float>(acc);
                    }
        if (!db) return;
        for (std::int64_t f = 0; f < dy.dims.c; ++f) {
            double acc = 0.0;
            for_each_row_start(Dims{dy.dims.n, 1, dy.dims.space}, [&](std::int64_t n, std::int64_t, const Index& p) {
                const float* g = &dy.at(n, f, p);
                for (std::int64_t j = 0; j < out_width; ++j) acc += g[j];
            });
            db[f] = static_cast<float>(acc);
        }
    }

private:
    // The kernel's taps of the dimensions before the last (its last extent 1).
    static Index rows_of(Index kernel) {
        kernel[kernel.rank() - 1] = 1;
        return kernel;
    }
    static std::int64_t last(const Index& i) { return i[i.rank() - 1]; }
};

// The CPU's: the reference's arithmetic in float, on views in their spatial form. An image is one slice of
// rows; a volume's output slice blends two input slices along depth, each interpolated as an image's (so that
// an image's results are the bilinear loops' of old). The forward runs slices over threads; the backward runs
// planes (or volumes) over threads, each scattering into its own, so that threads never write the same
// element.
class CpuUpsample final : public UpsampleKernels {
public:
    void forward(const Upsample& u, ConstView x, View y) override {
        check_upsample(u, x.dims, y.dims, "upsample forward");
        x = spatial_form(x);
        y = spatial_form(y);
        const int rank = y.dims.rank();
        const Sources s = all_sources(u, y.dims);
        const std::vector<UpsampleSource>&rows = s[rank - 2], &cols = s[rank - 1];
        const std::int64_t h = y.dims.space[rank - 2], w = y.dims.space[rank - 1];
        const std::int64_t slices = y.dims.n * y.dims.c * depth(y.dims);
#pragma omp parallel for schedule(static)
        for (std::int64_t slice = 0; slice < slices; ++slice) {
            const std::int64_t z = slice % depth(y.dims), plane = slice / depth(y.dims);
            const std::int64_t n = plane / y.dims.c, c = plane % y.dims.c;
            for (std::int64_t o = 0; o < h; ++o) {
                const UpsampleSource& r = rows[static_cast<std::size_t>(o)];
                const float ly = r.lambda, hy = 1.0f - ly;
                // Output column p between rows x0 and x1 of one input slice.
                auto bilinear = [&](const float* x0, const float* x1, std::int64_t p) {
                    const UpsampleSource& q = cols[static_cast<std::size_t>(p)];
                    const float lx = q.lambda, hx = 1.0f - lx;
                    return hy * (hx * x0[q.i0] + lx * x0[q.i1]) + ly * (hx * x1[q.i0] + lx * x1[q.i1]);
                };
                float* out = row(y, n, c, z, o);
                if (rank == 2) {
                    const float *x0 = row(x, n, c, 0, r.i0), *x1 = row(x, n, c, 0, r.i1);
                    for (std::int64_t p = 0; p < w; ++p) out[p] = bilinear(x0, x1, p);
                } else {
                    const UpsampleSource& q = s[0][static_cast<std::size_t>(z)];
                    const float lz = q.lambda, hz = 1.0f - lz;
                    const float *x00 = row(x, n, c, q.i0, r.i0), *x01 = row(x, n, c, q.i0, r.i1);
                    const float *x10 = row(x, n, c, q.i1, r.i0), *x11 = row(x, n, c, q.i1, r.i1);
                    for (std::int64_t p = 0; p < w; ++p)
                        out[p] = hz * bilinear(x00, x01, p) + lz * bilinear(x10, x11, p);
                }
            }
        }
    }

    void backward(const Upsample& u, ConstView dy, View dx) override {
        check_upsample(u, dx.dims, dy.dims, "upsample backward");
        dy = spatial_form(dy);
        dx = spatial_form(dx);
        const int rank = dy.dims.rank();
        const Sources s = all_sources(u, dy.dims);
        const std::vector<UpsampleSource>&rows = s[rank - 2], &cols = s[rank - 1];
        const std::int64_t h = dy.dims.space[rank - 2], w = dy.dims.space[rank - 1];
        const std::int64_t in_h = dx.dims.space[rank - 2], in_w = dx.dims.space[rank - 1];
        const std::int64_t planes = dx.dims.n * dx.dims.c;
#pragma omp parallel for schedule(static)
        for (std::int64_t plane = 0; plane < planes; ++plane) {
            const std::int64_t n = plane / dx.dims.c, c = plane % dx.dims.c;
            for (std::int64_t z = 0; z < depth(dx.dims); ++z)
                for (std::int64_t i = 0; i < in_h; ++i) std::fill_n(row(dx, n, c, z, i), in_w, 0.0f);
            for (std::int64_t z = 0; z < depth(dy.dims); ++z)
                for (std::int64_t o = 0; o < h; ++o) {
                    const UpsampleSource& r = rows[static_cast<std::size_t>(o)];
                    const float* g = row(dy, n, c, z, o);
                    const float ly = r.lambda, hy = 1.0f - ly;
                    // Output row g into rows d0 and d1 of one input slice, weighed by w0 and w1 along the rows
                    // and the slices.
                    auto scatter = [&](float* d0, float* d1, float w0, float w1) {
                        for (std::int64_t p = 0; p < w; ++p) {
                            const UpsampleSource& q = cols[static_cast<std::size_t>(p)];
                            const float lx = q.lambda, hx = 1.0f - lx;
                            d0[q.i0] += w0 * hx * g[p];
                            d0[q.i1] += w0 * lx * g[p];
                            d1[q.i0] += w1 * hx * g[p];
                            d1[q.i1] += w1 * lx * g[p];
                        }
                    };
                    if (rank == 2) {
                        scatter(row(dx, n, c, 0, r.i0), row(dx, n, c, 0, r.i1), hy, ly);
                    } else {
                        const UpsampleSource& q = s[0][static_cast<std::size_t>(z)];
                        const float lz = q.lambda, hz = 1.0f - lz;
                        scatter(row(dx, n, c, q.i0, r.i0), row(dx, n, c, q.i0, r.i1), hz * hy, hz * ly);
                        scatter(row(dx, n, c, q.i1, r.i0), row(dx, n, c, q.i1, r.i1), lz * hy, lz * ly);
                    }
                }
        }
    }

private:
    // Row i of slice z of (n, c): the depth z is ignored in an image.
    template <typename T>
    static T* row(const BasicView<T>& v, std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t i) {
        return &v.at(n, c, v.dims.rank() == 3 ? Index{z, i, 0} : Index{i, 0});
    }
    static std::int64_t depth(const Dims& d) { return d.rank() == 3 ? d.space[0] : 1; }
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
    w.dilation = Index::filled(d.kernel.rank(), 1);
    return w;
}

class DeconvOverConv final : public DeconvKernels {
public:
    DeconvOverConv(ConvKernels& conv, PoolKernels& pool, EltwiseKernels& eltwise, Memory& memory)
        : conv_(conv), pool_(pool), eltwise_(eltwise), mem_(memory), scratch_(memory) {}

    void forward(ConstView x, ConstView w, const float* bias, View y, const Deconv& d) override {
        check_deconv(x.dims, w.dims, y.dims, d, "deconv forward");
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
        check_deconv(dx.dims, w.dims, dy.dims, d, "deconv backward_data");
        if (dx.dims.elements() == 0) return;
        const View g = gradient_span(dy, d, dx.dims);
        conv_.forward(g, w, nullptr, dx, conv_window(d));
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Deconv& d) override {
        check_deconv(x.dims, dw.dims, dy.dims, d, "deconv backward_weights");
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
