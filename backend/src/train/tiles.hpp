// The trainer's tiles and buffers: every tile of the plan in the kernels' memory, the buffers that the plan
// shares among gradients and recomputed values, and the scratch and staging buffers the steps share. It alone
// changes what a tile's memory holds beyond its values: which buffer a recomputed tile lies over, what its
// margins hold, and whether its gradient has been written yet this step.
#pragma once

#include "tile.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/scheduler/paths.hpp>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace dsl::backend {

class Tiles {
public:
    Tiles(const scheduler::Plan& plan, Kernels kernels);
    Tiles(const Tiles&) = delete;
    Tiles& operator=(const Tiles&) = delete;

    // Every layer's tiles as the plan places and sizes them (blocked where `paths` say so), their slots
    // pointed at them and at the tiles they read.
    void allocate(std::vector<Slot>& slots, const std::vector<scheduler::LayerPaths>& paths);

    // A layer's own tile.
    Tile& own(int layer) { return *tiles_[static_cast<std::size_t>(layer)].front(); }

    // A recomputed layer's tile over value buffer `buffer`, whose memory others used since: its margins are
    // zeroed as a new tile's are (it holds no halo).
    void bind(Tile& t, int buffer);
    // Before the first write of the gradients that the plan clears at `position` (-1: before forward, then
    // one a layer of backward).
    void clear_gradients(int position);

    // Zeros a tile's values, its margins too (a copy of partial sums, which it starts from).
    void zero_values(Tile& t);
    // Sets what the margins outside the tensor hold (a periodic tile's hold its halo, and keep it).
    void set_padding(Tile& t, float value);

    // Writes an input's gradient through `compute(target)`: straight into the tile's gradient when this layer
    // is its only reader or the first to write all of its interior, else into scratch that is then added to it.
    template <typename Compute>
    void input_gradient(Tile& in, const scheduler::Box& part, Compute&& compute) {
        const View target = view_of(in.dy, in, part);
        if (writes(in, part)) {
            compute(target);
            return;
        }
        const View computed = dense_view(scratch_.reserve(target.dims.elements()), target.dims, target.lanes);
        compute(computed);
        k_.eltwise->accumulate(computed, target);
    }
    template <typename Compute>
    void interior_gradient(Tile& in, Compute&& compute) {
        input_gradient(in, in.box, std::forward<Compute>(compute));
    }
    // Adds `dy` into an input's interior gradient (a copy where this layer is the first or only writer).
    void add_gradient(Tile& in, ConstView dy);
    // A gradient that no reader wrote this step, zeroed for those that add to it (halos, copies).
    void zero_unwritten(Tile& t);

    // Scratch in the kernels' memory for one use at a time: gradients on their way to being added, 16 bits
    // nobody keeps, a tile widened to be read; and staging, for what comes from or goes to the host.
    float* scratch(std::int64_t floats) { return scratch_.reserve(floats); }
    float* staging(std::int64_t floats) { return staging_.reserve(floats); }

    // The floats the tiles and the shared buffers hold (values kept from forward to backward, gradients,
    // 16-bit copies).
    std::int64_t floats() const;

private:
    // Whether a reader writes `part` of an input's gradient rather than adds to it: it is the only reader,
    // or the first to write an unwritten gradient's whole interior. An unwritten gradient that a smaller part
    // goes to first is zeroed for it.
    bool writes(Tile& in, const scheduler::Box& part);
    Margins blocked_margins(const Tile& t) const;  // layouts.cpp

    const scheduler::Plan& plan_;
    Kernels k_;
    Memory& mem_;
    std::vector<std::vector<std::unique_ptr<Tile>>> tiles_;  // per layer, as the plan lists them
    std::vector<Buffer> shared_;  // the memory under every tile's dy and recomputed values (Plan::buffers)
    Buffer scratch_, staging_;
};

}  // namespace dsl::backend
