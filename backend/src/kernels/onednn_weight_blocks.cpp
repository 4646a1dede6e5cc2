#include "onednn_weight_blocks.hpp"

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsl::backend {

std::optional<WeightBlocks16> weight_blocks16(const dnnl::memory::desc& d) {
    const dnnl_memory_desc_t& m = d.data;
    if (m.format_kind != dnnl_blocked || m.ndims < 3 || m.offset0 != 0 ||
        (m.data_type != dnnl_bf16 && m.data_type != dnnl_f16))
        return std::nullopt;
    const auto& b = m.format_desc.blocking;
    std::array<std::int64_t, DNNL_MAX_NDIMS> block{};
    block.fill(1);
    for (int i = 0; i < b.inner_nblks; ++i) block[static_cast<std::size_t>(b.inner_idxs[i])] *= b.inner_blks[i];
    for (int k = 0; k < m.ndims; ++k)
        if (m.padded_dims[k] != m.dims[k] || block[static_cast<std::size_t>(k)] != (k < 2 ? 16 : 1))
            return std::nullopt;
    WeightBlocks16 out;
    out.block_f = b.strides[0];
    out.block_c = b.strides[1];
    // Within a block, the inner blocks outermost first: element (f, c)'s index in each, from the inner
    // blocks of its dimension that follow it. The inner blocks cover 16 x 16 (checked above), so a block's
    // places are 256 in a row, each of one element.
    std::array<bool, 256> taken{};
    for (std::int64_t f = 0; f < 16; ++f)
        for (std::int64_t c = 0; c < 16; ++c) {
            std::int64_t at = 0;
            for (int i = 0; i < b.inner_nblks; ++i) {
                const int dim = b.inner_idxs[i];
                std::int64_t below = 1;
                for (int j = i + 1; j < b.inner_nblks; ++j)
                    if (b.inner_idxs[j] == dim) below *= b.inner_blks[j];
                at = at * b.inner_blks[i] + (dim == 0 ? f : c) / below % b.inner_blks[i];
            }
            const auto place = static_cast<std::size_t>(at);
            if (place >= taken.size() || taken[place]) return std::nullopt;
            taken[place] = true;
            out.source[place] = static_cast<std::int32_t>(c * 16 + f);
        }
    for (int k = 0; k < m.ndims; ++k)
        if (b.strides[k] % 256 != 0) return std::nullopt;
    // The taps in the plain order, the last spatial dimension fastest.
    out.taps.assign(1, 0);
    for (int k = 2; k < m.ndims; ++k) {
        std::vector<std::int64_t> next;
        for (std::int64_t t : out.taps)
            for (std::int64_t i = 0; i < m.dims[k]; ++i) next.push_back(t + i * b.strides[k]);
        out.taps = std::move(next);
    }
    return out;
}

}  // namespace dsl::backend
