// How many samples a CPU convolution's kernel call takes at once. oneDNN's kernels reorder their arguments
// into their own layouts (channels in blocks of 16), in buffers that every call shares, each as large as the
// largest argument it held: one call over a large tile would keep buffers as large as its activations for
// the rest of the run. A call of a tile whose samples are large runs over groups of them instead, each
// group's largest argument within `layout_group_bytes` (one sample at least). The kernels call so, and the
// model counts the buffers so.
#pragma once

#include <dsl/base/space.hpp>

#include <algorithm>
#include <cstdint>

namespace dsl::scheduler {

inline constexpr double layout_group_bytes = 16.0 * 1024 * 1024;

// Bytes of one sample of a tensor of `d` in a blocked layout of float32.
inline double blocked_sample_bytes(const Dims& d) {
    return static_cast<double>((d.c + 15) / 16 * 16 * d.points()) * 4.0;
}

// The samples of each call of a convolution whose input (its window) is `x` and output `y`.
inline std::int64_t layout_group(const Dims& x, const Dims& y) {
    const double sample = std::max(blocked_sample_bytes(x), blocked_sample_bytes(y));
    const auto fit = sample > 0 ? static_cast<std::int64_t>(layout_group_bytes / sample) : y.n;
    return std::clamp<std::int64_t>(fit, 1, std::max<std::int64_t>(y.n, 1));
}

}  // namespace dsl::scheduler
