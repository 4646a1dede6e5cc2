// How the CPU kernels that are written for images (planes.hpp) take a volume: as the planes of its depth
// slices, one after another, or as one plane of depth * height rows where the slices of every view follow
// one another without a gap. Images and vectors are a single slice, their own planes.
#pragma once

#include "../tensors/planes.hpp"

#include <dsl/backend/tensor.hpp>

#include <cstdint>
#include <vector>

namespace dsl::backend {

// The slices that a kernel runs over: `count` of them, a volume's depth slices, or one plane of them all when
// `merged`.
struct Slicing {
    std::int64_t count = 1;
    bool merged = false;
};

// Whether a view's depth slices lie a whole number of rows apart, so that row z * H + y of one plane is
// row y of slice z.
template <typename T>
bool rows_follow(const BasicView<T>& v) {
    return v.dims.rank() < 3 || v.stride[0] == v.dims.space[1] * v.stride[1];
}

// How views of the same dims are sliced: one slice for images and vectors; for volumes, one merged plane
// when `may_merge` (the kernel does not need to know a row's depth) and every view allows it, else a slice
// per depth index.
template <typename View, typename... Views>
Slicing slicing(bool may_merge, const View& first, const Views&... rest) {
    const Dims& d = first.dims;
    if (d.rank() < 3) return {};
    if (may_merge && rows_follow(first) && (rows_follow(rest) && ...)) return {1, true};
    return {d.space[0], false};
}

// Slice k of `v` as planes.
template <typename T>
PlaneView<T> slice(const BasicView<T>& v, const Slicing& s, std::int64_t k) {
    if (v.dims.rank() < 3) return planes(v);
    const Dims& d = v.dims;
    const std::int64_t rows = s.merged ? d.space[0] * d.space[1] : d.space[1];
    return PlaneView<T>{v.base + k * v.stride[0], PlaneDims{d.n, d.c, rows, d.space[2]}, v.stride_n, v.stride_c,
                        v.stride[1]};
}

// Every slice of `v` as planes, in order.
template <typename T>
std::vector<PlaneView<T>> slices(const BasicView<T>& v, const Slicing& s) {
    std::vector<PlaneView<T>> out;
    for (std::int64_t k = 0; k < s.count; ++k) out.push_back(slice(v, s, k));
    return out;
}

}  // namespace dsl::backend
