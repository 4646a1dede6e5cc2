// Distributions: how a layer's tensors are split over the processors (the paper's D = (D_N, D_C, D_H, D_W)),
// with each field either fixed or left open for the auto-scheduler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dsl::scheduler {

// The most processes a run can have: MPI numbers them with an int.
constexpr std::int64_t max_procs = 2147483647;

// Splits of each dimension into blocks. Channel (C), filter (F) and depth (D) splits are reserved in the
// language and rejected by the checker until the backend supports them.
struct Split {
    std::int64_t n = 1, c = 1, f = 1, d = 1, h = 1, w = 1;
    std::int64_t procs() const { return n * c * f * d * h * w; }
    bool spatial() const { return h > 1 || w > 1 || d > 1; }
    std::string str() const;  // "N=2 H=2 W=1" (C, F, D only when not 1)
    bool operator==(const Split& o) const {
        return n == o.n && c == o.c && f == o.f && d == o.d && h == o.h && w == o.w;
    }
};

// Where batch-norm statistics are summed: over the whole mini-batch, every process (exactly as one process
// computes them); over the processes of each sample group's spatial partition (each group normalizes its
// own samples, as data-parallel training does); or over each tile alone.
enum class BatchNormStats { batch, spatial, local };

// One layer's resolved distribution. A field is nullopt when the schedule leaves it open.
struct Distribution {
    std::optional<Split> split;
    std::optional<bool> overlap;  // overlap halo exchange with interior compute
    std::optional<BatchNormStats> bn = BatchNormStats::batch;
    bool complete() const { return split && overlap && bn; }
};

const char* bn_name(BatchNormStats bn);

// The blocks of `extent` indices over `parts` processes: the first `extent % parts` blocks get one more.
std::int64_t block_size(std::int64_t extent, std::int64_t parts, std::int64_t index);
std::int64_t max_block(std::int64_t extent, std::int64_t parts);
std::int64_t min_block(std::int64_t extent, std::int64_t parts);

}  // namespace dsl::scheduler
