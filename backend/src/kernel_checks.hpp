// The kernels' contract on their arguments' shapes, checked alike by every kernel set on the planes that its
// kernels see (planes.hpp). Callers size views from the plan, so a mismatch is a bug in dsl: an internal
// error, never silent. (C++17: the GPU's kernel file includes it too.)
#pragma once

#include "planes.hpp"

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

// Generic dims compare as the planes they are to a kernel: a vector {n, k} is the same as {n, k, {1, 1}}.
inline void check_same_dims(const Dims& a, const Dims& b, const char* what) {
    check_same_dims(planes(a), planes(b), what);
}

template <typename A, typename B>  // views, generic or of planes
void check_same_dims(const A& a, const B& b, const char* what) {
    check_same_dims(a.dims, b.dims, what);
}

// x must span exactly the input that y's outputs read (kernels never pad: padding is in x's margins).
inline void check_window_input(const PlaneDims& x, const PlaneDims& y, const Window& window, const char* what) {
    for (int d = 0; d < 2; ++d)
        DSL_INTERNAL_CHECK(window.kernel[d] >= 1 && window.stride[d] >= 1 && window.dilation[d] >= 1,
                           std::string(what) + ": kernel, stride and dilation must be positive");
    DSL_INTERNAL_CHECK(x.n == y.n && x.h == window.input_extent(0, y.h) && x.w == window.input_extent(1, y.w),
                       std::string(what) + ": input " + dims_text(x) + " does not match output " + dims_text(y));
}

inline void check_conv(const PlaneDims& x, const PlaneDims& w, const PlaneDims& y, const Window& window) {
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

inline void check_label(std::int32_t label, std::int64_t classes) {
    DSL_INTERNAL_CHECK(label >= 0 && label < classes, "cross_entropy: label " + std::to_string(label) +
                                                          " outside [0, " + std::to_string(classes) + ")");
}

}  // namespace dsl::backend
