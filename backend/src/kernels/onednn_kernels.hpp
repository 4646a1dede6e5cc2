// Convolution and fully connected kernels through oneDNN (CPU), for the CPU kernel set.
#pragma once

#include <dsl/backend/kernels.hpp>

namespace dsl::backend {

// Process-wide instances: one CPU engine and stream, and a cache of primitives keyed by the whole problem
// (shapes, strides, window, bias or not), because a training step repeats the same problems and creating a
// primitive costs far more than running a small one. Calls are serialised; oneDNN threads each one.
ConvKernels& onednn_conv();
// Convolutions with bfloat16 products and float32 sums (Kernels::conv_bfloat16), where the CPU has AVX-512
// BF16 instructions; null where it has not.
ConvKernels* onednn_conv_bfloat16();
FcKernels& onednn_fc();
// Whether oneDNN's direct kernels take channels in blocks of 16 (nChw16c, weights in 16 x 16 blocks) on this
// CPU: AVX-512's. With AVX2 they take blocks of 8, and on blocks of 16 oneDNN 2.6 runs its reference
// convolution ("ref:any"), hundreds of times slower (18 s for one of bench/mesh_stack_256's, on an AMD EPYC):
// the tiles stay planar there, and each convolution reorders into the layout it chooses.
bool onednn_blocks16();

}  // namespace dsl::backend
