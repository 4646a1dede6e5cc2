// The synthetic data set: its definition (a pure function of seed, sample and coordinates) and the host's
// generator. The GPU makes the same values where its tensors live (SyntheticKernels in kernels.hpp).
#pragma once

#include <dsl/backend/tensor.hpp>

#include <cstdint>

namespace dsl::backend {

// A learnable synthetic data set: every sample (per-sample labels) or every region of pixels (per-pixel
// labels) has a class, drawn from a hash, and the inputs carry it, so a network can learn to find it. Below
// for images; a volume's is the same with a depth index z: hashes take (..., z, y, x), the field's sine
// fz * z + fy * y + fx * x + phase, classes are cubes of `block` label voxels, each found from
// (z * label_d / depth, y * label_h / height, x * label_w / width), and targets read under their centres.
//
//   class      per sample:  k = hash(seed, sample) mod classes
//              per pixel:   the label grid [label_h, label_w] is cut into squares of `block` label pixels and
//                           each square gets k = hash(seed, sample, y / block, x / block) mod classes
//   input      x(s, c, y, x) = 0.5 * u(hash(seed, s, c, y, x))                     noise, u uniform in [-1, 1)
//                            + 0.5 * a * sin(fy * y + fx * x + phase)              a smooth field per (s, c)
//                            + signal * (1 + k / C)  if c == k mod C, else 0       the class's mark
//              where k is the class of the sample, or of the label pixel that input pixel (y, x) falls in:
//              (y * label_h / height, x * label_w / width). Classes sharing a channel differ in strength.
//
//   target     a float label [TC, TH, TW] (a label [K] is [K, 1, 1]), for the regression losses: at the input
//              pixel under the centre of the label pixel, iy = ((2y + 1) * height) / (2 TH), likewise ix,
//                t(s, c, y, x) = sigmoid(sum over input channels i of w(c, i) * x(s, i, iy, ix)),
//              w(c, i) = u(hash(seed, c, i)): a smooth function of the input, in (0, 1) so that
//              bce_with_logits can take it as well as mse and l1.
//
// Every value depends on global coordinates only, so a tile equals the same region of the whole tensor.
struct SyntheticData {
    std::uint64_t seed = 0;
    std::int64_t channels = 1;              // C of the input
    std::int64_t height = 1, width = 1;     // H and W of the input
    std::int64_t depth = 0;                 // D of an input volume; 0 for an image
    std::int64_t classes = 2;               // at least 1
    std::int64_t label_h = 0, label_w = 0;  // the per-pixel label grid; 0 for one label per sample
    std::int64_t label_d = 0;               // and its depth, for volumes
    std::int64_t block = 1;                 // label pixels per side of a class square
    float signal = 1.0f;
    std::int64_t target_c = 0, target_h = 1, target_w = 1;  // a float label's shape; target_c 0 for none
    std::int64_t target_d = 1;                              // and its depth, for volumes

    bool per_pixel() const { return label_h > 0 && label_w > 0; }  // or per voxel
    bool volume() const { return depth > 0; }

    std::int32_t label(std::int64_t sample) const;                                  // per-sample labels
    std::int32_t label(std::int64_t sample, std::int64_t y, std::int64_t x) const;  // per-pixel, label grid
    std::int32_t label(std::int64_t sample, std::int64_t z, std::int64_t y, std::int64_t x) const;  // per voxel
    float input(std::int64_t sample, std::int64_t c, std::int64_t y, std::int64_t x) const;
    float input(std::int64_t sample, std::int64_t c, std::int64_t z, std::int64_t y, std::int64_t x) const;

    // The tile whose first element is global sample `sample0`, channel c0 and place `at` (of the tile's rank:
    // an image's row and column, a volume's depth, row and column).
    void fill_inputs(std::int64_t sample0, std::int64_t c0, const Index& at, View tile) const;
    float target(std::int64_t sample, std::int64_t c, std::int64_t y, std::int64_t x) const;  // a float label's
    float target(std::int64_t sample, std::int64_t c, std::int64_t z, std::int64_t y, std::int64_t x) const;
    // Float labels {n, target_c, extents} from label place `at` ({n, target_c} for a label [N, K]).
    void fill_targets(std::int64_t sample0, const Index& at, View tile) const;
    // Labels {n, 1} per sample, or {n, 1, extents} per pixel or voxel from label place `at`.
    void fill_labels(std::int64_t sample0, const Index& at, BasicView<std::int32_t> tile) const;
};

}  // namespace dsl::backend
