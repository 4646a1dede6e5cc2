// What an output row (or column) reads of the input: the extent of a sliding window (convolution, pooling),
// the sources of an upsampled row, the inputs of a transposed convolution's row. The one rule the kernels
// (CUDA's too), the trainer's tiles and the performance model share. It has no other dependency, so that
// every kernel interface can include it.
#pragma once

#include <cstdint>

namespace dsl::scheduler {

// The input rows (or columns) read for `outputs` outputs by a window of `kernel` taps `dilation` apart that
// moves by `stride`.
constexpr std::int64_t window_extent(std::int64_t outputs, std::int64_t kernel, std::int64_t stride,
                                     std::int64_t dilation) {
    return (outputs - 1) * stride + dilation * (kernel - 1) + 1;
}

constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// A range of input indices [first, end).
struct IndexRange {
    std::int64_t first = 0, end = 0;
};

// Output index o of an upsampling by `scale` along a dimension of `in` inputs reads inputs i0 and i1 with
// weights 1 - lambda and lambda: nearest reads i0 = o / scale alone (lambda 0, i1 = i0); linear (bilinear,
// trilinear: the same along each dimension) is PyTorch's align_corners=False, in its float arithmetic:
// src = (o + 0.5) / scale - 0.5, clamped below at 0; i0 = floor(src), i1 = min(i0 + 1, in - 1),
// lambda = src - i0.
struct UpsampleSource {
    std::int64_t i0 = 0, i1 = 0;
    float lambda = 0.0f;
};
constexpr UpsampleSource upsample_source(std::int64_t o, std::int64_t scale, bool linear, std::int64_t in) {
    if (!linear) return {o / scale, o / scale, 0.0f};
    const auto ratio = static_cast<float>(1.0 / static_cast<double>(scale));
    float src = ratio * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    const auto i0 = static_cast<std::int64_t>(src);
    return {i0, i0 + 1 < in ? i0 + 1 : in - 1, src - static_cast<float>(i0)};
}

// The inputs that outputs [a, b) of an upsampling read (every i0 and i1, bilinear's weight-0 ones included).
constexpr IndexRange upsample_input(std::int64_t a, std::int64_t b, std::int64_t scale, bool linear, std::int64_t in) {
    return {upsample_source(a, scale, linear, in).i0, upsample_source(b - 1, scale, linear, in).i1 + 1};
}

// The inputs that outputs [a, b) of a transposed convolution read along a dimension of `in` inputs: input i
// adds into outputs i * stride - pad + k for k in [0, kernel), so those with a + pad - kernel + 1 <=
// i * stride <= b - 1 + pad, within [0, in). An output that no input reaches (output_pad's rows, or a stride
// beyond the kernel) gives an empty range.
constexpr IndexRange deconv_input(std::int64_t a, std::int64_t b, std::int64_t kernel, std::int64_t stride,
                                  std::int64_t pad, std::int64_t in) {
    std::int64_t first = -floor_div(-(a + pad - kernel + 1), stride), end = floor_div(b - 1 + pad, stride) + 1;
    first = first < 0 ? 0 : first > in ? in : first;
    end = end > in ? in : end < first ? first : end;
    return {first, end};
}

}  // namespace dsl::scheduler
