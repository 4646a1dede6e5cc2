// The kernel sets' upsampling and transposed convolution (kernels.hpp): the reference loops, the CPU's, and
// the shape checks every set shares.
#pragma once

#include "kernel_checks.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/scheduler/window.hpp>

#include <string>

namespace dsl::backend {

UpsampleKernels& reference_upsample();
DeconvKernels& reference_deconv();
UpsampleKernels& cpu_upsample();  // C++ over OpenMP's threads (see resample_kernels.cpp on oneDNN)
DeconvKernels& cpu_deconv();      // oneDNN's convolutions (deconv_over_conv)

// x must hold every input that y's outputs read: rows and columns from the placement's first (index 0 of its
// places is the row, 1 the column).
inline void check_upsample(const Upsample& u, const PlaneDims& x, const PlaneDims& y, const char* what) {
    DSL_INTERNAL_CHECK(x.n == y.n && x.c == y.c && u.scale >= 1, std::string(what) + ": " + dims_text(x) + " vs " +
                                                                      dims_text(y));
    if (y.h == 0 || y.w == 0) return;
    const bool b = u.bilinear;
    const scheduler::IndexRange rows = scheduler::upsample_input(u.at.y[0], u.at.y[0] + y.h, u.scale, b, u.in[0]);
    const scheduler::IndexRange cols = scheduler::upsample_input(u.at.y[1], u.at.y[1] + y.w, u.scale, b, u.in[1]);
    DSL_INTERNAL_CHECK(
        rows.first >= u.at.x[0] && rows.end <= u.at.x[0] + x.h && cols.first >= u.at.x[1] &&
            cols.end <= u.at.x[1] + x.w,
        std::string(what) + ": input " + dims_text(x) + " does not hold what output " + dims_text(y) + " reads");
}

inline void check_deconv(const PlaneDims& x, const PlaneDims& w, const PlaneDims& y, const Deconv& d,
                         const char* what) {
    DSL_INTERNAL_CHECK(x.n == y.n && w.n == x.c && w.c == y.c && w.h == d.kernel[0] && w.w == d.kernel[1] &&
                           d.stride[0] >= 1 && d.stride[1] >= 1,
                       std::string(what) + ": x " + dims_text(x) + ", w " + dims_text(w) + ", y " + dims_text(y));
}

}  // namespace dsl::backend
