#include "weight_blocks.hpp"

#include "../kernels/avx512_clone.hpp"
#include "narrow.hpp"

#include <dsl/base/error.hpp>

#include <cstdint>

namespace dsl::backend {
namespace {

// Calls move(plain, blocked) for every element, a 16 x 16 block of filters and channels per thread: `plain`
// and `blocked` its two places, the plain one's channels (and taps) in order for each filter.
template <typename F>
void each_block(const Dims& w, F&& move) {
    DSL_INTERNAL_CHECK(has_weight_blocks(w), "weight blocks: F and C must be multiples of 16");
    const std::int64_t inputs = w.c, taps = w.points(), in_blocks = inputs / 16;
    const std::int64_t blocks = w.n / 16 * in_blocks;
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t f0 = b / in_blocks * 16, c0 = b % in_blocks * 16;
        for (std::int64_t f = 0; f < 16; ++f)
            for (std::int64_t c = 0; c < 16; ++c)
                for (std::int64_t t = 0; t < taps; ++t)
                    move(((f0 + f) * inputs + c0 + c) * taps + t, (b * taps + t) * 256 + c * 16 + f);
    }
}

}  // namespace

bool has_weight_blocks(const Dims& w) { return w.n > 0 && w.c > 0 && w.n % 16 == 0 && w.c % 16 == 0; }

void block_weights(const Dims& w, const float* plain, float* blocked) {
    each_block(w, [&](std::int64_t p, std::int64_t b) { blocked[b] = plain[p]; });
}

void unblock_weights(const Dims& w, const float* blocked, float* plain) {
    each_block(w, [&](std::int64_t p, std::int64_t b) { plain[p] = blocked[b]; });
}

namespace {

// One block: the 256 values of `from` (channel-major, filters innermost) rounded into `block` in its layout,
// each written place read from `source[place]`: gathers within the block, vectorized.
template <bool bfloat>
inline void narrow_block(const float* __restrict from, const std::int32_t* __restrict source,
                         std::uint16_t* __restrict block) {
#pragma omp simd
    for (std::int32_t d = 0; d < 256; ++d) block[d] = to_16(from[source[d]], bfloat);
}
DSL_AVX512_CLONE void narrow_block_bfloat16(const float* from, const std::int32_t* source, std::uint16_t* block) {
    narrow_block<true>(from, source, block);
}
DSL_AVX512_CLONE void narrow_block_float16(const float* from, const std::int32_t* source, std::uint16_t* block) {
    narrow_block<false>(from, source, block);
}

}  // namespace

void narrow_weight_blocks(const Dims& w, const float* blocked, const WeightBlocks16& to, bool bfloat,
                          std::uint16_t* out) {
    DSL_INTERNAL_CHECK(has_weight_blocks(w), "weight blocks: F and C must be multiples of 16");
    const std::int64_t taps = w.points(), in_blocks = w.c / 16, blocks = w.n / 16 * in_blocks;
    DSL_INTERNAL_CHECK(static_cast<std::int64_t>(to.taps.size()) == taps, "16-bit weight blocks of other taps");
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t outer = b / in_blocks * to.block_f + b % in_blocks * to.block_c;
        for (std::int64_t t = 0; t < taps; ++t) {
            const float* from = blocked + (b * taps + t) * 256;
            std::uint16_t* block = out + outer + to.taps[static_cast<std::size_t>(t)];
            bfloat ? narrow_block_bfloat16(from, to.source.data(), block)
                   : narrow_block_float16(from, to.source.data(), block);
        }
    }
}

}  // namespace dsl::backend
