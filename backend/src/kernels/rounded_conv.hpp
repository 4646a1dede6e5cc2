// Convolutions with bfloat16 products over any host convolution kernels: each pass's two inputs rounded to
// bfloat16 (nearest, ties to even: tensors/narrow.hpp), then the inner kernels' float32 (or double) sums, as
// oneDNN's bf16 kernels compute. The reference kernel set's Kernels::conv_bfloat16, which checks oneDNN's.
#pragma once

#include <dsl/backend/kernels.hpp>

#include <memory>

namespace dsl::backend {

std::unique_ptr<ConvKernels> rounded_to_bfloat16(ConvKernels& inner);

}  // namespace dsl::backend
