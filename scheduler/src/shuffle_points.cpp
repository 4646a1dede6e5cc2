#include "shuffle_points.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <thread>

namespace dsl::scheduler {

namespace {

// The ranks to examine for the busiest process: all of them, or an even sample of a large run.
std::vector<std::int64_t> sample_ranks(std::int64_t procs) {
    std::vector<std::int64_t> out;
    const std::int64_t limit = 64;
    if (procs <= limit) {
        for (std::int64_t r = 0; r < procs; ++r) out.push_back(r);
        return out;
    }
    for (std::int64_t i = 0; i < limit; ++i) out.push_back(i * (procs - 1) / (limit - 1));
    return out;
}

// A box's ranges along samples, channels (where counted), then each spatial dimension, appended to `out`.
void append_ranges(const Box& b, bool channels, std::vector<Range>& out) {
    out.push_back(b.n);
    if (channels) out.push_back(b.c);
    for (const Range& r : b.space) out.push_back(r);
}

constexpr int id_bits = 21;  // per split, in a pair's key

}  // namespace

ShuffleArithmetic::ShuffleArithmetic(std::int64_t procs) : ranks_(sample_ranks(procs)) {}

int ShuffleArithmetic::add_class(const ShuffleClass& c) {
    DSL_INTERNAL_CHECK(c.whole.c >= 1, "a shuffle of a tensor without channels");
    classes_.push_back(c);
    sides_.emplace_back();
    return static_cast<int>(classes_.size()) - 1;
}

std::size_t ShuffleArithmetic::SplitHash::operator()(const SplitKey& k) const {
    std::size_t h = 0;
    for (std::int64_t v : k) h = h * 1000003u ^ static_cast<std::size_t>(v);
    return h;
}

int ShuffleArithmetic::split_id(const Split& split) {
    const SplitKey key{split.n, split.c, split.f, split.space[0], split.space[1], split.space[2]};
    const auto [it, added] = split_ids_.try_emplace(key, static_cast<int>(splits_.size()));
    if (added) {
        DSL_INTERNAL_CHECK(splits_.size() < (std::size_t{1} << id_bits), "too many splits for the shuffle cache");
        splits_.push_back(split);
    }
    return it->second;
}

const std::vector<std::int32_t>& ShuffleArithmetic::blocks(std::int64_t extent, std::int64_t parts) {
    auto [it, added] = blocks_.try_emplace({extent, parts});
    if (added) {
        it->second.resize(static_cast<std::size_t>(extent));
        for (std::int64_t i = 0; i < extent; ++i)
            it->second[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(block_of(extent, parts, i));
    }
    return it->second;
}

const ShuffleArithmetic::Side& ShuffleArithmetic::side(int cls, const Split& split) {
    const int id = split_id(split);
    auto& by_split = sides_[static_cast<std::size_t>(cls)];
    if (by_split.size() <= static_cast<std::size_t>(id)) by_split.resize(splits_.size());
    std::unique_ptr<Side>& s = by_split[static_cast<std::size_t>(id)];
    if (s) return *s;
    s = std::make_unique<Side>();
    const ShuffleClass& c = classes_[static_cast<std::size_t>(cls)];
    const Box extent = whole_box(c.whole);
    for (std::int64_t q : ranks_) {
        const Box tile = tile_box(c.whole, split, q, c.read_spatial, c.to_channels);
        const Box want = (c.window ? window_input(*c.window, tile, tile.c) : tile).meet(extent);
        const bool ch = c.counts_channels;
        append_ranges(tile_box(c.whole, split, q, c.from_spatial, c.from_channels), ch, s->own);
        append_ranges(tile, ch, s->tile);
        append_ranges(want, ch, s->want);
        s->want_points.push_back(want.points() * (ch ? want.c.size() : 1));
    }
    return *s;
}

template <int dims, int counted>
void ShuffleArithmetic::pair(const Side& producer, const Side& reader, const Blocks& block, ShufflePoints& s) const {
    s.same = block.partial == 1;
    const auto partial = static_cast<double>(block.partial);
    for (std::size_t i = 0; i < ranks_.size() && s.same; ++i)
        for (int k = 0; k < dims; ++k)
            if (!(reader.tile[i * dims + k] == producer.own[i * dims + k])) s.same = false;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        const Range* own = &producer.own[i * dims];
        const Range* want = &reader.want[i * dims];
        // What it wants and holds already: a product of lengths, none when a dimension has none.
        std::int64_t held = 1;
        for (int k = 0; k < dims; ++k) {
            const std::int64_t len = std::min(want[k].hi, own[k].hi) - std::max(want[k].lo, own[k].lo);
            held *= std::max<std::int64_t>(len, 0);
        }
        // The producer's blocks that the wanted ranges meet (`want` lies within the tensor), along the
        // dimensions its tiles cut.
        std::int64_t blocks_met = 1;
        for (int k = 0; k < counted; ++k)
            blocks_met *= want[k].empty() ? 0 : block.of[k][want[k].hi - 1] - block.of[k][want[k].lo] + 1;
        const double points = static_cast<double>(reader.want_points[i]);
        // Partial sums come from each of the processes that hold them.
        const double received = points * partial - static_cast<double>(held);
        // Those blocks, less its own.
        const double messages = static_cast<double>(blocks_met) * partial - (held == 0 ? 0.0 : 1.0);
        s.most_received = std::max(s.most_received, received);
        s.total_received += received;
        s.most_messages = std::max(s.most_messages, messages);
        s.copy = std::max(s.copy, points);
    }
}

void ShuffleArithmetic::pair(int dims, const Side& producer, const Side& reader, const Blocks& block,
                             ShufflePoints& s) const {
    s.sampled = static_cast<int>(ranks_.size());
    // Samples (and channels, where counted) always; the spatial dimensions where the producer's tiles cut them.
    const bool all = block.of[static_cast<std::size_t>(dims) - 1] != nullptr;
    const bool ch = block.counts_channels;
    switch (dims) {  // the loops over dimensions unrolled: this runs for millions of pairs
        case 1: pair<1, 1>(producer, reader, block, s); break;
        case 2: all || ch ? pair<2, 2>(producer, reader, block, s) : pair<2, 1>(producer, reader, block, s); break;
        case 3:
            all  ? pair<3, 3>(producer, reader, block, s)
            : ch ? pair<3, 2>(producer, reader, block, s)
                 : pair<3, 1>(producer, reader, block, s);
            break;
        case 4:
            all  ? pair<4, 4>(producer, reader, block, s)
            : ch ? pair<4, 2>(producer, reader, block, s)
                 : pair<4, 1>(producer, reader, block, s);
            break;
        case 5: all ? pair<5, 5>(producer, reader, block, s) : pair<5, 2>(producer, reader, block, s); break;
        default: DSL_INTERNAL_CHECK(false, "a shuffle over " + std::to_string(dims) + " dimensions");
    }
}

ShuffleArithmetic::Blocks ShuffleArithmetic::producer_blocks(int cls, const Split& from) {
    // Per dimension (samples, channels, then spatial): the producer's blocks along it (none counted where its
    // tiles hold a spatial dimension whole). Channel blocks are counted as even blocks of F x C (filters: of F),
    // which nested blocks are within one channel.
    const ShuffleClass& c = classes_[static_cast<std::size_t>(cls)];
    const int rank = c.whole.rank();
    Blocks block;
    block.counts_channels = c.counts_channels;
    block.of[0] = blocks(c.whole.n, from.n).data();
    const std::size_t first_space = c.counts_channels ? 2 : 1;
    if (c.counts_channels) {
        const std::int64_t channel_parts = c.from_channels == Channels::all       ? 1
                                           : c.from_channels == Channels::filters ? from.f
                                                                                  : from.f * from.c;
        block.of[1] = blocks(c.whole.c, std::min(channel_parts, c.whole.c)).data();
        if (c.from_channels == Channels::filters) block.partial = from.c;
    }
    for (int d = 0; d < rank; ++d)
        if (c.from_spatial)
            block.of[first_space + static_cast<std::size_t>(d)] = blocks(c.whole.space[d], from.parts(d, rank)).data();
    return block;
}

int ShuffleArithmetic::dims_of(int cls) const {
    const ShuffleClass& c = classes_[static_cast<std::size_t>(cls)];
    return (c.counts_channels ? 2 : 1) + c.whole.rank();
}

const ShufflePoints& ShuffleArithmetic::points(int cls, const Split& from, const Split& to) {
    const auto key = (static_cast<std::uint64_t>(cls) << (2 * id_bits)) |
                     (static_cast<std::uint64_t>(split_id(from)) << id_bits) | static_cast<std::uint64_t>(split_id(to));
    auto [it, added] = points_.try_emplace(key);
    if (added) pair(dims_of(cls), side(cls, from), side(cls, to), producer_blocks(cls, from), it->second);
    return it->second;
}

const std::vector<ShufflePoints>& ShuffleArithmetic::matrix(int cls, const std::vector<Split>& from,
                                                            const std::vector<Split>& to) {
    std::vector<int> from_ids, to_ids;
    for (const Split& s : from) from_ids.push_back(split_id(s));
    for (const Split& s : to) to_ids.push_back(split_id(s));
    auto [it, added] = matrices_.try_emplace({cls, from_ids, to_ids});
    if (!added) return it->second;
    std::vector<ShufflePoints>& out = it->second;
    out.resize(from.size() * to.size());
    // Everything shared is made first; then each row is a loop over its pairs, alone in its part of `out`.
    std::vector<const Side*> producers, readers;
    std::vector<Blocks> blocks_of;
    for (const Split& s : from) producers.push_back(&side(cls, s)), blocks_of.push_back(producer_blocks(cls, s));
    for (const Split& s : to) readers.push_back(&side(cls, s));
    const int dims = dims_of(cls);
    auto rows = [&](std::size_t first, std::size_t step) {
        for (std::size_t a = first; a < from.size(); a += step)
            for (std::size_t b = 0; b < to.size(); ++b)
                pair(dims, *producers[a], *readers[b], blocks_of[a], out[a * to.size() + b]);
    };
    const std::size_t pairs = from.size() * to.size(), enough = 1 << 14;  // below, a thread costs more than it saves
    const std::size_t threads = pairs < enough ? 1
                                               : std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1,
                                                                         std::min<std::size_t>(8, from.size()));
    std::vector<std::thread> helpers;
    for (std::size_t t = 1; t < threads; ++t) helpers.emplace_back(rows, t, threads);
    rows(0, threads);
    for (std::thread& t : helpers) t.join();
    return out;
}

}  // namespace dsl::scheduler
