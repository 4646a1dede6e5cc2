// The tile arithmetic of a redistribution (a shuffle) for the performance model: between a producer's split
// and a reader's, what the busiest process receives, in how many messages, and the copy it keeps, counted per
// element of one channel over an even sample of the processes; or, in a class that counts channels (for
// splits with F or C parts), in elements.
//
// The auto-scheduler asks for it for every pair of candidate splits of every pair of adjacent layers: millions
// of pairs at 2048 processes of a volume network. So the tiles that a split gives the sampled processes are
// worked out once per split (their ranges along samples, channels where counted, and each spatial dimension),
// and a pair only meets ranges and multiplies lengths, dimension by dimension.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/distribution.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace dsl::scheduler {

// A class of shuffles: the producer's extent, whether its tiles are cut spatially (`from_spatial`) and
// whether the reader's are (`read_spatial`: not when it reads whole samples), and the reader's window, if it
// reads through one (nullptr: it reads its own tile). Layers with the same class share the arithmetic. A
// class that `counts_channels` also has the channels each holds under a split's F and C parts (plan.hpp:
// own_channels, operand_channels; its extent is part of it); a producer's tiles of partial sums
// (Channels::filters under C parts) each send what a reader wants of them.
struct ShuffleClass {
    Dims whole;
    bool from_spatial = false, read_spatial = false;
    const frontend::Layer* window = nullptr;
    bool counts_channels = false;
    Channels from_channels = Channels::all, to_channels = Channels::all;
};

struct ShufflePoints {
    bool same = false;  // every sampled process reads the tile it holds
    double most_received = 0.0, total_received = 0.0, most_messages = 0.0, copy = 0.0;
    int sampled = 0;  // the processes examined
};

class ShuffleArithmetic {
public:
    explicit ShuffleArithmetic(std::int64_t procs);

    int add_class(const ShuffleClass& c);  // its number
    // Between `from` (the producer's split) and `to` (the reader's), for class `cls`. Kept: asking again is a
    // lookup.
    const ShufflePoints& points(int cls, const Split& from, const Split& to);
    // Between every split of `from` and every one of `to`: [a * to.size() + b]. Kept too, by the lists; the
    // pairs are computed on the machine's cores when there are many.
    const std::vector<ShufflePoints>& matrix(int cls, const std::vector<Split>& from, const std::vector<Split>& to);

private:
    // The sampled processes' ranges under one split, per process the samples' range, the channels' (where
    // counted), then each spatial dimension's: the tile it holds as producer (`own`), the tile it reads as reader
    // (`tile`), and what the reader wants of the producer's tensor (`want`: the tile, or what its window reads, within
    // the tensor), with the elements of `want`.
    struct Side {
        std::vector<Range> own, tile, want;
        std::vector<std::int64_t> want_points;
    };
    const Side& side(int cls, const Split& split);
    // Per dimension (samples, channels where counted, then spatial), the producer's block_of table, or null
    // where it is not counted; and how many of the producer's processes hold partial sums of each block (1:
    // none).
    struct Blocks {
        std::array<const std::int32_t*, 2 + max_space> of{};
        bool counts_channels = false;
        std::int64_t partial = 1;
    };
    int dims_of(int cls) const;  // the dimensions of its ranges: samples, channels where counted, spatial
    Blocks producer_blocks(int cls, const Split& from);
    template <int dims, int counted>
    void pair(const Side& producer, const Side& reader, const Blocks& block, ShufflePoints& s) const;
    void pair(int dims, const Side& producer, const Side& reader, const Blocks& block, ShufflePoints& s) const;
    int split_id(const Split& split);
    // block_of(extent, parts, i) for every i: a lookup, not two divisions.
    const std::vector<std::int32_t>& blocks(std::int64_t extent, std::int64_t parts);

    std::vector<std::int64_t> ranks_;  // the sampled processes
    std::vector<ShuffleClass> classes_;
    using SplitKey = std::array<std::int64_t, 3 + max_space>;
    struct SplitHash {
        std::size_t operator()(const SplitKey& k) const;
    };
    std::unordered_map<SplitKey, int, SplitHash> split_ids_;
    std::vector<Split> splits_;
    std::vector<std::vector<std::unique_ptr<Side>>> sides_;  // by class, then split id
    std::unordered_map<std::uint64_t, ShufflePoints> points_;
    std::map<std::tuple<int, std::vector<int>, std::vector<int>>, std::vector<ShufflePoints>> matrices_;
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int32_t>> blocks_;
};

}  // namespace dsl::scheduler
