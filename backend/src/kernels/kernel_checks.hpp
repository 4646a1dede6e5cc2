// The kernels' contract on their arguments' shapes, checked alike by every kernel set on the planes that its
// kernels of images see, or on generic dims of any rank (volumes too), which compare in their spatial form
// (planes.hpp): an image's as its planes, a volume's as they are. Callers size views from the plan, so a
// mismatch is a bug in dsl: an internal error, never silent. (C++17: the GPU's kernel file includes it too.)
#pragma once

#include "../tensors/planes.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/base/error.hpp>

#include <string>

namespace dsl::backend {

inline std::string dims_text(const PlaneDims& d) {
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
    std::string s = "{";
    s += std::to_string(d.n);
    for (std::int64_t v : {d.c, d.h, d.w}) s += ", ", s += std::to_string(v);
    s += "}";
    return s;
}

inline void check_same_dims(const PlaneDims& a, const PlaneDims& b, const char* what) {
    DSL_INTERNAL_CHECK(a == b, std::string(what) + ": " + dims_text(a) + " vs " + dims_text(b));
}

// {n, c, then each extent}: an image's as its planes' text.
inline std::string dims_text(const Dims& d) {
    std::string s = "{";
    s += std::to_string(d.n);
    s += ", ", s += std::to_string(d.c);
    for (std::int64_t v : d.space) s += ", ", s += std::to_string(v);
    s += "}";
    return s;
}

// Generic dims compare in their spatial form: a vector {n, k} is the same as {n, k, {1, 1}}, a volume only as
// another of its extents.
inline void check_same_dims(const Dims& a, const Dims& b, const char* what) {
    const Dims sa = spatial_form(a), sb = spatial_form(b);
    DSL_INTERNAL_CHECK(sa == sb, std::string(what) + ": " + dims_text(sa) + " vs " + dims_text(sb));
}

template <typename A, typename B>  // views, generic or of planes
void check_same_dims(const A& a, const B& b, const char* what) {
    check_same_dims(a.dims, b.dims, what);
}

// x must span exactly the input that y's outputs read (padding is in x's margins, Window::zeros says where).
inline void check_window_input(const PlaneDims& x, const PlaneDims& y, const Window& window, const char* what) {
    for (int d = 0; d < 2; ++d)
        DSL_INTERNAL_CHECK(window.kernel[d] >= 1 && window.stride[d] >= 1 && window.dilation[d] >= 1,
                           std::string(what) + ": kernel, stride and dilation must be positive");
    DSL_INTERNAL_CHECK(x.n == y.n && x.h == window.input_extent(0, y.h) && x.w == window.input_extent(1, y.w),
                       std::string(what) + ": input " + dims_text(x) + " does not match output " + dims_text(y));
}

inline void check_conv(const PlaneDims& x, const PlaneDims& w, const PlaneDims& y, const Window& window) {
    DSL_INTERNAL_CHECK(!window.zeros_outside, "conv: a kernel without blocked views given zeros outside x");
    check_window_input(x, y, window, "conv");
    DSL_INTERNAL_CHECK(
        w.n == y.c && w.c == x.c && w.h == window.kernel[0] && w.w == window.kernel[1],
        "conv: weights " + dims_text(w) + " do not match input " + dims_text(x) + " and output " + dims_text(y));
}

inline void check_pool(const PlaneDims& x, const PlaneDims& y, const Window& window) {
    check_window_input(x, y, window, "pool");
    DSL_INTERNAL_CHECK(x.c == y.c, "pool: channels of " + dims_text(x) + " and " + dims_text(y));
}

// y {N, K, 1, 1} = x {N, C, H, W} times w {K, C*H*W, 1, 1} (a vector {N, K} is the planes {N, K, 1, 1}).
inline void check_fc(const PlaneDims& x, const PlaneDims& w, const PlaneDims& y) {
    DSL_INTERNAL_CHECK(
        y.h == 1 && y.w == 1 && x.n == y.n && w.n == y.c && w.c == x.c * x.h * x.w && w.h == 1 && w.w == 1,
        "fc: input " + dims_text(x) + ", weights " + dims_text(w) + ", output " + dims_text(y));
}

inline void check_labels(const PlaneDims& logits, const PlaneDims& labels) {
    DSL_INTERNAL_CHECK(labels == (PlaneDims{logits.n, 1, logits.h, logits.w}),
                       "cross_entropy: labels " + dims_text(labels) + " for logits " + dims_text(logits));
}

// The checks above on generic dims of any rank, in their spatial form: the window (or placement) has rank 2
// for images and vectors, 3 for volumes, and a volume's weights are {F, C, kD, kH, kW}.

inline void check_window_rank(const Window& window, int rank, const char* what) {
    DSL_INTERNAL_CHECK(window.kernel.rank() == rank && window.stride.rank() == rank && window.dilation.rank() == rank,
                       std::string(what) + ": a window of rank " + std::to_string(window.kernel.rank()) +
                           " for views of rank " + std::to_string(rank));
}

inline void check_window_input(const Dims& x, const Dims& y, const Window& window, const char* what) {
    const Dims sx = spatial_form(x), sy = spatial_form(y);
    const int rank = sx.rank();
    DSL_INTERNAL_CHECK(sy.rank() == rank, std::string(what) + ": input " + dims_text(sx) + " and output " +
                                              dims_text(sy) + " of different ranks");
    check_window_rank(window, rank, what);
    bool match = sx.n == sy.n;
    for (int d = 0; d < rank; ++d) {
        DSL_INTERNAL_CHECK(window.kernel[d] >= 1 && window.stride[d] >= 1 && window.dilation[d] >= 1,
                           std::string(what) + ": kernel, stride and dilation must be positive");
        // Without the zeros where the window says they are not in x's view.
        const std::int64_t outside =
            window.zeros_outside && window.zeros.rank() == rank ? window.zeros[d].before + window.zeros[d].after : 0;
        match = match && sx.space[d] == window.input_extent(d, sy.space[d]) - outside;
    }
    DSL_INTERNAL_CHECK(match,
                       std::string(what) + ": input " + dims_text(sx) + " does not match output " + dims_text(sy));
}

// `outside`: whether the kernel takes windows whose zeros lie outside x (Window::zeros_outside).
inline void check_conv(const Dims& x, const Dims& w, const Dims& y, const Window& window, bool outside = false) {
    DSL_INTERNAL_CHECK(outside || !window.zeros_outside, "conv: a kernel without blocked views given zeros outside x");
    check_window_input(x, y, window, "conv");
    const Dims sx = spatial_form(x), sw = spatial_form(w), sy = spatial_form(y);
    DSL_INTERNAL_CHECK(
        sw.n == sy.c && sw.c == sx.c && sw.space == window.kernel,
        "conv: weights " + dims_text(sw) + " do not match input " + dims_text(sx) + " and output " + dims_text(sy));
}

inline void check_pool(const Dims& x, const Dims& y, const Window& window) {
    check_window_input(x, y, window, "pool");
    DSL_INTERNAL_CHECK(x.c == y.c,
                       "pool: channels of " + dims_text(spatial_form(x)) + " and " + dims_text(spatial_form(y)));
}

// y {N, K} = x {N, C, extents...} times w {K, C times the places}; y and w have one place (a vector, or 1 x 1).
inline void check_fc(const Dims& x, const Dims& w, const Dims& y) {
    const Dims sx = spatial_form(x), sw = spatial_form(w), sy = spatial_form(y);
    DSL_INTERNAL_CHECK(
        sy.points() == 1 && sw.points() == 1 && sx.n == sy.n && sw.n == sy.c && sw.c == sx.c * sx.points(),
        "fc: input " + dims_text(sx) + ", weights " + dims_text(sw) + ", output " + dims_text(sy));
}

// Labels {n, 1, extents} for logits {n, k, extents}, {n, 1} (or its planes) for logits {n, k}.
inline void check_labels(const Dims& logits, const Dims& labels) {
    const Dims sl = spatial_form(logits), sb = spatial_form(labels);
    DSL_INTERNAL_CHECK(sb == (Dims{sl.n, 1, sl.space}),
                       "cross_entropy: labels " + dims_text(sb) + " for logits " + dims_text(sl));
}

// A placement (or a mask's place) of rank 3 for a volume, of 2 or less (plane_place's) for the rest.
inline void check_place(const Index& at, const Dims& d, const char* what) {
    DSL_INTERNAL_CHECK(
        d.rank() == 3 ? at.rank() == 3 : at.rank() <= 2,
        std::string(what) + ": a place of rank " + std::to_string(at.rank()) + " for views " + dims_text(d));
}

inline void check_label(std::int32_t label, std::int64_t classes) {
    DSL_INTERNAL_CHECK(label >= 0 && label < classes, "cross_entropy: label " + std::to_string(label) +
                                                          " outside [0, " + std::to_string(classes) + ")");
}

}  // namespace dsl::backend
