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

// x must hold every input that y's outputs read: rows and columns from the placement's first.
inline void check_upsample(const Upsample& u, const Dims& x, const Dims& y, const char* what) {
    DSL_INTERNAL_CHECK(x.n == y.n && x.c == y.c && u.scale >= 1, std::string(what) + ": " + dims_text(x) + " vs " +
                                                                      dims_text(y));
    if (y.h == 0 || y.w == 0) return;
    const bool b = u.bilinear;
    const scheduler::IndexRange rows = scheduler::upsample_input(u.at.y_y0, u.at.y_y0 + y.h, u.scale, b, u.in_h);
    const scheduler::IndexRange cols = scheduler::upsample_input(u.at.y_x0, u.at.y_x0 + y.w, u.scale, b, u.in_w);
    DSL_INTERNAL_CHECK(rows.first >= u.at.x_y0 && rows.end <= u.at.x_y0 + x.h && cols.first >= u.at.x_x0 &&
                           cols.end <= u.at.x_x0 + x.w,
                       std::string(what) + ": input " + dims_text(x) + " does not hold what output " + dims_text(y) +
                           " reads");
}

inline void check_deconv(const Dims& x, const Dims& w, const Dims& y, const Deconv& d, const char* what) {
    DSL_INTERNAL_CHECK(x.n == y.n && w.n == x.c && w.c == y.c && w.h == d.kernel[0] && w.w == d.kernel[1] &&
                           d.stride[0] >= 1 && d.stride[1] >= 1,
                       std::string(what) + ": x " + dims_text(x) + ", w " + dims_text(w) + ", y " + dims_text(y));
}

}  // namespace dsl::backend
