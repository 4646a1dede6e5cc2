// A convolution's weights {F, C, kernel} in blocks of 16 filters by 16 input channels, the filters innermost:
// oneDNN's ABcd16b16a for images, the layout its forward and backward-weights kernels on 16-channel blocks
// read and write. Where the kernels ask for it (ConvKernels::blocks_weights), the trainer
// keeps a layer's weights, their gradient and their optimizer moments so (the optimizers are elementwise), and
// converts them to the plain layout at the state's edges (checkpoints, export).
#pragma once

#include <dsl/base/space.hpp>

#include <array>
#include <cstdint>
#include <vector>

namespace dsl::backend {

// Whether weights of `w` have a blocked form: F and C multiples of 16.
bool has_weight_blocks(const Dims& w);

// Element (f, c, tap) of weights of `w`, plain at ((f * C + c) * taps + tap), blocked at
// (((f / 16 * C / 16 + c / 16) * taps + tap) * 16 + c % 16) * 16 + f % 16. Both run a block of 16 x 16
// filters and channels per thread of OpenMP's team, its source in cache.
void block_weights(const Dims& w, const float* plain, float* blocked);
void unblock_weights(const Dims& w, const float* blocked, float* plain);

// A layout of 16-bit weights {F, C, kernel} in 16 x 16 blocks of filters and channels, in any order within a
// block and between blocks (the layouts oneDNN's bfloat16 kernels read, ABcd8b16a2b and the like): the block of
// filters f / 16, channels c / 16 and tap t at f / 16 * block_f + c / 16 * block_c + taps[t], its 256 places
// in a row, place d holding element source[d] of float32's block (block_weights': c % 16 * 16 + f % 16).
struct WeightBlocks16 {
    std::int64_t block_f = 0, block_c = 0;
    std::vector<std::int64_t> taps;
    std::array<std::int32_t, 256> source{};
};

// Blocked float32 weights (block_weights') rounded to bfloat16 (`bfloat`) or float16 into layout `to`, a
// block per thread of OpenMP's team.
void narrow_weight_blocks(const Dims& w, const float* blocked, const WeightBlocks16& to, bool bfloat,
                          std::uint16_t* out);

}  // namespace dsl::backend
