// Max and average pooling over blocked views (view.hpp: channels in blocks of 16, one AVX-512 vector a place),
// of images and volumes, in the arithmetic of the Halide pipelines (backend/halide/generators.cpp: PoolForward,
// PoolBackward and their volumes'), so bit for bit their values: a window scans its taps with the last
// dimension fastest; the average sums in double and divides once; backward gathers, for each input element,
// what the windows that contain it send (in increasing output order, summed in double), max sending dy to the
// first maximum of its window. A blocked tile has no margins at the tensor's border (layouts.cpp): the window
// says how many places lie outside it there (Window::zeros_outside), and these kernels pad in their place
// (-infinity for max, zero for the average, still counted in its divisor as PyTorch's count_include_pad).
// Built with -ffp-contract=off, as blocked_kernels.cpp.
#include "avx512_clone.hpp"
#include "blocked_kernels.hpp"
#include "kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace dsl::backend::blocked {
namespace {

constexpr std::int64_t L = blocked_lanes;
constexpr int R = 3;  // spatial dimensions at most; an image's are the last two, the first of extent 1

// A pooling's geometry along three dimensions: a view's strides, and the window's extents, with the places
// of the input that lie outside its view before each dimension's first (`before`).
struct Geometry {
    std::int64_t in[R], out[R], kernel[R], stride[R], before[R];
    std::int64_t taps = 1, blocks = 0, samples = 0;
};

struct Strides {
    std::int64_t n, block, at[R];
};

template <typename T>
Strides strides_of(const BasicView<T>& v) {
    Strides s{v.stride_n, v.stride_c, {0, 0, 0}};
    const int lead = R - v.dims.rank();
    for (int d = 0; d < v.dims.rank(); ++d) s.at[lead + d] = v.stride[d];
    return s;
}

Geometry geometry(const Dims& x, const Dims& y, const Window& w, const char* what) {
    const int rank = x.rank(), lead = R - rank;
    DSL_INTERNAL_CHECK(rank >= 1 && rank <= R && y.rank() == rank, std::string(what) + ": rank of the views");
    DSL_INTERNAL_CHECK(x.n == y.n && x.c == y.c && x.c % L == 0,
                       std::string(what) + ": " + dims_text(x) + " and " + dims_text(y));
    Geometry g;
    g.blocks = x.c / L, g.samples = x.n;
    for (int d = 0; d < R; ++d) {
        const int k = d - lead;
        const bool here = k >= 0;
        g.in[d] = here ? x.space[k] : 1;
        g.out[d] = here ? y.space[k] : 1;
        g.kernel[d] = here ? w.kernel[k] : 1;
        g.stride[d] = here ? w.stride[k] : 1;
        DSL_INTERNAL_CHECK(!here || w.dilation[k] == 1, std::string(what) + ": dilation is not supported");
        g.taps *= g.kernel[d];
        g.before[d] = 0;
        if (!here) continue;
        const bool outside = w.zeros_outside && w.zeros.rank() == rank;
        g.before[d] = outside ? w.zeros[k].before : 0;
        const std::int64_t after = outside ? w.zeros[k].after : 0;
        // The view and what lies outside it are the input the outputs' windows read.
        DSL_INTERNAL_CHECK(g.out[d] == 0 || g.before[d] + g.in[d] + after == w.input_extent(k, g.out[d]),
                           std::string(what) + ": the input " + dims_text(x) + " for the output " + dims_text(y));
    }
    return g;
}

template <typename T>
void check_lanes(const BasicView<T>& v, const char* what) {
    DSL_INTERNAL_CHECK(v.lanes == L && v.dims.rank() > 0 && v.stride[v.dims.rank() - 1] == L,
                       std::string(what) + ": a view that is not blocked in 16 channels");
}

// Whether input place p (of the window's input, counting the places outside the view) lies in the view, and
// where: its index in the view.
inline bool inside(const Geometry& g, int d, std::int64_t p, std::int64_t& q) {
    q = p - g.before[d];
    return q >= 0 && q < g.in[d];
}

// The window of output (o0, o1, o2): its first tap's block of L channels, or null where it is padding; and
// f(v, tap) for each of its taps within the view, in scan order (the last dimension fastest), v the tap's block
// and tap its number in the window, (e * kh + a) * kw + b.
[[gnu::always_inline]] inline const float* first_tap(const Geometry& g, const float* x, const Strides& xs,
                                                     std::int64_t o0, std::int64_t o1, std::int64_t o2) {
    std::int64_t q0 = 0, q1 = 0, q2 = 0;
    const bool in =
        inside(g, 0, o0 * g.stride[0], q0) && inside(g, 1, o1 * g.stride[1], q1) && inside(g, 2, o2 * g.stride[2], q2);
    return in ? x + q0 * xs.at[0] + q1 * xs.at[1] + q2 * xs.at[2] : nullptr;
}
template <typename F>
[[gnu::always_inline]] inline void each_tap(const Geometry& g, const float* x, const Strides& xs, std::int64_t o0,
                                            std::int64_t o1, std::int64_t o2, F&& f) {
    std::int64_t q0 = 0, q1 = 0, q2 = 0;
    for (std::int64_t e = 0; e < g.kernel[0]; ++e) {
        if (!inside(g, 0, o0 * g.stride[0] + e, q0)) continue;
        for (std::int64_t a = 0; a < g.kernel[1]; ++a) {
            if (!inside(g, 1, o1 * g.stride[1] + a, q1)) continue;
            for (std::int64_t b = 0; b < g.kernel[2]; ++b) {
                if (!inside(g, 2, o2 * g.stride[2] + b, q2)) continue;
                f(x + q0 * xs.at[0] + q1 * xs.at[1] + q2 * xs.at[2],
                  static_cast<std::int32_t>((e * g.kernel[1] + a) * g.kernel[2] + b));
            }
        }
    }
}

// A row of outputs (o0, o1, every o2) of one sample's block of channels: x and y at that block's first place.
template <bool average>
DSL_AVX512_CLONE void forward_row(const Geometry& g, const float* __restrict x, const Strides& xs, float* __restrict y,
                                  std::int64_t y_step, std::int64_t o0, std::int64_t o1) {
    const double taps = static_cast<double>(g.taps);
    constexpr float none = -std::numeric_limits<float>::infinity();
    for (std::int64_t o2 = 0; o2 < g.out[2]; ++o2, y += y_step) {
        double sum[L] = {};
        float best[L];
        const float* first = first_tap(g, x, xs, o0, o1, o2);
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) best[l] = first ? first[l] : none;
        each_tap(g, x, xs, o0, o1, o2, [&](const float* v, std::int32_t) {
            if constexpr (average) {
#pragma omp simd
                for (std::int64_t l = 0; l < L; ++l) sum[l] += static_cast<double>(v[l]);
            } else {
#pragma omp simd
                for (std::int64_t l = 0; l < L; ++l) best[l] = best[l] > v[l] ? best[l] : v[l];
            }
        });
        if constexpr (average) {
#pragma omp simd
            for (std::int64_t l = 0; l < L; ++l) y[l] = static_cast<float>(sum[l] / taps);
        } else {
#pragma omp simd
            for (std::int64_t l = 0; l < L; ++l) y[l] = best[l];
        }
    }
}

// Of a row of windows: where each window's first maximum lies, (e * kh + a) * kw + b in scan order (padding
// taps counted, never a maximum), per lane.
DSL_AVX512_CLONE void first_max_row(const Geometry& g, const float* __restrict x, const Strides& xs,
                                    std::int32_t* __restrict at, std::int64_t o0, std::int64_t o1) {
    constexpr float none = -std::numeric_limits<float>::infinity();
    for (std::int64_t o2 = 0; o2 < g.out[2]; ++o2, at += L) {
        float best[L];
        std::int32_t where[L];
        const float* first = first_tap(g, x, xs, o0, o1, o2);
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) best[l] = first ? first[l] : none, where[l] = 0;
        each_tap(g, x, xs, o0, o1, o2, [&](const float* v, std::int32_t tap) {
#pragma omp simd
            for (std::int64_t l = 0; l < L; ++l) {
                const bool better = v[l] > best[l];
                where[l] = better ? tap : where[l];
                best[l] = better ? v[l] : best[l];
            }
        });
        std::copy_n(where, L, at);
    }
}

// What a row of average windows sends each place it covers: dy / taps, in double.
DSL_AVX512_CLONE void sent_row(const Geometry& g, const float* __restrict dy, std::int64_t dy_step,
                               double* __restrict sent) {
    const double taps = static_cast<double>(g.taps);
    for (std::int64_t o2 = 0; o2 < g.out[2]; ++o2, dy += dy_step, sent += L)
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) sent[l] = static_cast<double>(dy[l]) / taps;
}

// The windows along each dimension that contain each place q of the view (input place p = q + before): from
// p / s - (ceil(k / s) - 1) to p / s, those within the output and not in a gap between windows. Worked out
// once per call, so that no place divides.
struct Windows {
    std::vector<std::int64_t> first[R], last[R];

    explicit Windows(const Geometry& g) {
        for (int d = 0; d < R; ++d) {
            const std::int64_t s = g.stride[d], k = g.kernel[d], most = (k + s - 1) / s;
            first[d].resize(static_cast<std::size_t>(g.in[d]));
            last[d].resize(static_cast<std::size_t>(g.in[d]));
            for (std::int64_t q = 0; q < g.in[d]; ++q) {
                const std::int64_t p = q + g.before[d];
                std::int64_t lo = std::max<std::int64_t>(0, p / s - (most - 1));
                while (p - lo * s >= k) ++lo;
                first[d][static_cast<std::size_t>(q)] = lo;
                last[d][static_cast<std::size_t>(q)] = std::min(g.out[d] - 1, p / s);
            }
        }
    }
};

// A row of input places (q0, q1, every q2 of the view) of one sample's block: the sum over its windows of what
// each sends, `sent` (average: dy / taps in double, per window and lane) or dy where the window's first
// maximum (`at`) is this place.
template <bool average>
DSL_AVX512_CLONE void backward_row(const Geometry& g, const Windows& w, const double* __restrict sent,
                                   const std::int32_t* __restrict at, const float* __restrict dy, const Strides& dys,
                                   float* __restrict dx, std::int64_t dx_step, std::int64_t q0, std::int64_t q1) {
    const std::int64_t p0 = q0 + g.before[0], p1 = q1 + g.before[1];
    const auto i0 = static_cast<std::size_t>(q0), i1 = static_cast<std::size_t>(q1);
    const std::int64_t first0 = w.first[0][i0], last0 = w.last[0][i0], first1 = w.first[1][i1], last1 = w.last[1][i1];
    const std::int64_t* first2 = w.first[2].data();
    const std::int64_t* last2 = w.last[2].data();
    for (std::int64_t q2 = 0; q2 < g.in[2]; ++q2, dx += dx_step) {
        const std::int64_t p2 = q2 + g.before[2];
        double sum[L] = {};
        for (std::int64_t o0 = first0; o0 <= last0; ++o0)
            for (std::int64_t o1 = first1; o1 <= last1; ++o1)
                for (std::int64_t o2 = first2[q2]; o2 <= last2[q2]; ++o2) {
                    const std::int64_t window = (o0 * g.out[1] + o1) * g.out[2] + o2;
                    if constexpr (average) {
                        const double* v = sent + window * L;
#pragma omp simd
                        for (std::int64_t l = 0; l < L; ++l) sum[l] += v[l];
                    } else {
                        const auto tap = static_cast<std::int32_t>(
                            ((p0 - o0 * g.stride[0]) * g.kernel[1] + (p1 - o1 * g.stride[1])) * g.kernel[2] +
                            (p2 - o2 * g.stride[2]));
                        const std::int32_t* where = at + window * L;
                        const float* v = dy + o0 * dys.at[0] + o1 * dys.at[1] + o2 * dys.at[2];
                        // Chosen in floats, then widened: the same values, and loops of one width each.
                        float taken[L];
#pragma omp simd
                        for (std::int64_t l = 0; l < L; ++l) taken[l] = where[l] == tap ? v[l] : 0.0f;
#pragma omp simd
                        for (std::int64_t l = 0; l < L; ++l) sum[l] += static_cast<double>(taken[l]);
                    }
                }
#pragma omp simd
        for (std::int64_t l = 0; l < L; ++l) dx[l] = static_cast<float>(sum[l]);
    }
}

// `count` elements of scratch, kept by the calling thread from one call to the next: allocated anew on every
// call, CosmoFlow's first pooling's 34 MB were page faults and zeroing that took as long as the kernel.
template <typename T>
T* scratch(std::size_t count) {
    thread_local std::unique_ptr<double[]> kept;
    thread_local std::size_t size = 0;  // in doubles
    const std::size_t doubles = (count * sizeof(T) + sizeof(double) - 1) / sizeof(double);
    if (doubles > size) kept.reset(new double[doubles]), size = doubles;
    return reinterpret_cast<T*>(kept.get());
}

// f(n, block, r0, r1) for every sample, block and row (r0, r1) of `rows`, on OpenMP's threads.
template <typename F>
void each_row(const Geometry& g, const std::int64_t (&rows)[R], F&& f) {
    const std::int64_t count = g.samples * g.blocks * rows[0] * rows[1];
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < count; ++k) {
        const std::int64_t r1 = k % rows[1], r0 = k / rows[1] % rows[0], nb = k / (rows[0] * rows[1]);
        f(nb / g.blocks, nb % g.blocks, r0, r1);
    }
}

}  // namespace

void pool_forward(PoolKind kind, ConstView x, View y, const Window& window) {
    check_lanes(x, "blocked pool forward");
    check_lanes(y, "blocked pool forward");
    const Geometry g = geometry(x.dims, y.dims, window, "blocked pool forward");
    const Strides xs = strides_of(x), ys = strides_of(y);
    const bool average = kind == PoolKind::average;
    each_row(g, g.out, [&](std::int64_t n, std::int64_t b, std::int64_t o0, std::int64_t o1) {
        (average ? forward_row<true>
                 : forward_row<false>)(g, x.base + n * xs.n + b * xs.block, xs,
                                       y.base + n * ys.n + b * ys.block + o0 * ys.at[0] + o1 * ys.at[1], ys.at[2], o0,
                                       o1);
    });
}

void pool_backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window) {
    check_lanes(x, "blocked pool backward");
    check_lanes(dy, "blocked pool backward");
    check_lanes(dx, "blocked pool backward");
    check_same_dims(x.dims, dx.dims, "blocked pool backward");
    const Geometry g = geometry(x.dims, dy.dims, window, "blocked pool backward");
    const Strides xs = strides_of(x), dys = strides_of(dy), dxs = strides_of(dx);
    const bool average = kind == PoolKind::average;
    // What each window sends (average) or where its maximum lies (max), per sample, block, window and lane.
    const std::int64_t per_block = g.out[0] * g.out[1] * g.out[2] * L;
    const auto all = static_cast<std::size_t>(g.samples * g.blocks * per_block);
    double* sent = average ? scratch<double>(all) : nullptr;
    std::int32_t* at = average ? nullptr : scratch<std::int32_t>(all);
    each_row(g, g.out, [&](std::int64_t n, std::int64_t b, std::int64_t o0, std::int64_t o1) {
        const std::int64_t row = (n * g.blocks + b) * per_block + (o0 * g.out[1] + o1) * g.out[2] * L;
        if (!average) {
            first_max_row(g, x.base + n * xs.n + b * xs.block, xs, at + row, o0, o1);
            return;
        }
        sent_row(g, dy.base + n * dys.n + b * dys.block + o0 * dys.at[0] + o1 * dys.at[1], dys.at[2], sent + row);
    });
    const Windows w(g);
    each_row(g, g.in, [&](std::int64_t n, std::int64_t b, std::int64_t q0, std::int64_t q1) {
        const std::int64_t block = (n * g.blocks + b) * per_block;
        (average ? backward_row<true>
                 : backward_row<false>)(g, w, average ? sent + block : nullptr, average ? nullptr : at + block,
                                        dy.base + n * dys.n + b * dys.block, dys,
                                        dx.base + n * dxs.n + b * dxs.block + q0 * dxs.at[0] + q1 * dxs.at[1],
                                        dxs.at[2], q0, q1);
    });
}

}  // namespace dsl::backend::blocked
