// The extent a sliding window (convolution, pooling) reads: the one rule the kernels, the trainer's tiles and
// the performance model share. It has no other dependency, so that every kernel interface can include it.
#pragma once

#include <cstdint>

namespace dsl::scheduler {

// The input rows (or columns) read for `outputs` outputs by a window of `kernel` taps `dilation` apart that
// moves by `stride`.
constexpr std::int64_t window_extent(std::int64_t outputs, std::int64_t kernel, std::int64_t stride,
                                     std::int64_t dilation) {
    return (outputs - 1) * stride + dilation * (kernel - 1) + 1;
}

}  // namespace dsl::scheduler
