// The trainer's halo exchanges and redistributions: each tile's messages, posted from one tile's memory and
// finished into another's, forward (gather: halos and copies filled) and backward (scatter: what readers left
// in margins and copies added where the elements live), and which step's exchange each tile has had. It
// alone changes those; what it fills and adds to are the tiles' values and gradients.
#pragma once

#include "tile.hpp"
#include "tiles.hpp"
#include "timeline.hpp"

#include <dsl/backend/kernels.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace dsl::backend {

class Exchanges {
public:
    Exchanges(const scheduler::Plan& plan, Kernels kernels, Comm& comm, Tiles& tiles, Timeline& timeline);
    Exchanges(const Exchanges&) = delete;
    Exchanges& operator=(const Exchanges&) = delete;

    // A message buffer for every piece of every tile's exchanges (the slots' tiles).
    void allocate(const std::vector<Slot>& slots);

    // A new step: no tile has had this step's exchange, and nothing is sent yet.
    void begin_step();

    // Fills a tile's halos (or the whole of a copy) from the processes that hold them: `start_gather` posts
    // the exchange, `finish_gather` waits for it and places what came; `gather` both, once a step.
    void start_gather(Tile& t);
    void finish_gather(Tile& t);
    void gather(Tile& t);
    // Adds the gradient that readers left in a tile's margins (or in a copy) into the tiles that hold those
    // elements, in two halves like the gather; `scatter` both, once a step.
    void start_scatter(Tile& t);
    void finish_scatter(Tile& t);
    void scatter(Tile& t);

    // An input's tile, which the data source fills (never sent): whether it is still to be filled this step;
    // it counts as filled from then on.
    bool fill_from_data(const Tile& t);
    // Whether a tile holds this step's halos (or copy).
    bool holds(const Tile& t) const { return gathered_[id(t)] == step_; }
    // A tile whose memory others used since (a recomputed one bound again): it holds no halo.
    void forget(const Tile& t) { gathered_[id(t)] = -1; }

    // The bytes sent this step, and the floats the message buffers hold.
    std::int64_t sent_bytes() const { return sent_bytes_; }
    std::int64_t floats() const;

private:
    // The message buffers of one direction of a tile's exchange, one per piece of the plan, in its order.
    struct Messages {
        std::vector<Buffer> sends, receives;
    };
    static std::size_t id(const Tile& t) { return static_cast<std::size_t>(t.id); }
    std::optional<scheduler::Precision> narrowed_of(int layer) const;
    int reader_of(const Tile& t) const;
    void start(const scheduler::Exchange& p, Messages& m, int tag, Tensor& from, const Tile& from_tile, bool at_source,
               ProfileEvent::Kind kind, int layer, std::optional<scheduler::Precision> narrow = std::nullopt);

    const scheduler::Plan& plan_;
    Kernels k_;
    Memory& mem_;
    Comm& comm_;
    Tiles& tiles_;
    Timeline& timeline_;
    std::vector<Messages> forward_, backward_;        // per tile (Tile::id)
    std::vector<std::int64_t> gathered_, scattered_;  // per tile: the step whose halos it holds, or sent back
    std::int64_t step_ = 0;
    std::int64_t sent_bytes_ = 0;
};

}  // namespace dsl::backend
