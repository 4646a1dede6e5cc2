// The performance model's memory that tensors share over a step: gradient buffers, and the values of
// recomputed and narrowed layers among them (the plan's placement, per layer).
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/recompute.hpp>

#include "shared_buffers.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace dsl::scheduler {

using frontend::Layer;

// Gradients share buffers, each from its first reader's backward to its own layer's (plan.cpp's
// plan_gradients, per layer here): in a chain two at a time. Recomputed layers' output tiles are not kept:
// while alive they share memory with the gradients (recompute.hpp's timeline, in buffers as plan_recompute
// places them), and layers never read again in backward cost no recomputation.
void Model::shared_memory(Prediction& out, const RecomputeTimeline& timeline) const {
    using Use = std::pair<double, StepSpan>;
    const auto pool = [](std::vector<Use> uses) {
        std::stable_sort(uses.begin(), uses.end(),
                         [](const Use& a, const Use& b) { return a.second.first < b.second.first; });
        SharedBuffers shared;
        for (const auto& [bytes, span] : uses)
            shared.place({static_cast<std::int64_t>(std::ceil(bytes)), span.first, span.last});
        double total = 0.0;
        for (std::int64_t b : shared.sizes()) total += static_cast<double>(b);
        return total;
    };
    const int count = static_cast<int>(net_.layers.size());
    std::vector<Use> uses;
    for (int i = 0; i < count; ++i) {
        if (net_.layers[static_cast<std::size_t>(i)].is_data()) continue;
        const int last = count - 1 - i;
        int first = last;
        for (int r : readers_[static_cast<std::size_t>(i)])
            first = std::min(first, net_.layers[static_cast<std::size_t>(r)].is_loss() ? -1 : count - 1 - r);
        uses.emplace_back(out.layers[static_cast<std::size_t>(i)].cost.output, gradient_steps(first, last, count));
    }
    out.gradients = pool(uses);
    out.kept = out.activations;
    for (std::size_t i = 0; i < net_.layers.size(); ++i) {
        LayerPrediction& lp = out.layers[i];
        lp.recomputed = timeline.recomputed[i];
        lp.segment_start = timeline.kept[i];
        if (lp.segment_start) lp.cost.recompute = 0.0;  // kept: a segment is made again from it
    }
    if (!timeline.any()) return;
    for (std::size_t i = 0; i < net_.layers.size(); ++i)
        if (!timeline.before[i].empty()) out.segments.emplace_back(static_cast<int>(i), timeline.before[i]);
    for (std::size_t i = 0; i < net_.layers.size(); ++i) {
        LayerPrediction& lp = out.layers[i];
        if (!timeline.dropped(i)) continue;
        out.activations -= lp.cost.output;
        // A narrowed layer's 16-bit copy is kept the whole step, where a backward reads it; elsewhere its 16 bits
        // go to the trainer's scratch.
        if (timeline.narrowed[i] && timeline.again[i].empty())
            lp.cost.scratch[4] = std::max(lp.cost.scratch[4], lp.cost.output / 2.0);
        else if (timeline.narrowed[i])
            out.activations += lp.cost.output * precision_bytes(*lp.dist.precision) / 4.0;
        uses.emplace_back(lp.cost.output, timeline.forward[i]);
        if (timeline.again[i].empty()) {
            lp.cost.recompute = 0.0;  // nobody reads it in backward
        } else {
            uses.emplace_back(lp.cost.output, timeline.again[i]);
        }
        out.recompute += lp.cost.recompute;
    }
    // What the values add to the gradients' buffers counts as activations.
    out.activations += pool(std::move(uses)) - out.gradients;
}

// The paths decided on the first process's plan of the schedule's splits (made once for a run of schedules
// that differ in their precision and recomputation alone: the auto-scheduler's), its layers kept or dropped
// as `timeline` says.
std::vector<LayerPaths> Model::paths_of(const Schedule& schedule, const RecomputeTimeline& timeline) const {
    std::vector<std::pair<Split, bool>> splits;
    for (const Distribution& d : schedule.layers) splits.emplace_back(d.split.value_or(Split{}), d.overlap.value_or(false));
    if (!planned_ || splits != planned_for_) {
        planned_.reset();
        planned_for_ = splits;
        try {
            planned_ = make_plan(net_, schedule, batch_, 0, static_cast<int>(procs_));
        } catch (const UserError&) {
            return {};  // a split the mini-batch cannot take: no plan, no paths
        }
    }
    Plan& plan = *planned_;
    for (std::size_t i = 0; i < plan.layers.size() && i < schedule.layers.size(); ++i) {
        LayerPlan& p = plan.layers[i];
        p.dist.precision = schedule.layers[i].precision.value_or(Precision::float32);
        p.dist.recompute = schedule.layers[i].recompute.value_or(false);
        p.recomputed = timeline.recomputed[i];
        p.segment_start = timeline.kept[i];
        p.narrowed = timeline.narrowed[i];
        p.stored = timeline.narrowed[i] && !timeline.again[i].empty();
    }
    return kernel_paths(net_, plan, kinds_, facts_);
}

}  // namespace dsl::scheduler
