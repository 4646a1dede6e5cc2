// The form in which the kernels of images see a view: samples, channels, rows and columns, {n, c, h, w},
// rows contiguous. A view without spatial dimensions is one of 1 x 1 planes (a vector [N, K] is
// {n, k, 1, 1}), one of a single dimension a single row. Each kernel set converts its views here, at its
// boundary, as it converts them to oneDNN's or Halide's; volumes are not planes. Kernels written for any rank
// see their views in the spatial form below instead: volumes as they are, the rest as images. (C++17: the
// GPU's kernel files include it.)
#pragma once

#include <dsl/backend/tensor.hpp>
#include <dsl/base/error.hpp>

#include <cstdint>
#include <vector>

namespace dsl::backend {

struct PlaneDims {
    std::int64_t n = 0, c = 0, h = 0, w = 0;
    std::int64_t elements() const { return n * c * h * w; }
    bool operator==(const PlaneDims& o) const { return n == o.n && c == o.c && h == o.h && w == o.w; }
    bool operator!=(const PlaneDims& o) const { return !(*this == o); }
};

// Element (n, c, y, x) is at base[n * stride_n + c * stride_c + y * stride_h + x].
template <typename T>
struct PlaneView {
    T* base = nullptr;
    PlaneDims dims;
    std::int64_t stride_n = 0, stride_c = 0, stride_h = 0;

    T& at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) const {
        return base[n * stride_n + c * stride_c + y * stride_h + x];
    }
    // The window of `d` elements starting at (n, c, y, x) of this one.
    PlaneView sub(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x, PlaneDims d) const {
        return PlaneView{&at(n, c, y, x), d, stride_n, stride_c, stride_h};
    }
    bool dense() const { return stride_h == dims.w && stride_c == dims.h * dims.w && stride_n == dims.c * stride_c; }
    operator PlaneView<const T>() const { return {base, dims, stride_n, stride_c, stride_h}; }
};

using Planes = PlaneView<float>;
using ConstPlanes = PlaneView<const float>;
using LabelPlanes = PlaneView<const std::int32_t>;

inline PlaneDims planes(const Dims& d) {
    DSL_INTERNAL_CHECK(d.rank() <= 2, "a kernel of images was given a volume");
    const std::int64_t h = d.rank() == 2 ? d.space[0] : 1, w = d.rank() > 0 ? d.space[d.rank() - 1] : 1;
    return PlaneDims{d.n, d.c, h, w};
}

template <typename T>
PlaneView<T> planes(const BasicView<T>& v) {
    DSL_INTERNAL_CHECK(!v.blocked(), "planes of a view whose channels lie in blocks");
    const PlaneDims d = planes(v.dims);
    // Without rows (rank 0 or 1) the row stride is never stepped: any will do.
    const std::int64_t stride_h = v.dims.rank() == 2 ? v.stride[0] : d.w;
    return PlaneView<T>{v.base, d, v.stride_n, v.stride_c, stride_h};
}

// The view of images that `p` is: rank 2.
template <typename T>
BasicView<T> spatial(const PlaneView<T>& p) {
    return BasicView<T>{p.base, Dims{p.dims.n, p.dims.c, {p.dims.h, p.dims.w}}, p.stride_n, p.stride_c,
                        Index{p.stride_h, 1}};
}

// Where a view's first element lies in its tensor's planes, given its place `at` along each spatial dimension
// (as planes(Dims) maps the dimensions): row 0 and column 0 without any, row 0 along a single one.
struct PlanePlace {
    std::int64_t y = 0, x = 0;
};

inline PlanePlace plane_place(const Index& at) {
    DSL_INTERNAL_CHECK(at.rank() <= 2, "a kernel of images was given a place in a volume");
    return PlanePlace{at.rank() == 2 ? at[0] : 0, at.rank() > 0 ? at[at.rank() - 1] : 0};
}

template <typename T>
PlaneView<T> dense_planes(T* data, const PlaneDims& d) {
    return PlaneView<T>{data, d, d.c * d.h * d.w, d.h * d.w, d.w};
}

// The spatial form, in which the kernels of any rank see their views: a volume's as it is, anything of
// rank 2 or less as the image that planes() makes it ({n, c, {h, w}}), so that windows and placements have
// rank 2 or 3, and a vector is an image of 1 x 1.
inline Dims spatial_form(const Dims& d) {
    if (d.rank() == 3) return d;
    const PlaneDims p = planes(d);
    return Dims{p.n, p.c, {p.h, p.w}};
}

template <typename T>
BasicView<T> spatial_form(const BasicView<T>& v) {
    return v.dims.rank() >= 2 ? v : spatial(planes(v));
}

// A place in the spatial form: a volume's as it is, an image's (or a shorter one's) as plane_place has it.
inline Index spatial_form(const Index& at) {
    if (at.rank() == 3) return at;
    const PlanePlace p = plane_place(at);
    return Index{p.y, p.x};
}

// Calls f(i) for every place of `extent` in order, the last dimension fastest; none when an extent is 0.
template <typename F>
void for_each_place(const Index& extent, F&& f) {
    for (std::int64_t e : extent)
        if (e <= 0) return;
    Index i = Index::filled(extent.rank(), 0);
    while (true) {
        f(static_cast<const Index&>(i));
        int d = extent.rank() - 1;
        for (; d >= 0 && ++i[d] == extent[d]; --d) i[d] = 0;
        if (d < 0) return;
    }
}

// Calls f(i) for the first place i of every row of `extent` (rank 1 or more) in order: the places whose last
// index is 0.
template <typename F>
void for_each_row_start(const Index& extent, F&& f) {
    Index starts = extent;
    starts[extent.rank() - 1] = 1;
    for_each_place(starts, f);
}

// Calls f(n, c, i) for the first place i of every row of `d` (rank 1 or more) in order: samples, channels, then
// rows. A row has row_length(d) elements, one after another in every view of d.
template <typename F>
void for_each_row_start(const Dims& d, F&& f) {
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t c = 0; c < d.c; ++c) for_each_row_start(d.space, [&](const Index& i) { f(n, c, i); });
}

// Calls f(n, c, width, row...) for every row of views of the same dims, in their spatial form: `row` is a
// pointer to the row's first element in each view (const for a ConstView), `width` its length.
template <typename F, typename First, typename... Rest>
void for_each_row_of(F&& f, First first, Rest... rest) {
    first = spatial_form(first);
    ((rest = spatial_form(rest)), ...);
    const std::int64_t width = row_length(first.dims);
    for_each_row_start(first.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
        f(n, c, width, &first.at(n, c, i), &rest.at(n, c, i)...);
    });
}

// The taps of a window of `kernel` in order, the last dimension fastest: the order in which the kernels sum
// over them (and max pooling finds its first maximum).
inline std::vector<Index> window_taps(const Index& kernel) {
    std::vector<Index> taps;
    for_each_place(kernel, [&](const Index& a) { taps.push_back(a); });
    return taps;
}

}  // namespace dsl::backend
