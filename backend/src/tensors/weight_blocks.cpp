#include "weight_blocks.hpp"

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

void narrow_weight_blocks(const Dims& w, const float* blocked, const WeightBlocks16& to, bool bfloat,
                          std::uint16_t* out) {
    DSL_INTERNAL_CHECK(has_weight_blocks(w), "weight blocks: F and C must be multiples of 16");
    const std::int64_t taps = w.points(), in_blocks = w.c / 16, blocks = w.n / 16 * in_blocks;
    DSL_INTERNAL_CHECK(static_cast<std::int64_t>(to.taps.size()) == taps, "16-bit weight blocks of other taps");
    // Where each of a block's elements goes, in the source's order (channel-major, the filters innermost).
    std::array<std::int64_t, 256> place{};
    for (std::int64_t c = 0; c < 16; ++c)
        for (std::int64_t f = 0; f < 16; ++f) place[static_cast<std::size_t>(c * 16 + f)] = to.inner[f * 16 + c];
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t outer = b / in_blocks * to.block_f + b % in_blocks * to.block_c;
        for (std::int64_t t = 0; t < taps; ++t) {
            const float* from = blocked + (b * taps + t) * 256;
            std::uint16_t* block = out + outer + to.taps[static_cast<std::size_t>(t)];
            for (std::size_t e = 0; e < 256; ++e) block[place[e]] = to_16(from[e], bfloat);
        }
    }
}

}  // namespace dsl::backend
