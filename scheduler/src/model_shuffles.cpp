// The performance model's shuffles: a tensor moved from its producer's split into the tile a reader under
// another split reads, and its gradient back, costed from the tiles' arithmetic (shuffle_points.hpp) by class
// of layers, over the communication model.
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/plan.hpp>

#include "shuffle_points.hpp"

namespace dsl::scheduler {

using frontend::Layer;

int Model::shuffle_class(int reader, int input, bool channels) const {
    if (shuffle_class_.empty()) shuffle_class_.resize(net_.layers.size());
    const Layer& r = net_.layers[static_cast<std::size_t>(reader)];
    auto& classes = shuffle_class_[static_cast<std::size_t>(reader)];
    if (classes.empty()) classes.assign(2 * r.inputs.size(), -2);
    int& shape_class = classes[2 * static_cast<std::size_t>(input) + (channels ? 1 : 0)];
    if (shape_class != -2) return shape_class;
    const Layer& p = net_.layers[static_cast<std::size_t>(r.inputs[static_cast<std::size_t>(input)])];
    if (p.is_data()) return shape_class = -1;  // made where it is read
    // The tiles' arithmetic depends on the extents, the splits and the reader's window only: many layers
    // share it, so it is computed once per such class and pair of splits, per channel. The reader's tile is
    // whole samples for a fully connected layer, else its own tile (with the margins its window reads). Splits
    // with F or C parts take a class of their own, which counts the channels each holds: their extent and
    // the layers' channel rules are part of it.
    const Dims whole = extent_of(p, batch_);
    const bool from_spatial = p.spatial(), to_spatial = p.spatial() && !reads_whole_samples(r);
    const bool window = r.windowed() && to_spatial;
    const Channels from_channels = own_channels(p), to_channels = operand_channels(r);
    std::vector<std::int64_t> shape{whole.n, from_spatial, to_spatial};
    if (channels)
        shape.insert(shape.end(),
                     {-1, whole.c, static_cast<std::int64_t>(from_channels), static_cast<std::int64_t>(to_channels)});
    shape.insert(shape.end(), whole.space.begin(), whole.space.end());
    if (window) {
        for (const frontend::Spatial* v : {&r.kernel, &r.stride, &r.pad, &r.output_pad})
            shape.insert(shape.end(), v->begin(), v->end());
        for (int d = 0; d < r.kernel.rank(); ++d) shape.push_back(window_dilation(r, d));
        shape.insert(shape.end(), {static_cast<std::int64_t>(r.op), r.scale, r.mode});
    }
    if (!shuffles_) shuffles_ = std::make_shared<ShuffleArithmetic>(procs_);
    auto [it, added] = classes_.try_emplace(shape, -1);
    if (added)
        it->second = shuffles_->add_class(
            {whole, from_spatial, to_spatial, window ? &r : nullptr, channels, from_channels, to_channels});
    return shape_class = it->second;
}

namespace {

// Whether nothing moves between a producer under `from` and a reader under `to`: the same split reads the
// tiles it holds (not whole samples of a spatial tensor, nor another block of channels).
bool unmoved(const Split& from, const Split& to, bool whole) { return from == to && !whole && !from.channel_parts(); }

}  // namespace

ShuffleCost Model::shuffle_cost(const ShufflePoints& s, const Layer& producer, const Split& from, const Split& to,
                                double per_point) const {
    ShuffleCost out;
    if (s.same) return out;  // the same tiles: what the reader needs beyond them is a halo, not a shuffle
    // Senders: one process per block of the producer's split (replicas, of a tensor without spatial
    // dimensions under a spatial split, or of every channel under F and C parts, do not all send; partial
    // sums do).
    const bool replicas = !producer.spatial() && from.spatial();
    const std::int64_t channel_senders = own_channels(producer) == Channels::all ? 1 : from.c * from.f;
    const double senders = static_cast<double>((replicas ? from.n : from.n * from.spatial_procs()) * channel_senders);
    const double most_sent = s.total_received * static_cast<double>(procs_) / static_cast<double>(s.sampled) / senders;
    const double bytes = std::max(s.most_received, most_sent) * per_point * word;
    const Link& link = shuffle_between_nodes(from, to) ? platform_.network : platform_.node;
    const double copies = platform_.memory_bandwidth > 0 ? 2.0 * bytes / platform_.memory_bandwidth : 0.0;
    const double one_way = s.most_messages * link.latency + bytes / link.bandwidth + copies;
    out.seconds = 2.0 * one_way * share_;
    // What calibration found a shuffle costs beyond that here: the copy tile's first touch, the all-to-all's
    // wait for every partner.
    out.seconds += shuffle_extra_;
    out.bytes = static_cast<std::int64_t>(2.0 * bytes);
    out.memory = s.copy * per_point * word;
    return out;
}

ShuffleCost Model::shuffle(int reader, int input, const Split& from, const Split& to) const {
    const bool channels = from.channel_parts() || to.channel_parts();
    const int cls = shuffle_class(reader, input, channels);
    if (cls < 0) return {};
    const Layer& r = net_.layers[static_cast<std::size_t>(reader)];
    const Layer& p = net_.layers[static_cast<std::size_t>(r.inputs[static_cast<std::size_t>(input)])];
    if (unmoved(from, to, p.spatial() && reads_whole_samples(r))) return {};
    return shuffle_cost(shuffles_->points(cls, from, to), p, from, to,
                        channels ? 1.0 : static_cast<double>(extent_of(p, batch_).c));
}

std::vector<ShuffleCost> Model::shuffles(int reader, int input, const std::vector<Split>& from,
                                         const std::vector<Split>& to) const {
    std::vector<ShuffleCost> out(from.size() * to.size());
    const int plain = shuffle_class(reader, input, false);
    if (plain < 0) return out;
    const Layer& r = net_.layers[static_cast<std::size_t>(reader)];
    const Layer& p = net_.layers[static_cast<std::size_t>(r.inputs[static_cast<std::size_t>(input)])];
    const bool whole = p.spatial() && reads_whole_samples(r);
    // The pairs of rows `a` of `from` and columns `b` of `to` from class `cls`'s arithmetic, each point
    // `per_point` elements.
    auto fill = [&](int cls, const std::vector<std::size_t>& a, const std::vector<std::size_t>& b, double per_point) {
        std::vector<Split> rows, cols;
        for (std::size_t i : a) rows.push_back(from[i]);
        for (std::size_t j : b) cols.push_back(to[j]);
        const std::vector<ShufflePoints>& points = shuffles_->matrix(cls, rows, cols);
        for (std::size_t i = 0; i < a.size(); ++i)
            for (std::size_t j = 0; j < b.size(); ++j)
                if (!unmoved(rows[i], cols[j], whole))
                    out[a[i] * to.size() + b[j]] =
                        shuffle_cost(points[i * b.size() + j], p, rows[i], cols[j], per_point);
    };
    // Pairs without F or C parts from the per-channel arithmetic; the few others from the class that counts
    // channels: every producer split into the readers' with them, and the producers' with them into the rest.
    std::vector<std::size_t> every_from, plain_from, channel_from, plain_to, channel_to;
    for (std::size_t a = 0; a < from.size(); ++a) {
        every_from.push_back(a);
        (from[a].channel_parts() ? channel_from : plain_from).push_back(a);
    }
    for (std::size_t b = 0; b < to.size(); ++b) (to[b].channel_parts() ? channel_to : plain_to).push_back(b);
    fill(plain, plain_from, plain_to, static_cast<double>(extent_of(p, batch_).c));
    if (channel_from.empty() && channel_to.empty()) return out;
    const int counted = shuffle_class(reader, input, true);
    fill(counted, every_from, channel_to, 1.0);
    fill(counted, channel_from, plain_to, 1.0);
    return out;
}

std::vector<ShuffleCost> CostModel::shuffles(int reader, int input, const std::vector<Split>& from,
                                             const std::vector<Split>& to) const {
    std::vector<ShuffleCost> out;
    out.reserve(from.size() * to.size());
    for (const Split& a : from)
        for (const Split& b : to) out.push_back(shuffle(reader, input, a, b));
    return out;
}

}  // namespace dsl::scheduler
