// Reductions: sums over groups of elements (a channel over its samples and places; or an (n, c) plane, or
// volume, over its places), in double. Each warp sums one chunk of one group; a second kernel adds a group's
// chunks in a fixed order, so the result does not depend on scheduling.
#pragma once

#include "gpu_common.cuh"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace dsl::backend::gpu {

struct ReduceGeometry {
    std::int64_t groups_c = 1;  // group g is (g / groups_c, g % groups_c)
    std::int64_t groups = 0;
    // Row r of a group is (rn, rz, ry) = (r / rows_h / rows_d, r / rows_h % rows_d, r % rows_h).
    std::int64_t rows_d = 1, rows_h = 1;
    std::int64_t w = 1;         // elements per row
    std::int64_t elements = 0;  // per group
    std::int64_t chunks = 1;    // per group
};

// Strides of a group's two coordinates and of a row's three.
struct ReduceOperand {
    const float* base = nullptr;
    std::int64_t group_n = 0, group_c = 0, row_n = 0, row_d = 0, row_h = 0;
};

template <int K>
struct ReduceInputs {
    ReduceOperand op[K];
};

inline __device__ double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// The sum of every thread's `total` in this block (of at most 256 threads, a multiple of 32) into
// partials[blockIdx.x]: the losses' per-block sums, which the host adds in double.
inline __device__ void store_block_sum(double total, double* partials) {
    __shared__ double warp_totals[8];
    total = warp_sum(total);
    if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = total;
    __syncthreads();
    if (threadIdx.x == 0) {
        double block_total = 0.0;
        for (unsigned w = 0; w < blockDim.x / 32; ++w) block_total += warp_totals[w];
        partials[blockIdx.x] = block_total;
    }
}

template <int K, typename Term>
__global__ void __launch_bounds__(256)
    reduce_kernel(ReduceGeometry g, ReduceInputs<K> in, Term term, double* partials) {
    constexpr int Q = Term::quantities;
    constexpr int U = 4;
    const int lane = threadIdx.x % 32;
    const std::int64_t warps = blockDim.x / 32;
    const std::int64_t units = g.groups * g.chunks;
    for (std::int64_t unit = std::int64_t(blockIdx.x) * warps + threadIdx.x / 32; unit < units;
         unit += std::int64_t(gridDim.x) * warps) {
        const std::int64_t group = unit / g.chunks, chunk = unit % g.chunks;
        const std::int64_t gn = group / g.groups_c, gc = group % g.groups_c;
        const auto constants = term.group(gn, gc);
        const float* base[K];
#pragma unroll
        for (int k = 0; k < K; ++k) base[k] = in.op[k].base + (gn * in.op[k].group_n + gc * in.op[k].group_c);
        const std::int64_t end = g.elements * (chunk + 1) / g.chunks;
        std::int64_t e = g.elements * chunk / g.chunks + lane;
        // The lane's element as row (rn, rz, ry) and column x, stepped without dividing unless it changes rows.
        std::int64_t x = e % g.w, r = e / g.w, ry = r % g.rows_h, rz = r / g.rows_h % g.rows_d,
                     rn = r / g.rows_h / g.rows_d;
        std::int64_t offset[K];
#pragma unroll
        for (int k = 0; k < K; ++k) offset[k] = rn * in.op[k].row_n + rz * in.op[k].row_d + ry * in.op[k].row_h;
        double acc[Q] = {};
        while (e < end) {
            float v[U][K] = {};
            bool valid[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                valid[u] = e < end;
#pragma unroll
                for (int k = 0; k < K; ++k)
                    if (valid[u]) v[u][k] = base[k][offset[k] + x];
                e += 32;
                x += 32;
                if (x >= g.w) {
                    // Rows of 32 or more are crossed one at a time: divide only for shorter ones.
                    const std::int64_t q = x < 2 * g.w ? 1 : x / g.w;
                    x -= q * g.w;
                    ry += q;
                    if (ry >= g.rows_h) {
                        const std::int64_t p = ry < 2 * g.rows_h ? 1 : ry / g.rows_h;
                        rz += p;
                        ry -= p * g.rows_h;
                        if (rz >= g.rows_d) {  // always, for an image's depth of 1
                            const std::int64_t t = rz < 2 * g.rows_d ? 1 : rz / g.rows_d;
                            rn += t;
                            rz -= t * g.rows_d;
                        }
                    }
#pragma unroll
                    for (int k = 0; k < K; ++k)
                        offset[k] = rn * in.op[k].row_n + rz * in.op[k].row_d + ry * in.op[k].row_h;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (valid[u]) term.add(constants, v[u], acc);
        }
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            const double s = warp_sum(acc[q]);
            if (lane == 0) partials[unit * Q + q] = s;
        }
    }
}

// out[g * quantities + q] = the sum over chunks of the partials, in chunk order.
template <typename Out>
__global__ void sum_chunks_kernel(const double* partials, std::int64_t outputs, std::int64_t chunks, int quantities,
                                  Out* out) {
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outputs;
         i += std::int64_t(gridDim.x) * blockDim.x) {
        const std::int64_t group = i / quantities, q = i % quantities;
        double acc = 0.0;
        for (std::int64_t k = 0; k < chunks; ++k) acc += partials[(group * chunks + k) * quantities + q];
        out[i] = static_cast<Out>(acc);
    }
}

// Σ x
struct SumTerm {
    static constexpr int inputs = 1, quantities = 1;
    struct Group {};
    __device__ Group group(std::int64_t, std::int64_t) const { return {}; }
    __device__ void add(Group, const float (&v)[1], double (&acc)[1]) const { acc[0] += v[0]; }
};

// Per channel over the samples and places; per (n, c) over the places (an image's plane, a volume's planes).
enum class Over { channels, planes };

// out[group * quantities + q] (device memory) = the group's sums over `views` (of dims `d`). Groups are channels
// or (n, c) planes (volumes).
template <typename Term, typename Out>
void reduce(const char* kernel, const VolumeDims& d, Over over, const std::array<ConstVolumes, Term::inputs>& views,
            const Term& term, Out* out) {
    constexpr int K = Term::inputs, Q = Term::quantities;
    ReduceGeometry g;
    g.groups_c = std::max<std::int64_t>(d.c, 1);
    g.groups = over == Over::channels ? d.c : d.n * d.c;
    if (g.groups == 0) return;
    bool rows_follow = true;  // each plane is one row
    for (const ConstVolumes& v : views) rows_follow = rows_follow && (d.h == 1 || v.stride_h == d.w);
    g.rows_h = rows_follow ? 1 : d.h;
    g.w = rows_follow ? d.h * d.w : d.w;
    // A volume's planes follow one another as one row, or as more rows of one plane; an image's depth of 1
    // leaves its rows as they were.
    g.rows_d = d.d;
    bool planes_follow = d.d > 1;
    for (const ConstVolumes& v : views)
        planes_follow = planes_follow && v.stride_d == (rows_follow ? g.w : g.rows_h * v.stride_h);
    if (planes_follow) {
        if (rows_follow)
            g.w *= d.d;
        else
            g.rows_h *= d.d;
        g.rows_d = 1;
    }
    g.elements = (over == Over::channels ? d.n : 1) * d.points();
    if (g.elements == 0) {
        check(cudaMemsetAsync(out, 0, static_cast<std::size_t>(g.groups * Q) * sizeof(Out), gpu::stream()),
              "cudaMemsetAsync (empty reduction)");
        return;
    }
    ReduceInputs<K> in;
    for (int k = 0; k < K; ++k) {
        const ConstVolumes& v = views[static_cast<std::size_t>(k)];
        in.op[k] = over == Over::channels ? ReduceOperand{v.base, 0, v.stride_c, v.stride_n, v.stride_d, v.stride_h}
                                          : ReduceOperand{v.base, v.stride_n, v.stride_c, 0, v.stride_d, v.stride_h};
    }
    // Enough warps to fill a large GPU several times over, each with at least ~1k elements to sum.
    constexpr std::int64_t target_warps = 8192;
    g.chunks = std::max<std::int64_t>(1, std::min(ceil_div(target_warps, g.groups), ceil_div(g.elements, 1024)));
    const std::int64_t units = g.groups * g.chunks;
    Context& ctx = context();
    double* partials = ctx.partials.as<double>(units * Q);
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(units, 8), std::int64_t{1} << 20));
    reduce_kernel<K><<<blocks, 256, 0, gpu::stream()>>>(g, in, term, partials);
    check_launch(kernel);
    const std::int64_t outputs = g.groups * Q;
    const auto sum_blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(outputs, 256), 65535));
    sum_chunks_kernel<<<sum_blocks, 256, 0, gpu::stream()>>>(partials, outputs, g.chunks, Q, out);
    check_launch(kernel);
}

}  // namespace dsl::backend::gpu
