// The distributions initial parameters are drawn from, each draw a pure function of a stream (the seed's and
// the layer's) and the element's index in the whole tensor, so that every process makes its block alone.
#pragma once

#include "splitmix.hpp"

#include <cmath>
#include <cstdint>

namespace dsl::backend {

// Uniform in (0, 1).
inline double uniform(std::uint64_t stream, std::uint64_t i) {
    return (static_cast<double>(splitmix64(stream ^ splitmix64(i)) >> 11) + 0.5) * 0x1.0p-53;
}

// Standard normal (Box-Muller over two uniform draws).
inline double normal(std::uint64_t stream, std::uint64_t i) {
    const double u1 = uniform(stream, 2 * i), u2 = uniform(stream, 2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace dsl::backend
