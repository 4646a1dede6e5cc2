// A process's tile against what the kernels can address (tile_limits.hpp).
#include <dsl/scheduler/tile_limits.hpp>

#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace dsl::scheduler {

namespace {

// The elements of a box, saturated at the int64 limit rather than overflowing.
std::int64_t elements(const Box& b) {
    std::int64_t n = 1;
    auto times = [&](std::int64_t v) {
        if (n != 0 && v > std::numeric_limits<std::int64_t>::max() / n)
            n = std::numeric_limits<std::int64_t>::max();
        else
            n *= v;
    };
    times(b.n.size());
    times(b.c.size());
    for (const Range& r : b.space) times(r.size());
    return n;
}

}  // namespace

bool check_tile_limits(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, Diagnostics& diags) {
    bool ok = true;
    for (std::size_t i = 0; i < net.layers.size() && i < schedule.layers.size(); ++i) {
        const frontend::Layer& l = net.layers[i];
        const auto& split = schedule.layers[i].split;
        if (!split) continue;
        const std::string where = split->procs() == 1 ? "on one process" : "under split " + split->str();
        const Box tile = tile_box(extent_of(l, batch), *split, 0, l.spatial(), own_channels(l));
        const std::int64_t held = elements(tile);
        if (held > max_tile_elements) {
            diags.error(l.loc, fmt::format("layer '{}': a process's tile of its output {} holds {} elements, more than "
                                           "the {} (2^31-1) that dsl's kernels can address; split it further (H=, W=, "
                                           "D=, F= in a schedule) or make it smaller",
                                           l.name, where, held, max_tile_elements));
            ok = false;
            continue;
        }
        // Weights are split only by F and C parts.
        const std::int64_t weights = l.params / std::max<std::int64_t>(1, split->c * split->f);
        if (weights > max_tile_elements) {
            diags.error(l.loc, fmt::format("layer '{}': a process's block of its weights {} holds {} elements, more "
                                           "than the {} (2^31-1) that dsl's kernels can address; split its filters "
                                           "or channels (F=, C= in a schedule) or make it smaller",
                                           l.name, where, weights, max_tile_elements));
            ok = false;
        }
    }
    return ok;
}

}  // namespace dsl::scheduler
