// Recomputation: its timeline (recompute.hpp), and in the plan the memory recomputed layers' values share
// with the gradients.
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/recompute.hpp>

#include "shared_buffers.hpp"

#include <algorithm>
#include <cmath>

namespace dsl::scheduler {

using frontend::Layer;

bool recomputable(const Layer& layer) { return !layer.is_data() && !layer.is_loss(); }

bool backward_reads_output(const Layer& layer) {
    return (layer.op == frontend::OpKind::relu || layer.op == frontend::OpKind::leaky_relu) &&
           layer.activation_slope() >= 0.0;
}

bool relu_fuses_into(const Layer& layer, const Layer& relu) {
    using frontend::OpKind;
    return backward_reads_output(relu) && (layer.op == OpKind::conv || layer.op == OpKind::batchnorm ||
                                           (layer.op == OpKind::add && layer.inputs.size() == 2));
}

bool RecomputeTimeline::any() const {
    return std::find(recomputed.begin(), recomputed.end(), true) != recomputed.end() ||
           std::find(narrowed.begin(), narrowed.end(), true) != narrowed.end();
}

namespace {

struct Timeline {
    const frontend::Network& net;
    RecomputeTimeline out;

    int steps() const { return static_cast<int>(net.layers.size()); }
    const Layer& layer(int i) const { return net.layers[static_cast<std::size_t>(i)]; }

    // The inputs of layer `i` are in memory at backward step `at`: made again if they are recomputed ones,
    // with what their forward reads, before `reader`'s backward.
    void read_at(int i, int at, int reader) {
        for (int q : layer(i).inputs) use(q, at, reader);
    }

    // Layer q's values are in memory at backward step `at`.
    void use(int q, int at, int reader) {
        if (!out.dropped(static_cast<std::size_t>(q))) return;
        make(q, at, reader);
        out.again[static_cast<std::size_t>(q)].last = at;
    }

    void make(int q, int at, int reader) {
        StepSpan& again = out.again[static_cast<std::size_t>(q)];
        if (!again.empty()) return;
        if (out.recomputed[static_cast<std::size_t>(q)]) read_at(q, at, reader);
        again = {at, at};
        out.before[static_cast<std::size_t>(reader)].push_back(q);
    }
};

}  // namespace

RecomputeTimeline recompute_timeline(const frontend::Network& net, const std::vector<bool>& recompute,
                                     const std::vector<bool>& narrow) {
    Timeline t{net, {}};
    const std::size_t count = net.layers.size();
    RecomputeTimeline& out = t.out;
    out.recomputed.assign(count, false);
    out.kept.assign(count, false);
    out.narrowed.assign(count, false);
    out.forward.assign(count, StepSpan{});
    out.again.assign(count, StepSpan{});
    out.before.assign(count, {});
    for (std::size_t i = 0; i < count && i < recompute.size(); ++i)
        out.recomputed[i] = recompute[i] && recomputable(net.layers[i]);
    for (std::size_t i = 0; i < count && i < narrow.size(); ++i)
        out.narrowed[i] = narrow[i] && !out.recomputed[i] && recomputable(net.layers[i]);
    if (!out.any()) return out;
    // Forward: from the layer's step to its last reader's, or to the end of forward when nobody reads it or a
    // loss does (eval and predict read a loss's inputs when forward is done).
    for (std::size_t r = 0; r < count; ++r)
        for (int q : net.layers[r].inputs)
            out.forward[static_cast<std::size_t>(q)].last =
                net.layers[r].is_loss() ? static_cast<int>(count) - 1
                                        : std::max(out.forward[static_cast<std::size_t>(q)].last, static_cast<int>(r));
    // A ReLU that reads the layer before it may be written in that layer's forward (the trainer's fusion.cpp):
    // from that step.
    for (std::size_t i = 0; i < count; ++i) {
        StepSpan& f = out.forward[i];
        const Layer& l = net.layers[i];
        const bool fusable = i > 0 && l.inputs == std::vector<int>{static_cast<int>(i) - 1} &&
                             relu_fuses_into(net.layers[i - 1], l);
        const int first = static_cast<int>(i) - (fusable ? 1 : 0);
        f = out.dropped(i) ? StepSpan{first, f.last < 0 ? t.steps() - 1 : f.last} : StepSpan{};
    }
    // Backward: every layer but data and losses reads its inputs' values (a loss wrote its gradient in
    // forward), or, a relu's, its own.
    for (int b = t.steps() - 1; b >= 0; --b) {
        if (!recomputable(t.layer(b))) continue;
        const int at = t.steps() + (t.steps() - 1 - b);
        if (backward_reads_output(t.layer(b)))
            t.use(b, at, b);
        else
            t.read_at(b, at, b);
    }
    return out;
}

namespace {

// Each layer's gradient, of its output's bytes, from its first reader's backward to its own (as the model counts
// them, model_memory.cpp; a loss writes its input's in forward).
std::vector<BufferUse> gradient_uses(const frontend::Network& net, const std::vector<double>& bytes) {
    const int count = static_cast<int>(net.layers.size());
    std::vector<int> first(net.layers.size());
    for (int i = 0; i < count; ++i) first[static_cast<std::size_t>(i)] = count - 1 - i;
    for (int r = 0; r < count; ++r)
        for (int q : net.layers[static_cast<std::size_t>(r)].inputs) {
            int& f = first[static_cast<std::size_t>(q)];
            f = std::min(f, net.layers[static_cast<std::size_t>(r)].is_loss() ? -1 : count - 1 - r);
        }
    std::vector<BufferUse> uses;
    for (int i = 0; i < count; ++i) {
        const auto u = static_cast<std::size_t>(i);
        if (net.layers[u].is_data()) continue;
        const StepSpan g = gradient_steps(first[u], count - 1 - i, count);
        uses.push_back({static_cast<std::int64_t>(std::ceil(bytes[u])), g.first, g.last});
    }
    return uses;
}

// What a step holds beyond what no recomputation changes, under `timeline`: the values of the layers asked to be
// recomputed that it keeps, and the buffers that the dropped layers' values share with the gradients. Bytes.
double segment_memory(const std::vector<bool>& asked, const std::vector<double>& bytes,
                      std::vector<BufferUse> uses, const RecomputeTimeline& timeline) {
    double kept = 0.0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        const auto size = static_cast<std::int64_t>(std::ceil(bytes[i]));
        if (timeline.dropped(i)) {
            uses.push_back({size, timeline.forward[i].first, timeline.forward[i].last});
            if (!timeline.again[i].empty()) uses.push_back({size, timeline.again[i].first, timeline.again[i].last});
        } else if (asked[i]) {
            kept += bytes[i];
        }
    }
    std::stable_sort(uses.begin(), uses.end(), [](const BufferUse& a, const BufferUse& b) { return a.first < b.first; });
    SharedBuffers shared;
    for (const BufferUse& use : uses) shared.place(use);
    for (std::int64_t b : shared.sizes()) kept += static_cast<double>(b);
    return kept;
}

// The bytes that backward computes again under `timeline`: the dropped layers that a backward reads.
double recomputed_bytes(const std::vector<double>& bytes, const RecomputeTimeline& timeline) {
    double out = 0.0;
    for (std::size_t i = 0; i < bytes.size(); ++i)
        if (timeline.recomputed[i] && !timeline.again[i].empty()) out += bytes[i];
    return out;
}

}  // namespace

std::vector<bool> segment_starts(const frontend::Network& net, const std::vector<bool>& asked,
                                 const std::vector<bool>& narrow, const std::vector<double>& bytes) {
    const std::size_t count = net.layers.size();
    std::vector<bool> none(count, false);
    double total = 0.0;
    for (std::size_t i = 0; i < count && i < asked.size(); ++i)
        if (asked[i] && recomputable(net.layers[i])) total += bytes[i];
    if (total <= 0.0) return none;
    std::vector<std::vector<bool>> candidates{none};
    std::vector<bool> relus(none);
    for (std::size_t i = 0; i < count; ++i) relus[i] = asked[i] && backward_reads_output(net.layers[i]);
    candidates.push_back(relus);
    for (const double parts : {2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0}) {
        // A value kept each time the dropped ones since the last kept pass the budget.
        std::vector<bool> kept(none);
        double run = 0.0;
        for (std::size_t i = 0; i < count; ++i) {
            if (!asked[i] || !recomputable(net.layers[i])) continue;
            run += bytes[i];
            if (run > total / parts) kept[i] = true, run = 0.0;
        }
        candidates.push_back(kept);
    }
    const std::vector<BufferUse> gradients = gradient_uses(net, bytes);
    std::vector<bool> best;
    double best_memory = 0.0, best_recomputed = 0.0;
    std::ptrdiff_t best_kept = 0;
    for (const std::vector<bool>& kept : candidates) {
        std::vector<bool> dropped(count, false);
        for (std::size_t i = 0; i < count; ++i) dropped[i] = asked[i] && !kept[i];
        const RecomputeTimeline t = recompute_timeline(net, dropped, narrow);
        const double memory = segment_memory(asked, bytes, gradients, t), again = recomputed_bytes(bytes, t);
        const std::ptrdiff_t keeps = std::count(kept.begin(), kept.end(), true);
        const bool better = best.empty() || memory < best_memory ||
                            (memory == best_memory && (keeps < best_kept || (keeps == best_kept && again < best_recomputed)));
        if (better) best = kept, best_memory = memory, best_recomputed = again, best_kept = keeps;
    }
    return best;
}

void plan_recompute(const frontend::Network& net, Plan& plan) {
    // Each layer's output tile on the first process, which every process's choice of segments reads.
    std::vector<double> bytes(net.layers.size(), 0.0);
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        if (!recomputable(l)) continue;
        const Split& split = *plan.layers[i].dist.split;
        const TileSpec own{static_cast<int>(i), split, false, own_channels(l)};
        bytes[i] = static_cast<double>(tile_box(l, own, plan.batch, 0).dims().elements()) * 4.0;
    }
    const RecomputeTimeline timeline =
        timeline_of(net, [&](std::size_t i) -> const Distribution& { return plan.layers[i].dist; }, bytes);
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        plan.layers[i].recomputed = timeline.recomputed[i];
        plan.layers[i].segment_start = timeline.kept[i];
    }
    if (!timeline.any()) return;
    // Every tile of a recomputed layer, in forward and again in backward, in order of their first step.
    struct Use {
        int* buffer;
        std::int64_t size;
        StepSpan span;
    };
    std::vector<Use> uses;
    const int layers = static_cast<int>(net.layers.size());
    for (LayerPlan& s : plan.layers)
        for (TilePlan& t : s.tiles)
            if (t.grad_buffer >= 0)
                uses.push_back({&t.grad_buffer, t.box.grown(t.need).dims().elements(),
                                gradient_steps(t.grad_first, t.grad_last, layers)});
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (!timeline.dropped(i)) continue;
        plan.layers[i].narrowed = timeline.narrowed[i];
        plan.layers[i].stored = timeline.narrowed[i] && !timeline.again[i].empty();
        plan.layers[i].after_forward = plan.layers[i].stored || timeline.forward[i].last == layers - 1;
        for (TilePlan& t : plan.layers[i].tiles) {
            const std::int64_t size = t.box.grown(t.need).dims().elements();
            uses.push_back({&t.forward_buffer, size, timeline.forward[i]});
            if (!timeline.again[i].empty()) uses.push_back({&t.backward_buffer, size, timeline.again[i]});
        }
    }
    for (std::size_t i = 0; i < net.layers.size(); ++i) plan.layers[i].recompute_before = timeline.before[i];
    std::stable_sort(uses.begin(), uses.end(), [](const Use& a, const Use& b) { return a.span.first < b.span.first; });
    SharedBuffers shared;
    for (const Use& u : uses) *u.buffer = shared.place({u.size, u.span.first, u.span.last});
    plan.buffers = shared.sizes();
}

}  // namespace dsl::scheduler
