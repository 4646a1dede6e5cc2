// A convolution's weights {F, C, kernel} in blocks of 16 filters by 16 input channels, the filters innermost:
// oneDNN's ABcd16b16a for images, the layout its forward and backward-weights kernels on 16-channel blocks
// read and write. Where the kernels ask for it (ConvKernels::blocks_weights), the trainer
// keeps a layer's weights, their gradient and their optimizer moments so (the optimizers are elementwise), and
// converts them to the plain layout at the state's edges (checkpoints, export).
#pragma once

#include <dsl/base/space.hpp>

namespace dsl::backend {

// Whether weights of `w` have a blocked form: F and C multiples of 16.
bool has_weight_blocks(const Dims& w);

// Element (f, c, tap) of weights of `w`, plain at ((f * C + c) * taps + tap), blocked at
// (((f / 16 * C / 16 + c / 16) * taps + tap) * 16 + c % 16) * 16 + f % 16. Both run a block of 16 x 16
// filters and channels per thread of OpenMP's team, its source in cache.
void block_weights(const Dims& w, const float* plain, float* blocked);
void unblock_weights(const Dims& w, const float* blocked, float* plain);

}  // namespace dsl::backend
