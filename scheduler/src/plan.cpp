// The execution plan of one process: tile placement, margins, halo exchanges and shuffles, gradient buffers
// and process groups, in that order.
#include <dsl/scheduler/plan.hpp>

#include "shared_buffers.hpp"

#include <dsl/base/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::OpKind;

bool reads_whole_samples(const Layer& reader) { return reader.op == OpKind::fc; }

namespace {

bool has_filters(const Layer& l) { return l.op == OpKind::conv || l.op == OpKind::deconv || l.op == OpKind::fc; }

}  // namespace

Channels own_channels(const Layer& layer) {
    if (layer.is_data() || layer.is_loss()) return Channels::all;
    return has_filters(layer) ? Channels::filters : Channels::nested;
}

Channels operand_channels(const Layer& reader) {
    if (reader.is_loss()) return Channels::all;
    if (reader.op == OpKind::concat) return Channels::all_parts;
    return has_filters(reader) ? Channels::inputs : Channels::nested;
}

bool splits_channels(const Layer& layer, const Split& split) {
    return split.channel_parts() && own_channels(layer) != Channels::all;
}

bool whole_samples(const Layer& producer, const TileSpec& s) {
    return s.whole && producer.spatial() && s.split.spatial();
}

namespace {

// The same tile on every process of a spatial group (a vector, or whole samples), and on every process of an
// F x C group (every channel, Channels::all).
bool spatial_replica(const Layer& producer, const TileSpec& s) {
    return (!producer.spatial() || whole_samples(producer, s)) && s.split.spatial();
}
bool channel_replica(const TileSpec& s) { return s.channels == Channels::all && s.split.channel_parts(); }

}  // namespace

bool replicated(const Layer& producer, const TileSpec& s) { return spatial_replica(producer, s) || channel_replica(s); }

bool leader(const Layer& producer, const TileSpec& s, std::int64_t rank) {
    const Coords c = coords(s.split, rank);
    const bool first_in_space = std::all_of(c.space.begin(), c.space.end(), [](std::int64_t i) { return i == 0; });
    return (!spatial_replica(producer, s) || first_in_space) && (!channel_replica(s) || (c.c == 0 && c.f == 0));
}

bool partial(const TileSpec& s) { return s.channels == Channels::filters && s.split.c > 1; }

Box tile_box(const Layer& producer, const TileSpec& s, std::int64_t batch, std::int64_t rank) {
    return tile_box(extent_of(producer, batch), s.split, rank, producer.spatial() && !whole_samples(producer, s),
                    s.channels);
}

namespace {

// Works a plan out, step by step; each step reads what the ones before it wrote.
struct Planner {
    const frontend::Network& net;
    Plan& plan;
    int tiles_made = 0;

    const Layer& layer(int i) const { return net.layers[static_cast<std::size_t>(i)]; }
    LayerPlan& slot(int i) { return plan.layers[static_cast<std::size_t>(i)]; }
    const Split& split_of(int i) const { return *plan.layers[static_cast<std::size_t>(i)].dist.split; }
    int layer_count() const { return static_cast<int>(net.layers.size()); }

    void check_batch() const {
        for (std::size_t i = 0; i < net.layers.size(); ++i)
            if (plan.layers[i].dist.split->n > plan.batch)
                throw UserError("layer '" + net.layers[i].name + "' splits the samples " +
                                std::to_string(plan.layers[i].dist.split->n) + " ways, but the mini-batch has " +
                                std::to_string(plan.batch));
    }

    // ---- Placement: boxes of tiles on every process.

    Box box_at(const TileSpec& s, int rank) const { return tile_box(layer(s.layer), s, plan.batch, rank); }
    bool leader_at(const TileSpec& s, int rank) const { return leader(layer(s.layer), s, rank); }

    bool same_tiles(const TileSpec& a, const TileSpec& b) const {
        if (a.layer != b.layer || partial(a) != partial(b)) return false;
        for (int r = 0; r < plan.procs; ++r)
            if (!(box_at(a, r) == box_at(b, r)) || leader_at(a, r) != leader_at(b, r)) return false;
        return true;
    }

    TileSpec own_spec(int i) const { return TileSpec{i, split_of(i), false, own_channels(layer(i))}; }

    // What layer `reader` reads of its input `j`.
    TileSpec operand_spec(int reader, std::size_t j) const {
        const Layer& l = layer(reader);
        return TileSpec{l.inputs[j], split_of(reader), reads_whole_samples(l), operand_channels(l)};
    }

    // The index of the tile of `s` in its layer's tiles, placed when it is new.
    int tile_for(const TileSpec& s) {
        LayerPlan& owner = slot(s.layer);
        for (std::size_t i = 0; i < owner.tiles.size(); ++i)
            if (same_tiles(owner.tiles[i].spec, s)) return static_cast<int>(i);
        TilePlan t;
        t.spec = s;
        t.id = tiles_made++;
        t.copy = !owner.tiles.empty();
        t.replicated = replicated(layer(s.layer), s);
        t.leader = leader_at(s, plan.rank);
        t.partial = partial(s);
        t.box = box_at(s, plan.rank);
        owner.tiles.push_back(std::move(t));
        return static_cast<int>(owner.tiles.size()) - 1;
    }

    void place_tiles() {
        for (int i = 0; i < layer_count(); ++i) tile_for(own_spec(i));
        for (int i = 0; i < layer_count(); ++i) {
            const Layer& l = layer(i);
            for (std::size_t j = 0; j < l.inputs.size(); ++j) {
                if (layer(l.inputs[j]).op == OpKind::label) {
                    slot(i).operands.push_back(-1);  // a loss makes its labels over its logits' tile
                    continue;
                }
                const int index = tile_for(operand_spec(i, j));
                TilePlan& t = slot(l.inputs[j]).tiles[static_cast<std::size_t>(index)];
                ++t.readers;
                t.reader_layers.push_back(i);
                if (l.windowed()) {
                    t.windowed_readers.push_back(i);
                    // Padding modes never differ between a tensor's readers (shape inference checks it).
                    t.periodic = t.periodic || l.periodic();
                }
                slot(i).operands.push_back(index);
            }
        }
    }

    // How far beyond its box, along each spatial dimension, the tile at `rank` must reach for its windowed
    // readers.
    Margins need_at(const TilePlan& t, int rank) const {
        const Box box = box_at(t.spec, rank);
        Margins m = Margins::filled(box.space.rank(), Reach{});
        for (int reader : t.windowed_readers) {
            const Margins r = box.reach(window_input(layer(reader), box_at(own_spec(reader), rank), box.c));
            for (int d = 0; d < m.rank(); ++d)
                m[d] = {std::max(m[d].before, r[d].before), std::max(m[d].after, r[d].after)};
        }
        return m;
    }

    void plan_margins() {
        for (LayerPlan& s : plan.layers)
            for (TilePlan& t : s.tiles) t.need = need_at(t, plan.rank);
    }

    const TilePlan& operand(int i, std::size_t j) {
        return slot(layer(i).inputs[j]).tiles[static_cast<std::size_t>(slot(i).operands[j])];
    }

    // Which gradients must be zeroed before their first write: those accumulated (several readers, or a
    // copy's), and those a reader covers only in part (a strided window that never reaches the last rows).
    // A windowed layer's `read` is set here.
    void plan_zero_gradients() {
        for (int i = 0; i < layer_count(); ++i) {
            if (layer(i).op == OpKind::label) continue;
            for (TilePlan& t : slot(i).tiles) t.zero_grad = t.copy || t.readers != 1;
        }
        for (int i = 0; i < layer_count(); ++i) {
            const Layer& l = layer(i);
            if (!l.windowed()) continue;
            TilePlan& t = slot(l.inputs[0]).tiles[static_cast<std::size_t>(slot(i).operands[0])];
            // The part of the input's padded tile that the window reads: zeroed unless it covers the interior.
            const Box& read = slot(i).read = window_input(l, slot(i).tiles.front().box, t.box.c);
            for (int d = 0; d < read.space.rank(); ++d)
                if (read.space[d].lo > t.box.space[d].lo || read.space[d].hi < t.box.space[d].hi) t.zero_grad = true;
        }
    }

    // Gradients live only from their first reader's backward to their own layer's: in a chain, two at a
    // time. Tiles whose spans do not meet share buffers (shared_buffers.hpp).
    void plan_gradients() {
        const int last = layer_count() - 1;
        std::vector<TilePlan*> tiles;
        for (int i = 0; i < layer_count(); ++i) {
            if (layer(i).is_data()) continue;
            for (TilePlan& t : slot(i).tiles) {
                t.grad_last = last - i;
                t.grad_first = t.grad_last;
                for (int r : t.reader_layers)
                    t.grad_first = std::min(t.grad_first, layer(r).is_loss() ? -1 : last - r);
                tiles.push_back(&t);
            }
        }
        std::stable_sort(tiles.begin(), tiles.end(),
                         [](const TilePlan* a, const TilePlan* b) { return a->grad_first < b->grad_first; });
        SharedBuffers shared;
        for (TilePlan* t : tiles)  // the tile with its margins
            t->grad_buffer = shared.place({t->box.grown(t->need).dims().elements(), t->grad_first, t->grad_last});
        plan.buffers = shared.sizes();
    }

    // This process's part in moving `b` from process `from` to process `to`.
    void route(Exchange& p, int from, int to, const Piece& piece) const {
        const int me = plan.rank;
        if (from == me && to == me)
            p.local.push_back(Piece{me, piece.box, piece.shift});
        else if (to == me)
            p.receives.push_back(Piece{from, piece.box, piece.shift});
        else if (from == me)
            p.sends.push_back(Piece{to, piece.box, piece.shift});
    }

    // Which processes send each part of every tile's padded box, and which receive it. A tile of a layer's
    // own split receives its halo (halo_pieces) from the neighbours that hold it and, in backward, sends the
    // gradient of those parts back to them. A copy in a reader's split is gathered whole: for every process r
    // and every group of processes holding the same block of the tensor (one, or the replicas of a spatial
    // group), the part of r's padded box within the block comes from r itself where r holds it, else from the
    // group's first process (partial sums: from each of the group's processes that speak, and are added); in
    // backward, its gradient goes back the other way, to every process of the group,
    // from the one process that speaks for r's replicas. Every process works out the same routes for every r,
    // in the same order (by r, then by peer), so that sends and receives match.
    void plan_exchanges() {
        const int procs = plan.procs;
        for (int li = 0; li < layer_count(); ++li) {
            LayerPlan& s = slot(li);
            if (layer(li).is_data()) continue;  // made where needed
            const TileSpec owner = own_spec(li);
            const Box extent = whole_box(s.whole);
            struct Group {
                Box box;
                std::vector<int> ranks;
            };
            std::vector<Group> blocks;
            for (TilePlan& t : s.tiles) {
                if (!t.copy) {
                    if (t.windowed_readers.empty()) continue;  // no margins: nothing to exchange
                    for (int r = 0; r < procs; ++r) {
                        std::vector<Piece> halo = halo_pieces(s.whole, t.spec.split, r, need_at(t, r), t.periodic);
                        const Range channels = box_at(t.spec, r).c;  // the neighbours' are the same
                        for (Piece& p : halo) p.box.c = channels;
                        std::stable_sort(halo.begin(), halo.end(),
                                         [](const Piece& a, const Piece& b) { return a.peer < b.peer; });
                        for (const Piece& p : halo) {
                            route(t.forward, p.peer, r, p);
                            route(t.backward, r, p.peer, p);
                        }
                    }
                    continue;
                }
                if (blocks.empty())
                    for (int q = 0; q < procs; ++q) {
                        const Box b = box_at(owner, q);
                        auto it =
                            std::find_if(blocks.begin(), blocks.end(), [&](const Group& g) { return g.box == b; });
                        if (it == blocks.end())
                            blocks.push_back(Group{b, {q}});
                        else
                            it->ranks.push_back(q);
                    }
                for (int r = 0; r < procs; ++r) {
                    const Box want = box_at(t.spec, r).grown(need_at(t, r)).meet(extent);
                    const bool speaks = leader_at(t.spec, r);
                    for (const Group& g : blocks) {
                        const Box b = want.meet(g.box);
                        if (b.empty()) continue;
                        const bool holds = std::find(g.ranks.begin(), g.ranks.end(), r) != g.ranks.end();
                        if (s.tiles.front().partial) {  // the sum of the C processes' parts
                            for (int q : g.ranks)
                                if (leader_at(owner, q)) route(t.forward, q, r, Piece{0, b, {}});
                        } else {
                            route(t.forward, holds ? r : g.ranks.front(), r, Piece{0, b, {}});
                        }
                        if (!speaks) continue;
                        for (int q : g.ranks) route(t.backward, r, q, Piece{0, b, {}});
                    }
                }
            }
        }
    }

    // Batch norm and global pooling sum over a group of processes: every process, a split's sample group
    // (the processes with the same block of samples), or none. Group norm's statistics are per sample: its
    // sample group, as global pooling's.
    void plan_groups() {
        for (int i = 0; i < layer_count(); ++i) {
            const Layer& l = layer(i);
            LayerPlan& s = slot(i);
            const Split& split = split_of(i);
            const Coords k = coords(split, plan.rank);
            const bool by_channels = splits_channels(l, split);
            const int block = static_cast<int>(k.f * split.c + k.c);
            const GroupPlan sample_group =
                by_channels ? GroupPlan{GroupPlan::Kind::samples, split.str() + " by channels",
                                        static_cast<int>(k.n * split.f * split.c) + block}
                            : GroupPlan{GroupPlan::Kind::samples, split.str(), static_cast<int>(k.n)};
            if (l.op == OpKind::global_avgpool || l.op == OpKind::groupnorm) s.group = sample_group;
            if (l.op != OpKind::batchnorm) continue;
            switch (*s.dist.bn) {
                case BatchNormStats::batch:
                    s.group = by_channels ? GroupPlan{GroupPlan::Kind::channels, "channels of " + split.str(), block}
                                          : GroupPlan{GroupPlan::Kind::every, "", 0};
                    break;
                case BatchNormStats::spatial: s.group = sample_group; break;
                case BatchNormStats::local: s.group = GroupPlan{}; break;
            }
        }
    }
};

}  // namespace

// Which windowed layers overlap their input's halo exchange with compute, and their parts (tiles.hpp). The
// first reader of a tile gathers its halo, in forward's order: a later one finds it there. And which layers
// with weights send their input gradient's halo back while they compute their weight gradient.
void plan_overlap(const frontend::Network& net, Plan& plan) {
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        LayerPlan& s = plan.layers[i];
        if (l.inputs.empty() || s.operands.empty() || s.operands[0] < 0 || !*s.dist.overlap) continue;
        const Layer& input = net.layers[static_cast<std::size_t>(l.inputs[0])];
        const TilePlan& in =
            plan.layers[static_cast<std::size_t>(l.inputs[0])].tiles[static_cast<std::size_t>(s.operands[0])];
        s.scatters_early =
            l.kind().weights && input.op != OpKind::input && !in.copy && in.readers == 1 && !in.backward.empty();
        if (!l.windowed()) continue;
        if (input.op == OpKind::input || in.copy || in.forward.empty() ||
            in.reader_layers.front() != static_cast<int>(i))
            continue;
        s.overlapped = true;
        s.overlap =
            overlap_parts(l, s.tiles.front().box, held_box(in.box, extent_of(input, plan.batch), in.need, in.periodic));
    }
}

Plan make_plan(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, int rank, int procs) {
    Plan plan;
    plan.rank = rank;
    plan.procs = procs;
    plan.batch = batch;
    plan.layers.resize(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        LayerPlan& s = plan.layers[i];
        if (i < schedule.layers.size()) s.dist = schedule.layers[i];
        if (!s.dist.split) s.dist.split = Split{};
        if (!s.dist.overlap) s.dist.overlap = false;
        if (!s.dist.recompute) s.dist.recompute = false;
        if (!s.dist.precision) s.dist.precision = Precision::float32;
        s.whole = extent_of(net.layers[i], batch);
    }
    Planner p{net, plan};
    p.check_batch();
    p.place_tiles();
    p.plan_margins();
    p.plan_zero_gradients();
    p.plan_gradients();
    p.plan_exchanges();
    p.plan_groups();
    plan_overlap(net, plan);
    plan_recompute(net, plan);
    return plan;
}

namespace {

// The letter of spatial dimension d of a tensor of spatial rank `rank` in a plan's text: the last `rank` of z,
// y and x.
char dimension_letter(int d, int rank) { return "zyx"[max_space - rank + d]; }

// A box; its channels where they are not all `channels` of the tensor.
std::string box_text(const Box& b, std::int64_t channels) {
    std::string out = fmt::format("n[{},{})", b.n.lo, b.n.hi);
    if (b.c.lo != 0 || b.c.hi != channels) out += fmt::format(" c[{},{})", b.c.lo, b.c.hi);
    for (int d = 0; d < b.space.rank(); ++d)
        out += fmt::format(" {}[{},{})", dimension_letter(d, b.space.rank()), b.space[d].lo, b.space[d].hi);
    return out;
}

std::string margins_text(const Margins& m) {
    if (m.rank() == 0) return "no margins";
    std::string out = "margins";
    for (int d = 0; d < m.rank(); ++d)
        out += fmt::format(" {}({}, {})", dimension_letter(d, m.rank()), m[d].before, m[d].after);
    return out;
}

// A piece: its box, and where a periodic halo's elements lie in their tile.
std::string piece_text(const Piece& p, std::int64_t channels) {
    std::string out = box_text(p.box, channels);
    if (std::any_of(p.shift.begin(), p.shift.end(), [](std::int64_t v) { return v != 0; }))
        out += ", across the border from " + box_text(p.source(), channels);
    return out;
}

std::string pieces_text(const char* what, const std::vector<Piece>& pieces, const char* way, std::int64_t channels) {
    std::string out;
    for (const Piece& p : pieces)
        out += fmt::format("      {} {} rank {}: {}\n", what, way, p.peer, piece_text(p, channels));
    return out;
}

std::string exchange_text(const char* name, const Exchange& e, std::int64_t channels) {
    if (e.empty()) return "";
    std::string out = fmt::format("    {}:\n", name);
    out += pieces_text("send", e.sends, "to", channels);
    out += pieces_text("receive", e.receives, "from", channels);
    for (const Piece& p : e.local) out += fmt::format("      local {}\n", piece_text(p, channels));
    return out;
}

}  // namespace

std::string plan_text(const frontend::Network& net, const Plan& plan) {
    std::string out = fmt::format("plan of rank {} of {}, mini-batch {}\n", plan.rank, plan.procs, plan.batch);
    for (std::size_t i = 0; i < plan.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        const LayerPlan& s = plan.layers[i];
        out += fmt::format("layer {} ({}): split {}\n", l.name, frontend::op_name(l.op), s.dist.split->str());
        for (std::size_t j = 0; j < s.operands.size(); ++j) {
            const std::string& in = net.layers[static_cast<std::size_t>(l.inputs[j])].name;
            out += s.operands[j] < 0 ? fmt::format("  reads {}: labels over its logits' tile\n", in)
                                     : fmt::format("  reads {}: tile {}\n", in,
                                                   plan.layers[static_cast<std::size_t>(l.inputs[j])]
                                                       .tiles[static_cast<std::size_t>(s.operands[j])]
                                                       .id);
        }
        for (const TilePlan& t : s.tiles) {
            out += fmt::format("  tile {}{}: {} {}", t.id,
                               t.copy ? fmt::format(" (copy in split {}{})", t.spec.split.str(),
                                                    whole_samples(l, t.spec) ? ", whole samples" : "")
                                      : "",
                               box_text(t.box, s.whole.c), margins_text(t.need));
            if (t.replicated) out += t.leader ? ", replicated (leader)" : ", replicated";
            if (t.partial) out += ", partial sums";
            out += fmt::format(", {} reader{}", t.readers, t.readers == 1 ? "" : "s");
            if (t.grad_buffer >= 0)
                out += fmt::format(", gradient in buffer {} over steps {}..{}{}", t.grad_buffer, t.grad_first,
                                   t.grad_last, t.zero_grad ? ", zeroed" : "");
            if (t.forward_buffer >= 0)
                out += fmt::format(", {}: values in buffer {}",
                                   s.narrowed ? fmt::format("kept in {}", precision_name(*s.dist.precision))
                                              : std::string("recomputed"),
                                   t.forward_buffer);
            if (t.backward_buffer >= 0) out += fmt::format(", in backward {}", t.backward_buffer);
            out += "\n";
            out += exchange_text("forward", t.forward, s.whole.c);
            out += exchange_text("backward", t.backward, s.whole.c);
        }
        if (s.overlapped) {
            out += fmt::format("  overlap: inner {}, then", box_text(s.overlap.inner, s.whole.c));
            for (std::size_t k = 0; k < s.overlap.strips.size(); ++k)
                out += fmt::format("{} {}", k ? "," : "", box_text(s.overlap.strips[k], s.whole.c));
            out += "\n";
        }
        if (s.scatters_early) out += "  backward: its input gradient's halo goes back during the weight gradient\n";
        if (s.segment_start) out += "  kept: asked to be recomputed, the start of a segment that backward makes again\n";
        for (const bool widened : {false, true}) {
            std::string names;
            for (int r : s.recompute_before)
                if (plan.layers[static_cast<std::size_t>(r)].narrowed == widened)
                    names += fmt::format(" '{}'", net.layers[static_cast<std::size_t>(r)].name);
            if (!names.empty())
                out += fmt::format("  before backward, {}:{}\n", widened ? "widened" : "forward again", names);
        }
        switch (s.group.kind) {
            case GroupPlan::Kind::none: break;
            case GroupPlan::Kind::every: out += "  group: every process\n"; break;
            case GroupPlan::Kind::samples:
                out += fmt::format("  group: sample group {} of split {}\n", s.group.colour, s.group.key);
                break;
            case GroupPlan::Kind::channels:
                out += fmt::format("  group: the processes of channel block {} of split {}\n", s.group.colour,
                                   s.group.key.substr(std::string("channels of ").size()));
                break;
        }
    }
    bool values = false;
    for (const LayerPlan& s : plan.layers)
        for (const TilePlan& t : s.tiles) values = values || t.forward_buffer >= 0;
    out += values ? "buffers of gradients and recomputed values:" : "gradient buffers:";
    for (std::int64_t b : plan.buffers) out += fmt::format(" {}", b);
    out += " elements\n";
    return out;
}

}  // namespace dsl::scheduler
