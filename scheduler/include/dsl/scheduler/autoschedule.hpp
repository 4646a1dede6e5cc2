// The auto-scheduler: fills what a schedule leaves open with the distributions a cost model finds fastest
// (section 5.3 of the reference paper). Fields the user fixed are kept.
//
// The search minimizes the sum of every layer's cost (LayerCost::time) and every shuffle between adjacent
// layers whose distributions differ. The default method is exact: dynamic programming over the network's
// frontier (the layers computed whose outputs some later layer still reads), in layer order. For a chain
// that is the paper's shortest path; a residual block keeps two tensors live, so its states are pairs of
// candidates. Where a frontier would have too many states, and on request, the paper's heuristic runs
// instead: the longest path first, as a chain, then the next longest through the layers left.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/schedule.hpp>
#include <dsl/scheduler/schedule_text.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsl::scheduler {

enum class SearchMethod { frontier, paper };

struct AutoOptions {
    std::int64_t batch = 1;
    double memory_limit = 0.0;  // bytes per process; 0: no limit
    SearchMethod method = SearchMethod::frontier;
    std::int64_t max_states = 1 << 22;  // frontier states beyond which the paper's heuristic runs
    // The most parts of a channel or filter split in a candidate (splits_of); 1: none. The commands give
    // channel_parts_on(platform).
    std::int64_t channel_parts = 1;
};

// The most parts of a channel or filter split the commands search on `platform`: the processes of a node,
// since the redistributions between channel blocks run every layer, over the node's fast links.
inline std::int64_t channel_parts_on(const Platform& platform) { return platform.procs_per_node; }

struct AutoResult {
    Schedule schedule;                             // complete
    double cost = 0.0;                             // the objective: layer costs and shuffles, seconds per step
    double memory = 0.0;                           // bytes per process, as the model predicts it
    SearchMethod method = SearchMethod::frontier;  // the search that ran (the paper's when the exact one fell back)
    std::int64_t candidates = 0;                   // distributions considered, over every layer

    bool optimal() const { return method == SearchMethod::frontier; }  // under the model
};

// Every split of `procs` processes into N and the spatial axes of a network of spatial rank `rank` (N x H x W
// for images, N x D x H x W for volumes) with N at most `batch`: sample splits first (so that among equal
// costs the cheaper partitioning wins), then the outer spatial dimensions before the inner. With
// `channel_parts` above 1, then N=procs/k with F=k, and with C=k, for each k from 2 to `channel_parts` that
// divides `procs` (not with spatial parts, nor both: each such product would multiply the candidates, and the
// search's time with their square, past a second at 2048 processes; autoschedule tries them in a second
// search, around the first one's choice).
std::vector<Split> splits_of(std::int64_t procs, std::int64_t batch, int rank, std::int64_t channel_parts = 1);

// The splits of the same processes as `s` that move a factor of its samples' parts, or of one spatial axis's,
// into C and F parts (each factoring of them into C and F), with C times F at most `channel_parts`.
std::vector<Split> channel_refinements(const Split& s, std::int64_t channel_parts);

// The candidate distributions of a layer under `partial`'s fixed fields: every split of `procs` into
// N x H x W (and channel or filter parts up to `channel_parts`, for a layer whose channels they cut) that the
// layer can run (split_problem), with overlap on and off where the layer has a halo and
// the schedule leaves it open, batch-norm statistics as fixed (an open one is `batch`, which gives one
// process's results). Sample splits come first, so that among equal costs the cheaper partitioning wins.
std::vector<Distribution> candidates(const frontend::Network& net, int layer, const Distribution& partial,
                                     std::int64_t procs, std::int64_t batch, std::int64_t channel_parts = 1);

// The objective of a complete schedule under `model` (what the search minimizes).
double schedule_cost(const frontend::Network& net, const Schedule& schedule, const CostModel& model);

// Fills `partial` (whose procs is set). nullopt with `why` when a layer has no candidate or no schedule fits
// the memory limit (then `why` gives the smallest memory per process that any schedule needs).
std::optional<AutoResult> autoschedule(const frontend::Network& net, const Schedule& partial, const CostModel& model,
                                       const AutoOptions& options, std::string& why);

}  // namespace dsl::scheduler
