// A process's tile against what the kernels can address and its memory holds (tile_limits.hpp).
#include <dsl/scheduler/tile_limits.hpp>

#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <string>

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

// "15.8 GiB", "2.7 MiB".
std::string bytes_text(double bytes) {
    return bytes >= 0.1 * (1 << 30) ? fmt::format("{:.1f} GiB", bytes / (1 << 30))
                                    : fmt::format("{:.1f} MiB", bytes / (1 << 20));
}

}  // namespace

bool check_tile_limits(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, Diagnostics& diags,
                       double memory) {
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
            continue;
        }
        // The least the layer needs while it computes: its output tile in float32, its weights and their gradient.
        const double output_bytes = 4.0 * static_cast<double>(held), weight_bytes = 8.0 * static_cast<double>(weights);
        if (memory > 0.0 && output_bytes + weight_bytes > memory) {
            diags.error(l.loc, fmt::format("layer '{}': a process {} needs at least {} for it ({} for its tile of the "
                                           "output in float32, {} for its block of weights and their gradient), "
                                           "more than the {} a process has; split it further ({}) or make it smaller",
                                           l.name, where, bytes_text(output_bytes + weight_bytes),
                                           bytes_text(output_bytes), bytes_text(weight_bytes), bytes_text(memory),
                                           output_bytes >= weight_bytes ? "H=, W=, D=, F= or N= in a schedule"
                                                                        : "F=, C= in a schedule"));
            ok = false;
        }
    }
    return ok;
}

}  // namespace dsl::scheduler
