// splitmix64: the 64-bit mixing function behind every value that must be a pure function of its indices
// (synthetic data, initial weights), so that any process can make any part without communicating. The GPU's
// kernels (gpu/gpu_synthetic.cu) use it too.
#pragma once

#include "../kernels/host_device.hpp"

#include <cstdint>

namespace dsl::backend {

DSL_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Dropout's mask: whether the element at a global place of a dropout layer (`key`: the seed and the layer)
// is kept in training step `step`, when it is dropped with probability `threshold` / 2^24
// (dropout_threshold). A hash of the step, the sample n, the channel c and each spatial index in order
// (an image's row y and column x; a volume's depth z first): a pure function of its arguments, so that every
// split of a tensor draws the same mask, and backward draws forward's again.
DSL_HOST_DEVICE inline std::uint64_t dropout_stream(std::uint64_t key, std::int64_t step, std::int64_t n,
                                                    std::int64_t c) {
    std::uint64_t h = splitmix64(key ^ static_cast<std::uint64_t>(step));
    h = splitmix64(h ^ static_cast<std::uint64_t>(n));
    return splitmix64(h ^ static_cast<std::uint64_t>(c));
}

// The stream after one more spatial index.
DSL_HOST_DEVICE inline std::uint64_t dropout_along(std::uint64_t h, std::int64_t i) {
    return splitmix64(h ^ static_cast<std::uint64_t>(i));
}

DSL_HOST_DEVICE inline bool dropout_kept(std::uint64_t h, std::uint32_t threshold) {
    return static_cast<std::uint32_t>(h >> 40) >= threshold;  // 24 uniform bits
}

// An image's element (n, c, y, x).
DSL_HOST_DEVICE inline bool dropout_keep(std::uint64_t key, std::int64_t step, std::int64_t n, std::int64_t c,
                                         std::int64_t y, std::int64_t x, std::uint32_t threshold) {
    return dropout_kept(dropout_along(dropout_along(dropout_stream(key, step, n, c), y), x), threshold);
}

// A volume's element (n, c, z, y, x).
DSL_HOST_DEVICE inline bool dropout_keep(std::uint64_t key, std::int64_t step, std::int64_t n, std::int64_t c,
                                         std::int64_t z, std::int64_t y, std::int64_t x, std::uint32_t threshold) {
    return dropout_kept(dropout_along(dropout_along(dropout_along(dropout_stream(key, step, n, c), z), y), x),
                        threshold);
}

// p in [0, 1) as a count of 2^24: an element is dropped with probability threshold / 2^24, p rounded to 2^-24.
inline std::uint32_t dropout_threshold(float p) {
    return static_cast<std::uint32_t>(static_cast<double>(p) * 16777216.0 + 0.5);
}

}  // namespace dsl::backend
