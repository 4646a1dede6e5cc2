// Convolutions with 16-bit products over any host convolution kernels: each pass's two inputs rounded to
// bfloat16 or float16 (nearest, ties to even: tensors/narrow.hpp), then the inner kernels' float32 (or
// double) sums, as oneDNN's bf16 kernels compute. The reference kernel set's Kernels::conv_bfloat16, which
// checks oneDNN's; and, rounded once more, what cuDNN's 16-bit convolutions compute.
#pragma once

#include <dsl/backend/kernels.hpp>

#include <memory>

namespace dsl::backend {

std::unique_ptr<ConvKernels> rounded_to(ConvKernels& inner, scheduler::Precision p);

}  // namespace dsl::backend
