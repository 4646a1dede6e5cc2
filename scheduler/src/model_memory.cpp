// The performance model's memory that tensors share over a step: gradient buffers, and the values of
// recomputed and narrowed layers among them (the plan's placement, per layer).
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/recompute.hpp>

#include "shared_buffers.hpp"

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
void Model::shared_memory(Prediction& out) const {
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
    const RecomputeTimeline timeline =
        timeline_of(net_, [&](std::size_t i) -> const Distribution& { return out.layers[i].dist; });
    if (!timeline.any()) return;
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

}  // namespace dsl::scheduler
