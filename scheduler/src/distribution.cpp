// Block distributions of one dimension, and the text of a split.
#include <dsl/scheduler/distribution.hpp>

#include <fmt/format.h>

namespace dsl::scheduler {

std::string Split::str() const {
    std::string out = fmt::format("N={}", n);
    if (c != 1) out += fmt::format(" C={}", c);
    if (f != 1) out += fmt::format(" F={}", f);
    if (d != 1) out += fmt::format(" D={}", d);
    out += fmt::format(" H={} W={}", h, w);
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

std::int64_t block_size(std::int64_t extent, std::int64_t parts, std::int64_t index) {
    return extent / parts + (index < extent % parts ? 1 : 0);
}

std::int64_t max_block(std::int64_t extent, std::int64_t parts) { return block_size(extent, parts, 0); }

std::int64_t min_block(std::int64_t extent, std::int64_t parts) { return block_size(extent, parts, parts - 1); }

}  // namespace dsl::scheduler
