// A schedule bound to a network: every layer's distribution, resolved from the `.sched` entries by the
// precedence rule, and checked against the network and the processor count.
#pragma once

#include <dsl/base/diagnostics.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/frontend/sched_ast.hpp>
#include <dsl/scheduler/distribution.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dsl::scheduler {

struct Schedule {
    std::optional<std::int64_t> procs;    // open when the file leaves it open
    std::optional<std::string> platform;  // the platform file, found from a stdlib name or a path
    Location platform_loc;                // where the schedule names it
    std::optional<std::int64_t> batch;    // the mini-batch size N, when the schedule fixes it
    std::vector<Distribution> layers;     // indexed like Network::layers; an input's is its first reader's
    std::vector<int> source_entry;        // per layer: the entry that gave its split, -1 for none

    bool complete() const;
};

// Precedence, most specific first, each field (split, overlap, bn) resolved on its own:
//   1. `layer NAME` naming the layer exactly;
//   2. `layer PATTERN` with '*': among those that match, the one with the most non-'*' characters;
//   3. `block B`: B is the type of a block instance that encloses the layer; the innermost one wins;
//   4. `default`.
// Among entries of equal rank the later one in the file wins. An entry that sets any of N, C, F, D, H, W
// sets the whole split, the dimensions it does not name being 1.
// Returns nullopt when there were errors; all independent errors are reported.
std::optional<Schedule> apply_schedule(const frontend::Network& net, const frontend::SchedFile& file,
                                       Diagnostics& diags);

// Why `split` cannot run `layer`, or empty. Tiles must hold at least the halo, so that a halo comes only
// from the nearest neighbour (a transposed convolution's tiles, the halo of each of the tiles beside them:
// deconv_halos), and at least one row or column; N may not exceed the mini-batch.
std::string split_problem(const frontend::Network& net, const frontend::Layer& layer, const Split& split,
                          std::optional<std::int64_t> batch);

// Where a mini-batch size comes from, for the messages about it: the schedule's `batch` setting (a place in
// the file), or the command line (`note` without a place); an empty note adds none.
struct BatchOrigin {
    Location loc;
    std::string note;
};

// Reports, one error per entry and at the entry, each layer whose split (from `file`, as `schedule` binds it)
// does not fit the layer (split_problem) under a mini-batch of `batch`; where the mini-batch is the reason,
// with a note at `origin`. apply_schedule runs it with the schedule's batch; a command that runs another
// (--batch) runs it again with that one. False when any did not fit.
bool check_splits(const frontend::Network& net, const frontend::SchedFile& file, const Schedule& schedule,
                  std::optional<std::int64_t> batch, const BatchOrigin& origin, Diagnostics& diags);

// Why a mini-batch of `batch` samples is too large for `net` (its activations' bytes or its FLOPs would
// overflow 64-bit integers), or empty; check_batch_size reports it at `origin`.
std::string batch_size_problem(const frontend::Network& net, std::int64_t batch);
bool check_batch_size(const frontend::Network& net, std::int64_t batch, const BatchOrigin& origin, Diagnostics& diags);

// Inputs and labels are made (or read) in the distribution of their first reader, so none is shuffled before
// the first layer: gives each its reader's distribution (and source entry).
void place_data(const frontend::Network& net, Schedule& schedule);

// Whether overlap means anything for `layer` under `split`: a window with a halo, over an input that a
// spatial split cuts and that is not data (data is made with its halo).
bool overlap_matters(const frontend::Network& net, const frontend::Layer& layer, const Split& split);

// The largest per-process tile of `layer`'s output under `split` for a mini-batch of `batch`.
frontend::Shape tile_shape(const frontend::Layer& layer, const Split& split, std::int64_t batch,
                           std::int64_t* tile_batch);

}  // namespace dsl::scheduler
