// The limits of a process's tile: what the kernels can address, and what a process's memory holds. A layer past them is an error located at the
// layer, found by `dsl check` and before a run sets anything up, never an out-of-memory or an internal error
// in the middle of a run.
#pragma once

#include <dsl/base/diagnostics.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <cstdint>
#include <limits>

namespace dsl::scheduler {

// The most elements a process's tile of a layer's output, or its block of the layer's weights, may hold: the
// CPU kernels index a tile with 32-bit numbers (Halide's buffers: extents and strides), and MPI counts a
// message in them.
inline constexpr std::int64_t max_tile_elements = std::numeric_limits<std::int32_t>::max();

// Whether every layer's tile under `schedule` at the mini-batch `batch` can be addressed and, where `memory`
// (the bytes a process has) is known, held: an error at each layer whose tile (or block of weights) cannot,
// saying how to split it. A layer is judged alone, by the least it needs while it computes (its output tile in
// float32, its block of weights and their gradient), so that no schedule that could run is refused; what the
// whole network needs is the model's to say. Layers whose split the schedule leaves open are not checked (the
// auto-scheduler's choice is, in its run).
bool check_tile_limits(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, Diagnostics& diags,
                       double memory = 0.0);

}  // namespace dsl::scheduler
