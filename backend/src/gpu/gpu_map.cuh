// Element-wise kernels: one thread per element of a row, rows spread over blocks. `map` runs an operation
// over every element of a strided view of volumes (gpu_volumes.hpp: each kernel converts its views there,
// once; an image is a volume of depth 1); the operations every kernel file uses are here too.
#pragma once

#include "../tensors/narrow.hpp"
#include "gpu_common.cuh"

#include <algorithm>
#include <cstdint>

namespace dsl::backend::gpu {

// A strided operand as the kernels see it; element (n, c, z, y, x) is at base[n*sn + c*sc + z*sd + y*sh + x].
template <typename T>
struct Operand {
    T* base = nullptr;
    std::int64_t sn = 0, sc = 0, sd = 0, sh = 0;
};

template <typename T>
Operand<T> operand(const VolumeView<T>& v) {
    return {v.base, v.stride_n, v.stride_c, v.stride_d, v.stride_h};
}

template <typename T>
Operand<T> operand(const BasicView<T>& v) {
    return operand(volumes(v));
}

inline Operand<const float> input(const ConstVolumes& v) { return operand(v); }
inline Operand<const float> input(const ConstView& v) { return operand(v); }

template <typename T>
Operand<T> dense_operand(T* data, const VolumeDims& d) {
    return operand(dense_volumes(data, d));
}

// The inputs an element-wise kernel loads for each element (the operation reads them all before it writes,
// so the output may be one of them); `count` <= N of them are used.
template <int N>
struct Inputs {
    static constexpr int slots = N > 0 ? N : 1;
    Operand<const float> op[slots];
    int count = N;
};

template <typename... V>
Inputs<sizeof...(V)> inputs(const V&... views) {
    return Inputs<sizeof...(V)>{{input(views)...}, static_cast<int>(sizeof...(V))};
}

inline Inputs<0> no_inputs() { return {}; }

// Rows (n, c, z, y) of `w` contiguous elements.
struct Geometry {
    std::int64_t n = 0, c = 0, d = 1, h = 0, w = 0;
};

// How far the rows of a kernel may be folded into longer ones: per-element kernels (`all`) need no
// coordinates, per-channel ones (`rows`) need n and c, windowed ones (`none`) every coordinate.
enum class Merge { none, rows, all };

// Folds outer dimensions into the row wherever every operand lays them out without a gap (a dense tensor is
// one row; a tile without left and right margins has rows of whole planes), so that short rows do not leave
// threads idle. A folded dimension keeps size 1, so the kernels' coordinates stay valid. An image's depth of
// 1 is never folded: its rows fold as its planes' did.
template <typename Out, int N>
Geometry fold(const VolumeDims& d, Merge merge, const Operand<Out>& out, const Inputs<N>& in) {
    std::int64_t size[4] = {d.n, d.c, d.d, d.h};
    std::int64_t w = d.w;
    if (merge == Merge::none) return {d.n, d.c, d.d, d.h, d.w};
    const auto stride = [](const auto& op, int i) { return i == 0 ? op.sn : i == 1 ? op.sc : i == 2 ? op.sd : op.sh; };
    // The innermost dimension not yet folded into the row (-1: the row itself).
    int inner = -1;
    for (int i = 3; i >= (merge == Merge::rows ? 2 : 0); --i) {
        if (size[i] == 1) continue;
        const auto folds_in = [&](const auto& op) {
            return stride(op, i) == (inner < 0 ? w : size[inner] * stride(op, inner));
        };
        bool folds = folds_in(out);
        for (int k = 0; k < in.count; ++k) folds = folds && folds_in(in.op[k]);
        if (!folds) {
            inner = i;
            continue;
        }
        if (inner < 0)
            w *= size[i];
        else
            size[inner] *= size[i];
        size[i] = 1;
    }
    return {size[0], size[1], size[2], size[3], w};
}

struct NoRow {};

template <int U, int N, typename Out, typename Op>
__global__ void __launch_bounds__(256) map_kernel(Geometry g, Operand<Out> out, Inputs<N> in, Op op) {
    constexpr int S = Inputs<N>::slots;
    const std::int64_t rows = g.n * g.c * g.d * g.h;
    const std::int64_t row_step = std::int64_t(gridDim.y) * blockDim.y;
    const std::int64_t col_step = std::int64_t(gridDim.x) * blockDim.x * U;
    for (std::int64_t r = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += row_step) {
        // An image's planes (depth 1) divide no further than before.
        const std::int64_t y = r % g.h, t = r / g.h, z = g.d == 1 ? 0 : t % g.d, nc = g.d == 1 ? t : t / g.d;
        const std::int64_t c = nc % g.c, n = nc / g.c;
        const auto row = op.row(n, c, z, y);
        Out* const out_row = out.base + (n * out.sn + c * out.sc + z * out.sd + y * out.sh);
        const float* in_row[S];
#pragma unroll
        for (int k = 0; k < S; ++k)
            in_row[k] = k < in.count
                            ? in.op[k].base + (n * in.op[k].sn + c * in.op[k].sc + z * in.op[k].sd + y * in.op[k].sh)
                            : nullptr;
        for (std::int64_t x0 = std::int64_t(blockIdx.x) * blockDim.x * U + threadIdx.x; x0 < g.w; x0 += col_step) {
            // Every load of the U elements is issued before any store: more memory traffic in flight, and an
            // output that aliases an input is read before it is written.
            float v[U][S] = {};
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const std::int64_t x = x0 + std::int64_t(u) * blockDim.x;
#pragma unroll
                for (int k = 0; k < S; ++k)
                    if (x < g.w && k < in.count) v[u][k] = in_row[k][x];
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const std::int64_t x = x0 + std::int64_t(u) * blockDim.x;
                if (x < g.w) out_row[x] = op(row, v[u], x);
            }
        }
    }
}

template <int U, int N, typename Out, typename Op>
void launch_map(const char* kernel, const Geometry& g, Operand<Out> out, const Inputs<N>& in, const Op& op) {
    int bx = 32;
    while (bx < 256 && std::int64_t(bx) * U < g.w) bx *= 2;
    const int by = 256 / bx;
    const auto gx = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(g.w, std::int64_t(bx) * U), 65535));
    const auto gy = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(g.n * g.c * g.d * g.h, by), 65535));
    map_kernel<U><<<dim3(gx, gy), dim3(bx, by), 0, gpu::stream()>>>(g, out, in, op);
    check_launch(kernel);
}

// out(n, c, z, y, x) = op(row(n, c, z, y), inputs at (n, c, z, y, x), x) over `d`.
template <int N, typename Out, typename Op>
void map(const char* kernel, const VolumeDims& d, Merge merge, Operand<Out> out, const Inputs<N>& in, const Op& op) {
    if (d.elements() == 0) return;
    const Geometry g = fold(d, merge, out, in);
    // Four elements per thread where rows are long enough to keep the threads busy.
    if (g.w >= 4 * 32)
        launch_map<4>(kernel, g, out, in, op);
    else
        launch_map<1>(kernel, g, out, in, op);
}

// The leaky ReLU of `slope` (relu's is 0), in float: the activation's, and that of the layers a ReLU is
// fused into.
__device__ inline float leaky(float v, float slope) { return v > 0.0f ? v : slope * v; }

// Operations on rows that need nothing per row.
struct PerElement {
    __device__ NoRow row(std::int64_t, std::int64_t, std::int64_t, std::int64_t) const { return {}; }
};

struct Fill : PerElement {
    float value;
    template <int S>
    __device__ float operator()(NoRow, const float (&)[S], std::int64_t) const {
        return value;
    }
};

struct Copy : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return v[0];
    }
};

// y + x in float, as `y += x` (accumulate, unpack's add).
struct Add2 : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return __fadd_rn(v[0], v[1]);
    }
};

inline void zero(const Volumes& v) { map("fill", v.dims, Merge::all, operand(v), no_inputs(), Fill{{}, 0.0f}); }

// A float rounded to 16 bits (to the nearest, ties to even: the host's rounding), as an element of a 16-bit
// output (a dense copy that a map writes whole, folded).
struct Narrow16 : PerElement {
    bool bfloat;
    template <int S>
    __device__ std::uint16_t operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return to_16(v[0], bfloat);
    }
};

// 16 bits beside a strided float view of extents `d`, densely: element (n, c, z, y, x) at
// (((n * d.c + c) * d.d + z) * d.h + y) * d.w + x. Their operations find each row there by its coordinates,
// so they run unfolded (Merge::none).
template <typename T>
struct Dense16 {
    T* dense;
    VolumeDims d;
    bool bfloat;
    __device__ T* row(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y) const {
        return dense + (((n * d.c + c) * d.d + z) * d.h + y) * d.w;
    }
};

// The view's elements from the dense 16 bits, widened.
struct Widen16 : Dense16<const std::uint16_t> {
    template <int S>
    __device__ float operator()(const std::uint16_t* row, const float (&)[S], std::int64_t x) const {
        return from_16(row[x], bfloat);
    }
};

// The view's elements rounded to 16 bits (to the nearest, ties to even: the host's rounding), their bits
// written densely and the rounded values back into the view: one pass over both.
struct Narrow16InPlace : Dense16<std::uint16_t> {
    template <int S>
    __device__ float operator()(std::uint16_t* row, const float (&v)[S], std::int64_t x) const {
        const std::uint16_t h = to_16(v[0], bfloat);
        row[x] = h;
        return from_16(h, bfloat);
    }
};

}  // namespace dsl::backend::gpu
