// The execution plan: what one process of a run holds and moves, worked out once from the network, the
// filled schedule, the mini-batch and the rank, as plain data (no tensors, no communicator, no memory).
// Per layer: its tiles (its own output tile, and copies of it in its readers' splits), which tile it reads
// of each input, the halo exchanges and shuffles that fill the tiles' margins and copies (and send the
// gradients back), which gradient buffer each tile's gradient lies in, and the group of processes that sums
// its statistics. The trainer executes a plan; the tile rules here are the ones the performance model uses.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/recompute.hpp>
#include <dsl/scheduler/schedule.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dsl::scheduler {

// ---- Tile rules, cheap enough for the model to call for sampled ranks.

// A fully connected layer reads its samples whole: the tile it reads of its input has every spatial index.
bool reads_whole_samples(const frontend::Layer& reader);

// Which channels a layer's own output tile holds, and which of its inputs' it reads, under its split's F and
// C parts (tiles.hpp's Channels): convolutions, transposed convolutions and fully connected layers make their
// block of the filters from their block of the input channels; data and losses hold every channel (a loss
// reads every class of a sample); concat reads every channel of its inputs and uses its own part; every other
// layer reads and makes the same nested block, channel by channel.
Channels own_channels(const frontend::Layer& layer);
Channels operand_channels(const frontend::Layer& reader);
// Whether a layer's split cuts its channels: F or C parts, on a layer whose tensors are not data or a loss's.
bool splits_channels(const frontend::Layer& layer, const Split& split);

// How a layer reads one of its inputs: that tensor's tile in the reader's split, optionally whole samples,
// and which of its channels.
struct TileSpec {
    int layer = 0;  // the tensor: this layer's output
    Split split;
    bool whole = false;
    Channels channels = Channels::all;
};

// Whether the tile of `producer` (the layer `spec` names) is whole samples though the split cuts their
// spatial dimensions; whether it is the same on every process of a spatial group (a vector, or whole
// samples) or of an F x C group (every channel, Channels::all); and whether `rank` is the one of those
// replicas that speaks for them (loss, weight gradients, statistics).
bool whole_samples(const frontend::Layer& producer, const TileSpec& spec);
bool replicated(const frontend::Layer& producer, const TileSpec& spec);
bool leader(const frontend::Layer& producer, const TileSpec& spec, std::int64_t rank);
// Whether the tile holds partial sums: a layer's own output under C parts, each of the C processes' over its
// block of the input channels; what readers read is their sum (a copy).
bool partial(const TileSpec& spec);

// The block of `producer`'s output that `rank` holds in the tile `spec`, for a mini-batch of `batch`.
Box tile_box(const frontend::Layer& producer, const TileSpec& spec, std::int64_t batch, std::int64_t rank);

// ---- The plan.

// One direction of a tile's exchange, in this process's part: the pieces it sends and receives, and those it
// copies (forward; adds, from partial sums) or adds (backward) within itself. Forward moves a piece from its source()
// in the layer's own tile to its box in the tile being filled; backward moves the gradient the other way.
struct Exchange {
    std::vector<Piece> sends, receives, local;
    bool empty() const { return sends.empty() && receives.empty() && local.empty(); }
};

// One process's tile of a tensor in one split: the layer's own output tile, or a copy in a reader's split
// (redistributed; a copy of partial sums is their sum). Its margins hold what windowed readers need beyond the
// interior: halos from the neighbours' tiles, or padding outside the tensor.
struct TilePlan {
    TileSpec spec;
    int id = 0;               // in order of placement over every layer; message tags derive from it
    bool copy = false;        // a redistributed copy of the layer's own tile
    bool periodic = false;    // its windowed readers read across the tensor's border (padding = periodic)
    bool replicated = false;  // the same tile on every process of a spatial group
    bool leader = true;       // the one of those that speaks for them (loss, weight gradients)
    bool partial = false;     // partial sums, which copies add up (scheduler::partial)
    Box box;
    Margins need;
    std::vector<int> windowed_readers;
    std::vector<int> reader_layers;
    int readers = 0;
    // When its gradient is needed, in backward's order (slot L-1 is 0): from when the first reader writes it
    // (-1: a loss, in forward) to when its layer has used it. Tiles whose spans do not meet share memory.
    int grad_first = 0, grad_last = 0;
    int grad_buffer = -1;    // index into Plan::buffers; -1: no gradient (data)
    bool zero_grad = false;  // the gradient is accumulated, or some of it is never written
    Exchange forward, backward;
    // A recomputed layer's tile lies in memory shared with others (Plan::buffers): in forward, from
    // its layer's step to its last reader's; in backward, from when it is recomputed to its last use. -1:
    // the tile has memory of its own and is kept.
    int forward_buffer = -1, backward_buffer = -1;
};

// Who sums a layer's statistics (batch norm, global pooling): nobody else, every process, or the processes
// of the layer's split that hold the same block of samples. Where the split cuts the layer's channels, only
// the processes that hold the same block of channels sum them: `every` becomes `channels` (every sample), and
// a sample group holds one block of channels. A group is made once per `key`; this process joins it with
// `colour`.
struct GroupPlan {
    enum class Kind { none, every, samples, channels };
    Kind kind = Kind::none;
    std::string key;  // the split, for a sample group
    int colour = 0;
};

struct LayerPlan {
    Distribution dist;            // filled: split, overlap and bn all set
    Dims whole;                   // the output tensor
    std::vector<TilePlan> tiles;  // the own tile first, then copies (none for a label)
    std::vector<int> operands;    // per input: the index of the tile it reads in the input's layer; -1 for
                                  // labels, which a loss makes over its logits' tile
    GroupPlan group;
    // A windowed layer: what its window reads of its input for its own tile (window_input), within the input
    // tile's margins.
    Box read;
    // Whether it overlaps its input's halo exchange with compute (its distribution asks, and it is the first
    // to read an input tile of its own split whose halo comes from other processes), and how: the outputs it
    // computes while the halo travels, then the strips that read it (overlap_parts).
    bool overlapped = false;
    OverlapParts overlap;
    // In backward, whether it sends its input gradient's halo back to the neighbours while it computes its
    // weight gradient (a layer with weights whose distribution asks for overlap, the only reader of an input
    // tile of its own, which is not data and has a halo): the gradient is whole once its backward data is
    // done.
    bool scatters_early = false;
    // The recomputed layers whose forward runs again before this layer's backward, in that order: those
    // whose values it reads, after those their own forward reads (plan_recompute.cpp).
    std::vector<int> recompute_before;
    // Its values are dropped after forward and made again where backward reads them (recompute=on); or, asked
    // to be, kept as the start of a segment that backward makes again from them (recompute.hpp's
    // segment_starts).
    bool recomputed = false, segment_start = false;
    // Its output is kept in 16 bits between forward and backward (dist.precision), in recompute_before's
    // buffers while float32 (plan_recompute.cpp); its own tile is the one stored.
    bool narrowed = false;
    // Narrowed, and its 16-bit copy kept for backward; a narrowed layer that no backward reads (a batch norm
    // that only a ReLU reads) is rounded and keeps no copy.
    bool stored = false;
    // Its values are still in memory when forward ends (what eval and predict read): false for a recomputed
    // layer whose memory later layers' forward took.
    bool after_forward = true;
};

struct Plan {
    int rank = 0, procs = 1;
    std::int64_t batch = 1;
    std::vector<LayerPlan> layers;           // indexed like Network::layers
    // Elements of each buffer that gradients share, and with them recomputed and narrowed layers' values
    // (plan_recompute.cpp): tiles whose spans on a step's timeline (recompute.hpp) do not meet.
    std::vector<std::int64_t> buffers;
};

// The plan of process `rank` of `procs` running `net` under `schedule` (filled: every field of every layer
// set; its layers may be empty, for one process) with mini-batches of `batch`. A layer that splits the
// samples more ways than the mini-batch has is a UserError.
Plan make_plan(const frontend::Network& net, const Schedule& schedule, std::int64_t batch, int rank, int procs);

// Plans recomputation and 16-bit storage (make_plan calls it last): the layers each layer's backward
// recomputes or widens first, and the buffers their tiles share while they are alive (recompute.hpp's
// timeline), with the gradients: values in forward and gradients in backward take the same memory.
void plan_recompute(const frontend::Network& net, Plan& plan);

// A readable text form of a plan, one block per layer (what `dsl check --dump-after plan` prints).
std::string plan_text(const frontend::Network& net, const Plan& plan);

}  // namespace dsl::scheduler
