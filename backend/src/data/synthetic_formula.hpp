// The synthetic data set's formulas (synthetic.hpp defines them), shared by the host's generator (data.cpp)
// and the GPU's (gpu/gpu_synthetic.cu) so that both make the same values: the GPU's products and sums are
// the _rn intrinsics, which its compiler may not fuse into multiply-adds that round otherwise. Its sines
// and cosines differ from the host's in the last bits of a double, which reach a float only rarely, by one
// unit in its last place. (C++17: nvcc compiles the GPU's side.)
#pragma once

#include "../kernels/host_device.hpp"
#include "../random/splitmix.hpp"

#include <dsl/backend/synthetic.hpp>

#include <math.h>

#include <cstdint>

namespace dsl::backend::synthetic {

// Streams, so that noise, fields and classes of the same coordinates are independent.
enum Tag : std::uint64_t { tag_class = 1, tag_noise = 2, tag_field = 3, tag_target = 4 };

template <typename... Ts>
DSL_HOST_DEVICE std::uint64_t hash(std::uint64_t seed, Tag tag, Ts... values) {
    std::uint64_t h = splitmix64(seed ^ splitmix64(tag));
    ((h = splitmix64(h ^ static_cast<std::uint64_t>(values))), ...);
    return h;
}

DSL_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

DSL_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}

DSL_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

// Uniform in [-1, 1), exactly representable as a float.
DSL_HOST_DEVICE inline float symmetric(std::uint64_t h) {
    return static_cast<float>(static_cast<double>(h >> 40) * 0x1.0p-23 - 1.0);
}
// Uniform in [0, 1).
DSL_HOST_DEVICE inline double unit(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

DSL_HOST_DEVICE inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The smooth field of one (sample, channel): amplitude in [0.5, 1), frequencies of at most 0.3 radians per
// pixel (a period of 20 pixels or more), any phase.
struct Field {
    double amplitude, fy, fx, phase, fz;
    DSL_HOST_DEVICE Field(std::uint64_t seed, std::int64_t s, std::int64_t c)
        : amplitude(add(0.5, mul(0.5, unit(hash(seed, tag_field, s, c, 0))))),
          fy(mul(0.3, add(mul(2.0, unit(hash(seed, tag_field, s, c, 1))), -1.0))),
          fx(mul(0.3, add(mul(2.0, unit(hash(seed, tag_field, s, c, 2))), -1.0))),
          phase(mul(2.0 * M_PI, unit(hash(seed, tag_field, s, c, 3)))),
          fz(mul(0.3, add(mul(2.0, unit(hash(seed, tag_field, s, c, 4))), -1.0))) {}
    // amplitude * sin(fy*y + phase + fx*x) on an image, amplitude * sin(fz*z + fy*y + phase + fx*x) on a
    // volume, as sin(a)cos(b) + cos(a)sin(b): a tile needs sines of its rows and columns, not of every element.
    struct Terms {
        double sin, cos;
    };
    DSL_HOST_DEVICE Terms row(std::int64_t y) const { return terms(add(mul(fy, static_cast<double>(y)), phase)); }
    DSL_HOST_DEVICE Terms row(std::int64_t z, std::int64_t y) const {
        return terms(add(add(mul(fz, static_cast<double>(z)), mul(fy, static_cast<double>(y))), phase));
    }
    DSL_HOST_DEVICE Terms terms(double a) const { return {mul(amplitude, ::sin(a)), mul(amplitude, ::cos(a))}; }
    DSL_HOST_DEVICE static Terms column(double fx, std::int64_t x) {
        const double b = mul(fx, static_cast<double>(x));
        return {::sin(b), ::cos(b)};
    }
    DSL_HOST_DEVICE static double at(const Terms& row, const Terms& column) {
        return add(mul(row.sin, column.cos), mul(row.cos, column.sin));
    }
    DSL_HOST_DEVICE double at(std::int64_t y, std::int64_t x) const { return at(row(y), column(fx, x)); }
};

DSL_HOST_DEVICE inline std::int32_t sample_class(const SyntheticData& d, std::int64_t sample) {
    return static_cast<std::int32_t>(hash(d.seed, tag_class, sample) % static_cast<std::uint64_t>(d.classes));
}

// The class of label pixel (y, x).
DSL_HOST_DEVICE inline std::int32_t pixel_class(const SyntheticData& d, std::int64_t sample, std::int64_t y,
                                                std::int64_t x) {
    return static_cast<std::int32_t>(hash(d.seed, tag_class, sample, floor_div(y, d.block), floor_div(x, d.block)) %
                                     static_cast<std::uint64_t>(d.classes));
}

// The class of label voxel (z, y, x): cubes of `block` voxels.
DSL_HOST_DEVICE inline std::int32_t voxel_class(const SyntheticData& d, std::int64_t sample, std::int64_t z,
                                                std::int64_t y, std::int64_t x) {
    return static_cast<std::int32_t>(
        hash(d.seed, tag_class, sample, floor_div(z, d.block), floor_div(y, d.block), floor_div(x, d.block)) %
        static_cast<std::uint64_t>(d.classes));
}

// The mark that class k leaves on channel c.
DSL_HOST_DEVICE inline float mark(const SyntheticData& d, std::int64_t c, std::int32_t k) {
    return c == k % d.channels ? d.signal * static_cast<float>(1 + k / d.channels) : 0.0f;
}

// The class whose mark input pixel (y, x) carries.
DSL_HOST_DEVICE inline std::int32_t input_class(const SyntheticData& d, std::int64_t sample, std::int64_t y,
                                                std::int64_t x) {
    if (d.label_h > 0 && d.label_w > 0)
        return pixel_class(d, sample, floor_div(y * d.label_h, d.height), floor_div(x * d.label_w, d.width));
    return sample_class(d, sample);
}

// The class whose mark input voxel (z, y, x) carries.
DSL_HOST_DEVICE inline std::int32_t input_class(const SyntheticData& d, std::int64_t sample, std::int64_t z,
                                                std::int64_t y, std::int64_t x) {
    if (d.label_h > 0 && d.label_w > 0)
        return voxel_class(d, sample, floor_div(z * d.label_d, d.depth), floor_div(y * d.label_h, d.height),
                           floor_div(x * d.label_w, d.width));
    return sample_class(d, sample);
}

// An input value from its parts: the noise hash, the field's value, the mark.
DSL_HOST_DEVICE inline float input_value(std::uint64_t noise_hash, double field, float mark) {
    return add(add(0.5f * symmetric(noise_hash), static_cast<float>(0.5 * field)), mark);
}

DSL_HOST_DEVICE inline float input(const SyntheticData& d, std::int64_t sample, std::int64_t c, std::int64_t y,
                                   std::int64_t x) {
    return input_value(hash(d.seed, tag_noise, sample, c, y, x), Field(d.seed, sample, c).at(y, x),
                       mark(d, c, input_class(d, sample, y, x)));
}

// A volume's input.
DSL_HOST_DEVICE inline float input(const SyntheticData& d, std::int64_t sample, std::int64_t c, std::int64_t z,
                                   std::int64_t y, std::int64_t x) {
    const Field field(d.seed, sample, c);
    return input_value(hash(d.seed, tag_noise, sample, c, z, y, x),
                       Field::at(field.row(z, y), Field::column(field.fx, x)),
                       mark(d, c, input_class(d, sample, z, y, x)));
}

// The input place under the centre of target place t of `targets` places along a dimension of `inputs`.
DSL_HOST_DEVICE inline std::int64_t under(std::int64_t t, std::int64_t inputs, std::int64_t targets) {
    return (2 * t + 1) * inputs / (2 * targets);
}

// The weight of input channel i in target channel c.
DSL_HOST_DEVICE inline double mix(const SyntheticData& d, std::int64_t c, std::int64_t i) {
    return static_cast<double>(symmetric(hash(d.seed, tag_target, c, i)));
}

// A target from the sum of its weighted inputs: their sigmoid.
DSL_HOST_DEVICE inline float target_value(double z) { return static_cast<float>(1.0 / add(1.0, ::exp(-z))); }

}  // namespace dsl::backend::synthetic
