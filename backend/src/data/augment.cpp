// Augmentation of each sample of each epoch (augment.hpp).
#include "augment.hpp"

#include "../random/splitmix.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dsl::backend::data {

std::optional<AugmentOptions> parse_augment(const std::string& text, std::string& error) {
    AugmentOptions o;
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t end = std::min(text.find(',', at), text.size());
        const std::string word = text.substr(at, end - at);
        if (word == "flip")
            o.flip = true;
        else if (word == "transpose")
            o.transpose = true;
        else {
            error = fmt::format("--augment '{}': '{}' is not an augmentation: give flip, transpose or "
                                "flip,transpose",
                                text, word);
            return std::nullopt;
        }
        at = end + 1;
    }
    return o;
}

Augmentation augmentation_of(const AugmentOptions& o, std::uint64_t seed, std::int64_t epoch, std::int64_t sample,
                             const Index& extents) {
    const int rank = extents.rank();
    Augmentation a;
    a.order.resize(static_cast<std::size_t>(rank));
    a.flip.assign(static_cast<std::size_t>(rank), false);
    for (int k = 0; k < rank; ++k) a.order[static_cast<std::size_t>(k)] = k;
    std::uint64_t key = splitmix64(splitmix64(splitmix64(seed ^ 0x4155474d454e54ull) ^ static_cast<std::uint64_t>(epoch)) ^
                                   static_cast<std::uint64_t>(sample));
    const auto draw = [&key] { return key = splitmix64(key); };
    if (o.flip)
        for (int k = 0; k < rank; ++k) a.flip[static_cast<std::size_t>(k)] = (draw() & 1) != 0;
    if (o.transpose)
        // Fisher-Yates over each group of axes of equal extent, in the order of their first axis.
        for (int k = rank - 1; k > 0; --k) {
            std::vector<int> equal;  // the axes before k of k's extent
            for (int j = 0; j <= k; ++j)
                if (extents[j] == extents[k]) equal.push_back(j);
            const int j = equal[static_cast<std::size_t>(draw() % equal.size())];
            std::swap(a.order[static_cast<std::size_t>(k)], a.order[static_cast<std::size_t>(j)]);
        }
    return a;
}

}  // namespace dsl::backend::data
