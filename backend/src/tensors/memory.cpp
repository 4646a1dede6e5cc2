// The host's memory, and the fill of what lies outside a box through any memory.
#include <dsl/backend/memory.hpp>

#include "../kernels/avx512_clone.hpp"
#include "narrow.hpp"
#include "planes.hpp"

#include <algorithm>
#include <cstring>

namespace dsl::backend {

namespace {

// A run of `w` values rounded in place and their 16 bits written to `bits`, or widened from them: loops that
// vectorize (each element alone, branch-free), with AVX-512 where the CPU has it. Scalar, rounding took 10% of
// a ResNet-50 step at batch 4 in bfloat16.
template <bool bfloat>
inline void narrow_span(float* __restrict row, std::uint16_t* __restrict bits, std::int64_t w) {
#pragma omp simd
    for (std::int64_t x = 0; x < w; ++x) {
        const std::uint16_t h = to_16(row[x], bfloat);
        bits[x] = h;
        row[x] = from_16(h, bfloat);
    }
}
template <bool bfloat>
inline void widen_span(const std::uint16_t* __restrict bits, float* __restrict row, std::int64_t w) {
#pragma omp simd
    for (std::int64_t x = 0; x < w; ++x) row[x] = from_16(bits[x], bfloat);
}
DSL_AVX512_CLONE void narrow_bfloat16(float* row, std::uint16_t* bits, std::int64_t w) {
    narrow_span<true>(row, bits, w);
}
DSL_AVX512_CLONE void narrow_float16(float* row, std::uint16_t* bits, std::int64_t w) {
    narrow_span<false>(row, bits, w);
}
DSL_AVX512_CLONE void widen_bfloat16(const std::uint16_t* bits, float* row, std::int64_t w) {
    widen_span<true>(bits, row, w);
}
DSL_AVX512_CLONE void widen_float16(const std::uint16_t* bits, float* row, std::int64_t w) {
    widen_span<false>(bits, row, w);
}

// The host's memory: plain loops, row by row.
class HostMemory final : public Memory {
public:
    bool host() const override { return true; }
    float* allocate(std::int64_t count) override { return new float[static_cast<std::size_t>(count)](); }
    void release(float* data) override { delete[] data; }
    void fill(View v, float value) override {
        for_each_run(v, [&](float* run, std::int64_t w) { std::fill_n(run, w, value); });
    }
    void upload(const float* host, float* data, std::int64_t count) override {
        if (count > 0 && host != data) std::memcpy(data, host, static_cast<std::size_t>(count) * sizeof(float));
    }
    void download(const float* data, float* host, std::int64_t count) override { upload(data, host, count); }
    // A blocked view's message holds its runs (for_each_run) in order: a block of channels per place.
    void pack(ConstView v, float* out) override {
        for_each_run(v, [&](const float* run, std::int64_t w) { out = std::copy_n(run, w, out); });
    }
    void unpack(const float* in, View v, bool add) override {
        for_each_run(v, [&](float* run, std::int64_t w) {
            if (add)
                for (std::int64_t x = 0; x < w; ++x) run[x] += in[x];
            else
                std::copy_n(in, w, run);
            in += w;
        });
    }
    void synchronize() override {}
    void narrow(View v, scheduler::Precision p, std::uint16_t* out) override {
        p == scheduler::Precision::bfloat16 ? narrow_rows<true>(v, out) : narrow_rows<false>(v, out);
    }
    void widen(const std::uint16_t* in, scheduler::Precision p, View v) override {
        p == scheduler::Precision::bfloat16 ? widen_rows<true>(in, v) : widen_rows<false>(in, v);
    }

private:
    // One precision's loops (`bfloat` a constant, so that to_16 and from_16 inline to its conversions).
    template <bool bfloat>
    static void narrow_rows(View v, std::uint16_t* out) {
        each_row(v, out, [](float* row, std::uint16_t* bits, std::int64_t w) {
            bfloat ? narrow_bfloat16(row, bits, w) : narrow_float16(row, bits, w);
        });
    }
    template <bool bfloat>
    static void widen_rows(const std::uint16_t* in, View v) {
        each_row(v, in, [](float* row, const std::uint16_t* bits, std::int64_t w) {
            bfloat ? widen_bfloat16(bits, row, w) : widen_float16(bits, row, w);
        });
    }

    // f(row, bits, w) for every row of `v` and its w 16-bit values, which lie densely in v's order from
    // `bits`: each sample's channels on OpenMP's threads (a U-Net's 64 channels of 512 x 512 took longer to
    // round on one thread, through the conversions' pointers, than to convolve: 47 ms, now 17). A blocked
    // view's rows are its runs (for_each_run): a block of channels at each place of a row, in memory order.
    template <typename Bits, typename F>
    static void each_row(View v, Bits* bits, F&& f) {
        if (v.dims.elements() == 0) return;
        const std::int64_t lanes = v.lanes;
        if (v.blocked()) v.dims.c /= lanes, v.lanes = 1;  // a block's place as a single element
        const Dims& d = v.dims;
        const std::int64_t w = row_length(d) * lanes, plane = d.points() * lanes;
#pragma omp parallel for collapse(2) schedule(static)
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t c = 0; c < d.c; ++c) {
                Bits* at = bits + (n * d.c + c) * plane;
                if (d.rank() == 0) {
                    f(&v.at(n, c, Index{}), at, lanes);
                    continue;
                }
                for_each_row_start(d.space, [&](const Index& i) {
                    f(&v.at(n, c, i), at, w);
                    at += w;
                });
            }
    }
};

}  // namespace

Memory& host_memory() {
    static HostMemory memory;
    return memory;
}

void fill_outside(Memory& memory, View p, Space<Range> keep, float v) {
    // Slabs before and after the kept range along each dimension in turn, each across what the slabs of the
    // dimensions before it left: disjoint, one fill each.
    View rest = p;
    for (int d = 0; d < p.dims.rank(); ++d) {
        const std::int64_t extent = rest.dims.space[d];
        const Range k = keep[d].meet({0, extent});
        const Range kept = k.empty() ? Range{k.lo, k.lo} : k;
        for (const Range slab : {Range{0, kept.lo}, Range{kept.hi, extent}}) {
            if (slab.empty()) continue;
            Index at = Index::filled(p.dims.rank(), 0);
            at[d] = slab.lo;
            Dims dims = rest.dims;
            dims.space[d] = slab.size();
            memory.fill(rest.sub(0, 0, at, dims), v);
        }
        Index at = Index::filled(p.dims.rank(), 0);
        at[d] = kept.lo;
        Dims dims = rest.dims;
        dims.space[d] = kept.size();
        rest = rest.sub(0, 0, at, dims);
    }
}

}  // namespace dsl::backend
