// The form in which the GPU's kernels see a view: samples, channels, depth, rows and columns {n, c, d, h, w},
// rows contiguous. A volume's view is one as it is; a view of rank 2 or less is the planes that planes.hpp
// makes it, of depth 1, so that a kernel written over volumes runs over an image's rows as it would over its
// planes: the same threads, the same rows, the same sums. Every GPU kernel converts its views here, once, at
// its boundary; the rank (`volume`) is kept apart where the depth of 1 does not tell it (a volume's tile may
// be one plane deep, and still hashes and convolves as a volume).
#pragma once

#include "../tensors/planes.hpp"

#include <dsl/backend/tensor.hpp>

#include <cstdint>
#include <string>

namespace dsl::backend::gpu {

struct VolumeDims {
    std::int64_t n = 0, c = 0, d = 1, h = 0, w = 0;
    // constexpr, so that kernels call them too.
    constexpr std::int64_t points() const { return d * h * w; }  // per sample and channel
    constexpr std::int64_t elements() const { return n * c * points(); }
    bool operator==(const VolumeDims& o) const { return n == o.n && c == o.c && d == o.d && h == o.h && w == o.w; }
    bool operator!=(const VolumeDims& o) const { return !(*this == o); }
};

// Element (n, c, z, y, x) is at base[n * stride_n + c * stride_c + z * stride_d + y * stride_h + x].
template <typename T>
struct VolumeView {
    T* base = nullptr;
    VolumeDims dims;
    std::int64_t stride_n = 0, stride_c = 0, stride_d = 0, stride_h = 0;

    T& at(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y, std::int64_t x) const {
        return base[n * stride_n + c * stride_c + z * stride_d + y * stride_h + x];
    }
    // As PlaneView::dense for depth 1: the depth stride of a single plane is never stepped.
    bool dense() const {
        return stride_h == dims.w && (dims.d == 1 || stride_d == dims.h * dims.w) && stride_c == dims.points() &&
               stride_n == dims.c * stride_c;
    }
    operator VolumeView<const T>() const { return {base, dims, stride_n, stride_c, stride_d, stride_h}; }
};

using Volumes = VolumeView<float>;
using ConstVolumes = VolumeView<const float>;
using LabelVolumes = VolumeView<const std::int32_t>;

inline VolumeDims volumes(const Dims& d) {
    if (d.rank() == 3) return VolumeDims{d.n, d.c, d.space[0], d.space[1], d.space[2]};
    const PlaneDims p = planes(d);
    return VolumeDims{p.n, p.c, 1, p.h, p.w};
}

template <typename T>
VolumeView<T> volumes(const BasicView<T>& v) {
    if (v.dims.rank() == 3)
        return VolumeView<T>{v.base, volumes(v.dims), v.stride_n, v.stride_c, v.stride[0], v.stride[1]};
    const PlaneView<T> p = planes(v);
    return VolumeView<T>{p.base, volumes(v.dims), p.stride_n, p.stride_c, p.dims.h * p.stride_h, p.stride_h};
}

template <typename T>
VolumeView<T> dense_volumes(T* data, const VolumeDims& d) {
    return VolumeView<T>{data, d, d.c * d.points(), d.points(), d.h * d.w, d.w};
}

// Whether views of `d` are volumes: the windows, placements and hashes of rank 3.
inline bool is_volume(const Dims& d) { return d.rank() == 3; }

// Where a view's first element lies in its tensor: a volume's place as it is, an image's (plane_place) at
// depth 0.
struct VolumePlace {
    std::int64_t z = 0, y = 0, x = 0;
};

inline VolumePlace volume_place(const Index& at) {
    if (at.rank() == 3) return VolumePlace{at[0], at[1], at[2]};
    const PlanePlace p = plane_place(at);
    return VolumePlace{0, p.y, p.x};
}

// {n, c, d, h, w}, for messages.
inline std::string volume_text(const VolumeDims& d) {
    std::string s = "{";
    s += std::to_string(d.n);
    for (std::int64_t v : {d.c, d.d, d.h, d.w}) s += ", ", s += std::to_string(v);
    s += "}";
    return s;
}

}  // namespace dsl::backend::gpu
