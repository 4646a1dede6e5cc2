// The trainer's fast paths under a plan (paths.hpp): each decided from the plan and the run's facts, with the
// reason where it is off.
#include <dsl/scheduler/paths.hpp>

#include <dsl/scheduler/recompute.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <dsl/base/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::OpKind;

const char* path_name(PathKind kind) {
    switch (kind) {
        case PathKind::blocked: return "blocked";
        case PathKind::relu_fused: return "relu fused";
        case PathKind::filter_blocks: return "filter-block gradients";
        case PathKind::shared_weights: return "shared weights";
        case PathKind::node_sums: return "node sums";
        case PathKind::products16: return "16-bit products";
        case PathKind::overlap: return "overlap";
    }
    return "";
}

const Path* LayerPaths::find(PathKind kind) const {
    for (const Path& p : paths)
        if (p.kind == kind) return &p;
    return nullptr;
}

bool LayerPaths::on(PathKind kind) const {
    const Path* p = find(kind);
    return p && p->on;
}

void LayerPaths::set(PathKind kind, bool on, std::string why) {
    auto it = std::find_if(paths.begin(), paths.end(), [&](const Path& p) { return p.kind == kind; });
    if (it == paths.end())
        it = paths.insert(std::upper_bound(paths.begin(), paths.end(), kind,
                                           [](PathKind k, const Path& p) { return k < p.kind; }),
                          Path{kind, false, {}});
    it->on = on;
    it->why = on ? std::string() : std::move(why);
}

std::string paths_text(const LayerPaths& paths) {
    std::string out;
    for (const Path& p : paths.paths) {
        if (!out.empty()) out += ", ";
        out += p.on ? path_name(p.kind) : fmt::format("off: {}: {}", path_name(p.kind), p.why);
    }
    return out;
}

namespace {

// Works the paths out, a kind of path at a time.
struct Decider {
    const frontend::Network& net;
    const Plan& plan;
    const KindCostTable& kinds;
    const RunFacts& facts;
    std::vector<LayerPaths> out;

    const Layer& layer(std::size_t i) const { return net.layers[i]; }
    const LayerPlan& at(std::size_t i) const { return plan.layers[i]; }
    Keeping keeping(std::size_t i) const {
        return {at(i).recomputed, at(i).narrowed, at(i).dist.precision.value_or(Precision::float32)};
    }

    // Where a layer's convolution multiplies in 16 bits: the precision it asks for, where the kernels have it.
    std::optional<Precision> products16(std::size_t i) const {
        const auto p = at(i).dist.products16(layer(i).op);
        if (!p) return std::nullopt;
        return (*p == Precision::bfloat16 ? facts.bfloat16_products : facts.float16_products) ? p : std::nullopt;
    }

    // Why a layer's tile could not be blocked for what it is (its kind's kernels), or empty.
    std::string planar_kernels(std::size_t i) const {
        if (!kinds.of(layer(i).op).runs_blocked()) return "its kernels take planar tiles";
        return "";
    }

    // Whether a convolution reads padding beyond its window's reach from the input tile of layer `in` (its
    // kernels pad that far and no further): what its window over its whole output reads beyond the input.
    bool pads_beyond_reach(std::size_t reader, std::size_t in) const {
        const Layer& l = layer(reader);
        const Dims& whole = at(in).whole;
        const Box read = window_input(l, whole_box(at(reader).whole), Range{0, whole.c});
        for (int d = 0; d < whole.rank(); ++d) {
            const std::int64_t reach = (l.kernel[d] - 1) * window_dilation(l, d) + 1;
            if (std::max<std::int64_t>(0, -read.space[d].lo) >= reach ||
                std::max<std::int64_t>(0, read.space[d].hi - whole.space[d]) >= reach)
                return true;
        }
        return false;
    }

    // Why layer i's tile cannot be kept in blocks of 16 channels, or empty: see backend/src/train/layouts.cpp.
    std::string planar(std::size_t i) const {
        if (const std::string why = planar_kernels(i); !why.empty()) return why;
        if (at(i).tiles.size() != 1) return "a reader under another split reads a copy of it";
        const TilePlan& t = at(i).tiles.front();
        const Dims& whole = at(i).whole;
        if (t.periodic) return "it is padded periodically";
        if (whole.rank() < 2 || whole.rank() > 3) return "it is not an image or a volume";
        if (whole.c % 16 != 0) return fmt::format("its {} channels are not whole blocks of 16", whole.c);
        if (t.box.c.size() != whole.c) return "its channels are split (F or C parts)";
        if (t.reader_layers.empty()) return "nothing reads it";
        for (int r : t.reader_layers) {
            const auto j = static_cast<std::size_t>(r);
            if (!planar_kernels(j).empty()) return fmt::format("its reader '{}' takes planar tiles", layer(j).name);
            for (std::size_t input = 0; input < layer(j).inputs.size(); ++input)
                if (layer(j).inputs[input] == static_cast<int>(i) && at(j).operands[input] != 0)
                    return fmt::format("its reader '{}' reads a copy of it", layer(j).name);
            if (layer(j).op == OpKind::conv && pads_beyond_reach(j, i))
                return fmt::format("its reader '{}' reads padding beyond its window's reach", layer(j).name);
        }
        return "";
    }

    void blocked() {
        std::vector<std::string> why(net.layers.size());
        std::vector<bool> blocked(net.layers.size(), false);
        const std::string planar_set = !facts.blocked_kernels ? facts.planar_why
                                       : !facts.training      ? "evaluation and prediction keep planar tiles"
                                                              : "";
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (!kinds.of(layer(i).op).runs_blocked()) continue;
            why[i] = planar_set.empty() ? planar(i) : planar_set;
            blocked[i] = why[i].empty();
        }
        // Batch norm, ReLU and add read and write tiles of one layout: all of theirs blocked, or none
        // (convolutions reorder between the two).
        for (bool changed = true; changed;) {
            changed = false;
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                const Layer& l = layer(i);
                if (l.op == OpKind::conv || !kinds.of(l.op).runs_blocked()) continue;
                std::vector<std::size_t> tiles{i};
                for (int in : l.inputs) tiles.push_back(static_cast<std::size_t>(in));
                const auto planar_one = std::find_if(tiles.begin(), tiles.end(), [&](std::size_t j) { return !blocked[j]; });
                if (planar_one == tiles.end()) continue;
                for (std::size_t j : tiles)
                    if (blocked[j]) {
                        blocked[j] = false, changed = true;
                        why[j] = fmt::format("'{}', whose tiles must be of its layout, is planar", layer(*planar_one).name);
                    }
            }
        }
        for (std::size_t i = 0; i < net.layers.size(); ++i)
            if (kinds.of(layer(i).op).runs_blocked() && !layer(i).is_data())
                out[i].set(PathKind::blocked, blocked[i], why[i]);
    }

    // A convolution, batch norm or sum of two whose one reader is a ReLU next in order: see fusion.cpp.
    void relu_fused() {
        for (std::size_t r = 1; r < net.layers.size(); ++r) {
            const std::size_t i = r - 1;
            if (!relu_fuses_into(layer(i), layer(r))) continue;
            std::string why;
            const TilePlan& own = at(i).tiles.front();
            if (!facts.training)
                why = "evaluation and prediction run them apart";
            else if (layer(i).op == OpKind::conv && facts.device != Device::cpu)
                why = "a GPU's convolution writes its output, then the ReLU runs";
            else if (at(i).tiles.size() != 1 || own.readers != 1)
                why = "other layers, or copies in other splits, read its output";
            else if (at(r).operands[0] != 0 || !(own.box == at(r).tiles.front().box))
                why = "the ReLU reads it under another split";
            else if (!relu_fuses_keeping(keeping(i), keeping(r), layer(r).op == OpKind::relu))
                why = at(i).recomputed || at(r).recomputed
                          ? "it or the ReLU is recomputed"
                          : "it is kept in 16 bits, and the ReLU is not, or in another type, or leaky";
            out[i].set(PathKind::relu_fused, why.empty(), why);
        }
    }

    // Of a layer with parameters, where the processes that hold them are more than one: one copy of them on the
    // node, and their gradients summed there (backend/src/train/optimizer.cpp).
    void node_memory() {
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            const Layer& l = layer(i);
            if (l.params == 0) continue;
            const Split& split = *at(i).dist.split;
            const std::int64_t holders = splits_channels(l, split) ? plan.procs / (split.c * split.f) : plan.procs;
            if (holders < 2) continue;
            const std::string why = facts.device != Device::cpu ? "its parameters are in a GPU's memory"
                                    : !facts.node_memory ? "the processes do not share a node's memory (several nodes)"
                                                         : "";
            out[i].set(PathKind::shared_weights, why.empty(), why);
            out[i].set(PathKind::node_sums, why.empty(), why);
        }
    }

    // A convolution whose weight gradient is computed by blocks of filters: see filter_blocks.cpp.
    void filter_blocks() {
        if (plan.procs < 2) return;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            const Layer& l = layer(i);
            if (l.op != OpKind::conv) continue;
            const Split& split = *at(i).dist.split;
            const std::size_t in = static_cast<std::size_t>(l.inputs[0]);
            const TilePlan& x = at(in).tiles[static_cast<std::size_t>(at(i).operands[0])];
            const Dims &xd = at(in).whole, &yd = at(i).whole;
            const double weights = static_cast<double>(l.params - (l.bias ? l.filters : 0));
            std::string why;
            if (!facts.filter_blocks)
                why = "turned off";
            else if (facts.device != Device::cpu)
                why = "the kernels cannot pad a window over the whole input themselves";
            else if (!facts.blocked_kernels)
                why = "it needs blocked tiles, which are off: " + facts.planar_why;
            else if (!out[i].on(PathKind::shared_weights))
                why = "its weights are not shared on the node";
            else if (facts.loss_scaling)
                why = "loss scaling reads every process's whole gradient";
            else if (split.n != 1 || split.channel_parts() || split.spatial_procs() != plan.procs)
                why = "the processes split more than each sample's space";
            else if (x.periodic)
                why = "its input is padded periodically";
            else if (x.copy)
                why = "it reads a copy of its input under another split";
            else if (l.filters % (plan.procs * 16) != 0)
                why = fmt::format("its {} filters are not whole blocks of 16 for each of {} processes", l.filters,
                                  plan.procs);
            else if (weights < static_cast<double>(xd.elements() + yd.elements()))
                why = "its weights are fewer than its input and output: summing its gradient costs less";
            out[i].set(PathKind::filter_blocks, why.empty(), why);
        }
    }

    void products() {
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            const auto asked = at(i).dist.products16(layer(i).op);
            if (!asked) continue;
            const bool on = products16(i).has_value();
            out[i].set(PathKind::products16, on,
                       fmt::format("no {} kernels here: rounded to {}, multiplied in float32", precision_name(*asked),
                                   precision_name(*asked)));
        }
    }

    void overlap() {
        for (std::size_t i = 0; i < net.layers.size(); ++i)
            if (at(i).dist.overlap.value_or(false) && layer(i).windowed())
                out[i].set(PathKind::overlap, at(i).overlapped,
                           "nothing to overlap: no other process sends it a halo before it");
    }
};

}  // namespace

std::vector<LayerPaths> kernel_paths(const frontend::Network& net, const Plan& plan, const KindCostTable& kinds,
                                     const RunFacts& facts) {
    DSL_INTERNAL_CHECK(plan.layers.size() == net.layers.size(), "paths of a plan for another network");
    Decider d{net, plan, kinds, facts, std::vector<LayerPaths>(net.layers.size())};
    d.blocked();
    d.relu_fused();
    d.node_memory();
    d.filter_blocks();
    d.products();
    d.overlap();
    return d.out;
}

}  // namespace dsl::scheduler
