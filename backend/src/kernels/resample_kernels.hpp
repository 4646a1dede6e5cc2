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
// places is the row, 1 the column). (Of planes; the generic dims' overloads are below.)
inline void check_upsample(const Upsample& u, const PlaneDims& x, const PlaneDims& y, const char* what) {
    DSL_INTERNAL_CHECK(x.n == y.n && x.c == y.c && u.scale >= 1,
                       std::string(what) + ": " + dims_text(x) + " vs " + dims_text(y));
    if (y.h == 0 || y.w == 0) return;
    const bool b = u.linear;
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

// The checks above on generic dims of any rank, in their spatial form (planes.hpp): images (rank 2) and
// volumes (rank 3), whose `in`, placements, kernels, strides and pads have their rank.

inline void check_upsample(const Upsample& u, const Dims& x, const Dims& y, const char* what) {
    const Dims sx = spatial_form(x), sy = spatial_form(y);
    const int rank = sx.rank();
    DSL_INTERNAL_CHECK(sx.n == sy.n && sx.c == sy.c && sy.rank() == rank && u.scale >= 1 && u.in.rank() == rank &&
                           u.at.x.rank() == rank && u.at.y.rank() == rank,
                       std::string(what) + ": " + dims_text(sx) + " vs " + dims_text(sy) + " (in of rank " +
                           std::to_string(u.in.rank()) + ")");
    if (sy.points() == 0) return;
    bool holds = true;
    for (int d = 0; d < rank; ++d) {
        const scheduler::IndexRange r =
            scheduler::upsample_input(u.at.y[d], u.at.y[d] + sy.space[d], u.scale, u.linear, u.in[d]);
        holds = holds && r.first >= u.at.x[d] && r.end <= u.at.x[d] + sx.space[d];
    }
    DSL_INTERNAL_CHECK(holds, std::string(what) + ": input " + dims_text(sx) + " does not hold what output " +
                                  dims_text(sy) + " reads");
}

inline void check_deconv(const Dims& x, const Dims& w, const Dims& y, const Deconv& d, const char* what) {
    const Dims sx = spatial_form(x), sw = spatial_form(w), sy = spatial_form(y);
    const int rank = sx.rank();
    bool ok = sy.rank() == rank && sw.rank() == rank && sw.space == d.kernel && d.stride.rank() == rank &&
              d.pad.rank() == rank && d.at.x.rank() == rank && d.at.y.rank() == rank && sx.n == sy.n && sw.n == sx.c &&
              sw.c == sy.c;
    for (int k = 0; ok && k < rank; ++k) ok = d.stride[k] >= 1;
    DSL_INTERNAL_CHECK(ok,
                       std::string(what) + ": x " + dims_text(sx) + ", w " + dims_text(sw) + ", y " + dims_text(sy));
}

}  // namespace dsl::backend
