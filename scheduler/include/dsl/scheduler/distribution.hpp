// Distributions: how a layer's tensors are split over the processors (the paper's D = (D_N, D_C, D_H, D_W),
// and D_D for volumes), with each field either fixed or left open for the auto-scheduler.
#pragma once

#include <dsl/base/space.hpp>
#include <dsl/frontend/layer_kinds.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace dsl::scheduler {

// The most processes a run can have: MPI numbers them with an int.
constexpr std::int64_t max_procs = 2147483647;

// Splits of each dimension into blocks. `space` holds the parts of each spatial axis (D, H, W: a schedule's
// D=, H= and W=): a tensor of spatial rank r is cut along its dimension d by space[axis_of(d, r)], so that an
// image's rows and columns are H and W and a volume's depth, rows and columns D, H and W. `c` and `f` split a
// layer's input channels and its filters (output channels): which channels each tile holds is tiles.hpp's
// Channels.
struct Split {
    std::int64_t n = 1, c = 1, f = 1;
    std::array<std::int64_t, max_space> space{1, 1, 1};

    // The parts of dimension d of a tensor of spatial rank `rank`.
    std::int64_t parts(int d, int rank) const { return space[static_cast<std::size_t>(axis_of(d, rank))]; }
    std::int64_t spatial_procs() const { return space[0] * space[1] * space[2]; }  // a sample group's
    std::int64_t procs() const { return n * c * f * spatial_procs(); }
    bool spatial() const { return spatial_procs() > 1; }
    bool channel_parts() const { return c * f > 1; }  // it has C or F parts
    std::string str() const;  // "N=2 H=2 W=1" (C, F, D only when not 1)
    bool operator==(const Split& o) const { return n == o.n && c == o.c && f == o.f && space == o.space; }
};

// Where batch-norm statistics are summed: over the whole mini-batch, every process (exactly as one process
// computes them); over the processes of each sample group's spatial partition (each group normalizes its
// own samples, as data-parallel training does); or over each tile alone.
enum class BatchNormStats { batch, spatial, local };

// How a layer's output is kept between its forward and the backwards that read it: as computed (float32), or
// rounded to 16 bits after forward and stored in them (bfloat16: float32's range, 8 bits of mantissa;
// float16: IEEE half, 11 bits, up to 65504). Computation, gradients and weights stay float32.
enum class Precision { float32, bfloat16, float16 };

// One layer's resolved distribution. A field is nullopt when the schedule leaves it open.
struct Distribution {
    std::optional<Split> split;
    std::optional<bool> overlap;  // overlap halo exchange with interior compute
    std::optional<BatchNormStats> bn = BatchNormStats::batch;
    // Recompute the layer's output in backward instead of keeping it from forward (plan_recompute.cpp). Open
    // (unset, or '?') is off for a run, and the auto-scheduler's to turn on where memory is short: it never
    // changes results.
    std::optional<bool> recompute;
    // Unset is float32; open ('?') lets the auto-scheduler choose where memory is short, since it changes
    // results (a run takes an open one as float32).
    std::optional<Precision> precision = Precision::float32;
    // Its output is kept in 16 bits: a precision other than float32, unless it is recomputed (which wins) or
    // its split has C parts (a convolution's partial sums would be rounded before they are added, which one
    // process never does; the other layers of such a split keep float32 alike).
    bool narrowed() const {
        return !recompute.value_or(false) && precision.value_or(Precision::float32) != Precision::float32 &&
               !(split && split->c > 1);
    }
    // The 16-bit precision a layer of kind `op` multiplies in, where the kernels can: a convolution's of
    // precision bfloat16 or float16; none for the others.
    std::optional<Precision> products16(frontend::OpKind op) const {
        if (op != frontend::OpKind::conv || precision.value_or(Precision::float32) == Precision::float32) return {};
        return precision;
    }
    bool complete() const { return split && overlap && bn; }
};

const char* bn_name(BatchNormStats bn);
const char* precision_name(Precision p);
// Bytes of an element stored in `p`.
inline int precision_bytes(Precision p) { return p == Precision::float32 ? 4 : 2; }

// The blocks of `extent` indices over `parts` processes: the first `extent % parts` blocks get one more.
inline std::int64_t block_size(std::int64_t extent, std::int64_t parts, std::int64_t index) {
    return extent / parts + (index < extent % parts ? 1 : 0);
}
std::int64_t max_block(std::int64_t extent, std::int64_t parts);
std::int64_t min_block(std::int64_t extent, std::int64_t parts);

}  // namespace dsl::scheduler
