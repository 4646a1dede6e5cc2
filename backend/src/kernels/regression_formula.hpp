// A regression loss at one element, prediction x against target t: its value and its gradient with respect
// to x, the one formula that the reference (double), CPU (float) and CUDA (gpu/gpu_loss.cu, double) kernels
// share. bce_with_logits is in PyTorch's stable form, max(x, 0) - x t + log1p(exp(-|x|)); l1's gradient is 0
// where x equals t, as torch's sign.
#pragma once

#include "host_device.hpp"

#include <dsl/frontend/layer_kinds.hpp>

#include <cmath>

namespace dsl::backend {

template <typename Real>
struct RegressionTerm {
    Real value, grad;
};

template <typename Real>
DSL_HOST_DEVICE inline RegressionTerm<Real> regression_term(frontend::Regression loss, Real x, Real t) {
    using std::exp;
    using std::log1p;
    const Real e = x - t, zero = 0, one = 1;
    switch (loss) {
        case frontend::Regression::mse: return {e * e, Real(2) * e};
        case frontend::Regression::l1: return {e < zero ? -e : e, e > zero ? one : e < zero ? -one : zero};
        default:  // bce_with_logits
            return {(x > zero ? x : zero) - x * t + log1p(exp(x < zero ? x : -x)), one / (one + exp(-x)) - t};
    }
}

}  // namespace dsl::backend
