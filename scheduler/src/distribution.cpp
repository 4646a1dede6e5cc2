// Block distributions of one dimension, and the text of a split.
#include <dsl/scheduler/distribution.hpp>

#include <fmt/format.h>

namespace dsl::scheduler {

std::string Split::str() const {
    std::string out = fmt::format("N={}", n);
    if (c != 1) out += fmt::format(" C={}", c);
    if (f != 1) out += fmt::format(" F={}", f);
    for (int a = 0; a < max_space; ++a)
        if (a > 0 || space[0] != 1) out += fmt::format(" {}={}", axis_letters[a], space[static_cast<std::size_t>(a)]);
    return out;
}

const char* bn_name(BatchNormStats bn) {
    switch (bn) {
        case BatchNormStats::batch: return "batch";
        case BatchNormStats::spatial: return "spatial";
        case BatchNormStats::local: return "local";
    }
    return "?";
}

const char* precision_name(Precision p) {
    switch (p) {
        case Precision::float32: return "float32";
        case Precision::bfloat16: return "bfloat16";
        case Precision::float16: return "float16";
    }
    return "?";
}

std::int64_t max_block(std::int64_t extent, std::int64_t parts) { return block_size(extent, parts, 0); }

std::int64_t min_block(std::int64_t extent, std::int64_t parts) { return block_size(extent, parts, parts - 1); }

}  // namespace dsl::scheduler
