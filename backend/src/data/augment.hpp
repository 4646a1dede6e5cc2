// Augmentation that commutes with every split (`--augment flip,transpose`): each sample of each epoch is
// flipped along each spatial axis at random and its equal-sized spatial axes permuted at random (a cube's 48
// symmetries, as CosmoFlow's training uses), a pure function of (seed, epoch, sample). A process reads its
// tile of the augmented sample directly, as the block of the stored sample that the flips and the permutation
// take it to, so that every schedule trains on the same data as one process; pixel and voxel labels move with
// their inputs.
#pragma once

#include <dsl/backend/view.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dsl::backend::data {

struct AugmentOptions {
    bool flip = false, transpose = false;
    bool any() const { return flip || transpose; }
};
// "flip", "transpose" or "flip,transpose"; nothing with the reason otherwise.
std::optional<AugmentOptions> parse_augment(const std::string& text, std::string& error);

// One sample's augmentation: augmented axis k is stored axis order[k], reversed where flip[k].
struct Augmentation {
    std::vector<int> order;
    std::vector<bool> flip;
};
// The augmentation of `sample` in `epoch`: flips of every axis, a permutation within each group of axes of equal
// extent in `extents` (a sample's spatial dims).
Augmentation augmentation_of(const AugmentOptions& o, std::uint64_t seed, std::int64_t epoch, std::int64_t sample,
                             const Index& extents);

// Reads the block of the augmented sample at `at` of `out`'s extents (a sample's, of `whole` spatial extents):
// `read` fills a dense block of the stored sample at a place with given dims, which is then moved into `out`.
template <typename T>
void read_augmented(const Augmentation& a, const Index& whole, const Index& at, BasicView<T> out,
                    const std::function<void(const Index& at, BasicView<T> dense)>& read) {
    const Dims d = out.dims;
    const int rank = d.rank();
    Index from = Index::filled(rank, 0), extents = Index::filled(rank, 0);
    for (int k = 0; k < rank; ++k) {
        const int j = a.order[static_cast<std::size_t>(k)];
        extents[j] = d.space[k];
        from[j] = a.flip[static_cast<std::size_t>(k)] ? whole[k] - at[k] - d.space[k] : at[k];
    }
    const Dims stored{d.n, d.c, extents};
    std::vector<T> block(static_cast<std::size_t>(stored.elements()));
    const BasicView<T> dense = dense_view(block.data(), stored);
    read(from, dense);
    // Each row of `out` (place p within the block, its last axis from 0) from the stored block: its first
    // element at place q, the rest a step of the stored axis the last one reads (backwards where flipped).
    const int last = rank - 1;
    const int along = a.order[static_cast<std::size_t>(last)];
    const std::int64_t step = a.flip[static_cast<std::size_t>(last)] ? -dense.stride[along] : dense.stride[along];
    for_each_row(out, [&](std::int64_t n, std::int64_t c, const Index& p, T* row) {
        Index q = Index::filled(rank, 0);
        for (int k = 0; k < rank; ++k)
            q[a.order[static_cast<std::size_t>(k)]] = a.flip[static_cast<std::size_t>(k)] ? d.space[k] - 1 - p[k] : p[k];
        const T* first = &dense.at(n, c, q);
        for (std::int64_t x = 0; x < d.space[last]; ++x) row[x] = first[x * step];
    });
}

}  // namespace dsl::backend::data
