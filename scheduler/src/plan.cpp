// The execution plan of one process: tile placement, margins, halo exchanges and shuffles, gradient buffers
// and process groups, in that order.
#include <dsl/scheduler/plan.hpp>

#include <dsl/base/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::OpKind;

bool reads_whole_planes(const Layer& reader) { return reader.op == OpKind::fc; }

bool whole_planes(const Layer& producer, const TileSpec& s) {
    return s.whole && producer.planar() && s.split.h * s.split.w > 1;
}

bool replicated(const Layer& producer, const TileSpec& s) {
    return (!producer.planar() || whole_planes(producer, s)) && s.split.h * s.split.w > 1;
}

bool leader(const Layer& producer, const TileSpec& s, std::int64_t rank) {
    const Coords c = coords(s.split, rank);
    return !replicated(producer, s) || (c.h == 0 && c.w == 0);
}

Box tile_box(const Layer& producer, const TileSpec& s, std::int64_t batch, std::int64_t rank) {
    return tile_box(extent_of(producer, batch), s.split, rank, producer.planar() && !whole_planes(producer, s));
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
        if (a.layer != b.layer) return false;
        for (int r = 0; r < plan.procs; ++r)
            if (!(box_at(a, r) == box_at(b, r)) || leader_at(a, r) != leader_at(b, r)) return false;
        return true;
    }

    TileSpec own_spec(int i) const { return TileSpec{i, split_of(i), false}; }

    // What layer `reader` reads of its input `j`.
    TileSpec operand_spec(int reader, std::size_t j) const {
        const Layer& l = layer(reader);
        return TileSpec{l.inputs[j], split_of(reader), reads_whole_planes(l)};
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
                if (l.windowed()) t.windowed_readers.push_back(i);
                slot(i).operands.push_back(index);
            }
        }
    }

    // The rows and columns beyond its box that the tile at `rank` must hold for its windowed readers.
    Margins need_at(const TilePlan& t, int rank) const {
        Margins m;
        const Box box = box_at(t.spec, rank);
        for (int reader : t.windowed_readers) {
            const Margins r = box.reach(window_input(layer(reader), box_at(own_spec(reader), rank)));
            m = {std::max(m.top, r.top), std::max(m.bottom, r.bottom), std::max(m.left, r.left),
                 std::max(m.right, r.right)};
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
    void plan_zero_gradients() {
        for (int i = 0; i < layer_count(); ++i) {
            if (layer(i).op == OpKind::label) continue;
            for (TilePlan& t : slot(i).tiles) t.zero_grad = t.copy || t.readers != 1;
        }
        for (int i = 0; i < layer_count(); ++i) {
            const Layer& l = layer(i);
            if (!l.windowed()) continue;
            TilePlan& t = slot(l.inputs[0]).tiles[static_cast<std::size_t>(slot(i).operands[0])];
            // The part of the input's padded tile that the window reads, from its first row to its last.
            const Box read = window_input(l, slot(i).tiles.front().box);
            const std::int64_t ry = read.y0 - (t.box.y0 - t.need.top), rx = read.x0 - (t.box.x0 - t.need.left);
            const std::int64_t rh = read.y1 - read.y0, rw = read.x1 - read.x0;
            if (ry > t.need.top || rx > t.need.left || ry + rh < t.need.top + (t.box.y1 - t.box.y0) ||
                rx + rw < t.need.left + (t.box.x1 - t.box.x0))
                t.zero_grad = true;
        }
    }

    // Gradients live only from their first reader's backward to their own layer's: in a chain, two at a
    // time. Tiles whose spans do not meet share buffers, each tile taking the free buffer closest to its size
    // (growing the largest free one when none is large enough).
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
        struct Span {
            std::int64_t size = 0;
            int busy_until = -2;
        };
        std::vector<Span> buffers;
        for (TilePlan* t : tiles) {
            const Extent whole = slot(t->spec.layer).whole;
            // The tile with its margins.
            const std::int64_t need = (t->box.n1 - t->box.n0) * whole.c *
                                      (t->box.y1 - t->box.y0 + t->need.top + t->need.bottom) *
                                      (t->box.x1 - t->box.x0 + t->need.left + t->need.right);
            Span* best = nullptr;
            for (Span& b : buffers) {
                if (b.busy_until >= t->grad_first) continue;
                const bool fits = b.size >= need, best_fits = best && best->size >= need;
                if (!best || (fits && (!best_fits || b.size < best->size)) ||
                    (!fits && !best_fits && b.size > best->size))
                    best = &b;
            }
            if (!best) best = &buffers.emplace_back();
            best->size = std::max(best->size, need);
            best->busy_until = t->grad_last;
            t->grad_buffer = static_cast<int>(best - buffers.data());
        }
        plan.grad_buffers.clear();
        for (const Span& b : buffers) plan.grad_buffers.push_back(b.size);
    }

    // This process's part in moving `b` from process `from` to process `to`.
    void route(Exchange& p, int from, int to, const Box& b) const {
        const int me = plan.rank;
        if (from == me && to == me)
            p.local.push_back(b);
        else if (to == me)
            p.receives.push_back(Piece{from, b});
        else if (from == me)
            p.sends.push_back(Piece{to, b});
    }

    // Which process sends each part of every tile's padded box, and which receive it: for every process r
    // and every group of processes holding the same block of the tensor (one, or the replicas of a spatial
    // group), the part of r's padded box within the block comes from r itself where r holds it, else from
    // the group's first process. Every process computes the same plan, so sends and receives match. In
    // backward, the gradient of each part goes back the other way, to every process of the group, from the
    // one process that speaks for r's replicas.
    void plan_exchanges() {
        const int procs = plan.procs;
        for (int li = 0; li < layer_count(); ++li) {
            LayerPlan& s = slot(li);
            if (layer(li).is_data()) continue;  // made where needed
            const TileSpec owner = own_spec(li);
            const Extent d = s.whole;
            const Box extent{0, d.n, 0, d.h, 0, d.w};
            struct Group {
                Box box;
                std::vector<int> ranks;
            };
            std::vector<Group> blocks;
            for (int q = 0; q < procs; ++q) {
                const Box b = box_at(owner, q);
                auto it = std::find_if(blocks.begin(), blocks.end(), [&](const Group& g) { return g.box == b; });
                if (it == blocks.end())
                    blocks.push_back(Group{b, {q}});
                else
                    it->ranks.push_back(q);
            }
            for (TilePlan& t : s.tiles) {
                if (!t.copy && t.windowed_readers.empty()) continue;  // no margins: nothing to exchange
                for (int r = 0; r < procs; ++r) {
                    const Box want = box_at(t.spec, r).grown(need_at(t, r)).meet(extent);
                    const bool speaks = leader_at(t.spec, r);
                    for (const Group& g : blocks) {
                        const Box b = want.meet(g.box);
                        if (b.empty()) continue;
                        const bool holds = std::find(g.ranks.begin(), g.ranks.end(), r) != g.ranks.end();
                        const int from = holds ? r : g.ranks.front();
                        if (!t.copy && from == r) continue;  // the tile's own interior
                        route(t.forward, from, r, b);
                        if (!speaks) continue;
                        for (int q : g.ranks)
                            if (q != r || t.copy) route(t.backward, r, q, b);
                    }
                }
            }
        }
    }

    // Batch norm and global pooling sum over a group of processes: every process, a split's sample group
    // (the processes with the same block of samples), or none. Group norm's statistics are per sample: its
    // sample group, as global pooling's.
    void plan_groups() {
        auto sample_group = [&](const Split& split) {
            return GroupPlan{GroupPlan::Kind::samples, split.str(), static_cast<int>(coords(split, plan.rank).n)};
        };
        for (int i = 0; i < layer_count(); ++i) {
            const Layer& l = layer(i);
            LayerPlan& s = slot(i);
            if (l.op == OpKind::global_avgpool || l.op == OpKind::groupnorm) s.group = sample_group(split_of(i));
            if (l.op != OpKind::batchnorm) continue;
            switch (*s.dist.bn) {
                case BatchNormStats::batch: s.group = GroupPlan{GroupPlan::Kind::every, "", 0}; break;
                case BatchNormStats::spatial: s.group = sample_group(split_of(i)); break;
                case BatchNormStats::local: s.group = GroupPlan{}; break;
            }
        }
    }
};

}  // namespace

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
    return plan;
}

namespace {

std::string box_text(const Box& b) {
    return fmt::format("n[{},{}) y[{},{}) x[{},{})", b.n0, b.n1, b.y0, b.y1, b.x0, b.x1);
}

std::string pieces_text(const char* what, const std::vector<Piece>& pieces, const char* way) {
    std::string out;
    for (const Piece& p : pieces) out += fmt::format("      {} {} rank {}: {}\n", what, way, p.peer, box_text(p.box));
    return out;
}

std::string exchange_text(const char* name, const Exchange& e) {
    if (e.empty()) return "";
    std::string out = fmt::format("    {}:\n", name);
    out += pieces_text("send", e.sends, "to");
    out += pieces_text("receive", e.receives, "from");
    for (const Box& b : e.local) out += fmt::format("      local {}\n", box_text(b));
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
            const Margins& m = t.need;
            out += fmt::format("  tile {}{}: {} margins top {} bottom {} left {} right {}", t.id,
                               t.copy ? fmt::format(" (copy in split {}{})", t.spec.split.str(),
                                                    whole_planes(l, t.spec) ? ", whole planes" : "")
                                      : "",
                               box_text(t.box), m.top, m.bottom, m.left, m.right);
            if (t.replicated) out += t.leader ? ", replicated (leader)" : ", replicated";
            out += fmt::format(", {} reader{}", t.readers, t.readers == 1 ? "" : "s");
            if (t.grad_buffer >= 0)
                out += fmt::format(", gradient in buffer {} over steps {}..{}{}", t.grad_buffer, t.grad_first,
                                   t.grad_last, t.zero_grad ? ", zeroed" : "");
            out += "\n";
            out += exchange_text("forward", t.forward);
            out += exchange_text("backward", t.backward);
        }
        switch (s.group.kind) {
            case GroupPlan::Kind::none: break;
            case GroupPlan::Kind::every: out += "  group: every process\n"; break;
            case GroupPlan::Kind::samples:
                out += fmt::format("  group: sample group {} of split {}\n", s.group.colour, s.group.key);
                break;
        }
    }
    out += "gradient buffers:";
    for (std::int64_t b : plan.grad_buffers) out += fmt::format(" {}", b);
    return out + " elements\n";
}

}  // namespace dsl::scheduler
