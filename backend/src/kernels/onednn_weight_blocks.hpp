// oneDNN's layouts of 16-bit convolution weights in 16 x 16 blocks of filters and channels, as
// narrow_weight_blocks (tensors/weight_blocks.hpp) writes them.
#pragma once

#include "../tensors/weight_blocks.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <optional>

namespace dsl::backend {

// A 16-bit layout of convolution weights in 16 x 16 blocks of filters and channels (what oneDNN's bfloat16
// kernels choose on blocked tiles: ABcd8b16a2b for forward, BAcd8a16b2a for backward-data and the like) as
// narrow_weight_blocks writes it; none for any other. oneDNN 2.6's reorder into them from float32 (plain or
// in 16 x 16 blocks) ran at 4.5 GB/s: 60 ms of each ResNet-50 step at batch 4 went to rounding its 25M
// weights for forward and backward-data, 1.8% of a run's time with narrow_weight_blocks (perf).
std::optional<WeightBlocks16> weight_blocks16(const dnnl::memory::desc& d);

}  // namespace dsl::backend
