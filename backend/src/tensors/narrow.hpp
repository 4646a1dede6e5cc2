// Rounding float32 to 16 bits and back, for values stored in bfloat16 or float16 (precision=...): to the
// nearest representable value, ties to even, as PyTorch's and CUDA's conversions round. NaN stays NaN (a
// quiet one), infinities stay infinite, and a float16 beyond its largest finite value (65504) becomes
// infinite. The host's and the GPU's memories (gpu/gpu_memory.cu) share these.
#pragma once

#include "../kernels/host_device.hpp"

#include <cstdint>
#include <cstring>

namespace dsl::backend {

DSL_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    std::uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b;
#endif
}

DSL_HOST_DEVICE inline float bits_float(std::uint32_t b) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(b);
#else
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
#endif
}

// bfloat16: float32's top 16 bits, rounded.
DSL_HOST_DEVICE inline std::uint16_t to_bfloat16(float f) {
    const std::uint32_t b = float_bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((b >> 16) | 0x0040u);  // NaN, quiet
    return static_cast<std::uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

DSL_HOST_DEVICE inline float from_bfloat16(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

// float16 (IEEE binary16): 5 bits of exponent, 10 of mantissa; below 2^-14 subnormal, in steps of 2^-24.
DSL_HOST_DEVICE inline std::uint16_t to_float16(float f) {
    std::uint32_t x = float_bits(f);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65520 and up round to infinity
    if (x < 0x38800000u) {                                                    // below 2^-14: subnormal or zero
        if (x < 0x33000000u) return sign;                                     // at most 2^-25: zero
        const std::uint32_t shift = 126u - (x >> 23), m = (x & 0x7fffffu) | 0x800000u;
        std::uint32_t r = m >> shift;
        const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (r & 1u))) ++r;
        return static_cast<std::uint16_t>(sign | r);
    }
    const std::uint32_t r = x + 0xfffu + ((x >> 13) & 1u) - 0x38000000u;  // the exponent's bias, 127 to 15
    return static_cast<std::uint16_t>(sign | (r >> 13));
}

DSL_HOST_DEVICE inline float from_float16(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return bits_float(float_bits(v) | sign);
    }
    if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// A precision's 16 bits of a float, and back; `bfloat` picks bfloat16 over float16.
DSL_HOST_DEVICE inline std::uint16_t to_16(float f, bool bfloat) { return bfloat ? to_bfloat16(f) : to_float16(f); }
DSL_HOST_DEVICE inline float from_16(std::uint16_t h, bool bfloat) {
    return bfloat ? from_bfloat16(h) : from_float16(h);
}

}  // namespace dsl::backend
