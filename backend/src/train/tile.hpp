// What the trainer holds per layer (a slot) and per tile of the plan: a tile's values and gradient in the
// kernels' memory, and a layer's tiles, the tiles it reads, its process groups and its parameters. The parts
// of the trainer (trainer_impl.hpp) each own the rest of what they change: the tiles' memory and what their
// margins hold (tiles.hpp), their messages (exchanges.hpp), the statistics (statistics.hpp), the optimizer's
// state (optimizer.hpp), the profile (timeline.hpp).
#pragma once

#include <dsl/backend/comm.hpp>
#include <dsl/backend/tensor.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/plan.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace dsl::backend {

class Tiles;

// A tile of the plan with its memory: its values and gradient, with the margins the plan gives it (a blocked
// tile's: layouts.cpp).
struct Tile : scheduler::TilePlan {
    Tensor y, dy;
    std::int64_t lanes = 1;  // y's and dy's: planar, or blocked (layouts.cpp) and without margins
    // A narrowed layer's own tile (precision=bfloat16, float16): its interior in 16 bits, from forward to the
    // backward that widens it again.
    std::optional<Buffer> stored;
    std::uint16_t* stored_bits() { return reinterpret_cast<std::uint16_t*>(stored->data()); }

    // What the margins outside the tensor hold now.
    float padding() const { return padding_; }

private:
    friend class Tiles;  // the only one that changes what a tile's memory holds beyond its values
    float padding_ = 0.0f;
    // An accumulated gradient that no reader has written yet this step: its margins are zero, its interior
    // is not (the first reader to write all of it writes rather than adds: Tiles::writes).
    bool unwritten_ = false;
};

// The part of a tile's padded tensor (y or dy) over `b`, in global coordinates.
View view_of(Tensor& tensor, const Tile& t, const scheduler::Box& b);

struct Slot {
    const frontend::Layer* layer = nullptr;
    int index = 0;                     // the layer's, in the network's order
    std::vector<Tile*> tiles;          // the own tile first, then copies (Tiles holds them)
    std::vector<Tile*> operands;       // per input: the tile this layer reads
    std::vector<std::int32_t> labels;  // a loss's labels, over its logits tile
    Comm* group = nullptr;             // batch and group norm, global pooling: who sums statistics

    // Parameters, in the kernels' memory: weights (or batch-norm scale) and bias (or shift, {1, C, 1, 1}),
    // and their gradients (their optimizer's moments: optimizer.hpp). A layer without a bias has empty b, db.
    Tensor w, dw, b, db;
    // Under F or C parts (a split that cuts the layer's channels) a process holds its block of the parameters
    // and of their optimizer state alone: a layer with filters its filters' block by its input channels', a
    // normalization its channels'. The processes that hold the same block (`holders`: the same F and C parts)
    // sum its gradient. Only the first of the C processes adds the bias (the others' partial sums have none),
    // and only it makes a bias gradient.
    // Its blocks (a normalization's channels are `filters`; the whole ranges where the split cuts no channels,
    // so that `filters.lo` is where its channels start in the whole statistics).
    Range filters, inputs;
    bool adds_bias = true;
    Comm* holders = nullptr;  // who sums the gradients: every process where null
    // A convolution that computes its weight gradient by blocks of filters (filter_blocks.cpp): its input and
    // output gradient whole, in memory the processes share; null where it does not.
    struct Gathered {
        std::shared_ptr<float> memory;
        Tensor x, dy;
    };
    std::unique_ptr<Gathered> gathered;
    // A convolution whose kernels asked for its weights in 16 x 16 blocks (ConvKernels::blocks_weights):
    // w, dw and their moments lie so (weight_blocks.hpp), plain only at the state's edges (state.cpp).
    bool blocked_weights = false;
    Dims whole;  // the whole weights' (or scale's) dims
    // A convolution, batch norm or add whose one reader is a ReLU (or leaky ReLU of slope 0 or more) next in
    // order, over the same box: training's forward writes the ReLU's output in the same pass rather than its
    // own, which nothing else reads (fusion.cpp). The ReLU's index; -1 where not fused.
    int fused_relu = -1;

    Tile& own() { return *tiles.front(); }
    const Tile& own() const { return *tiles.front(); }
};

}  // namespace dsl::backend
