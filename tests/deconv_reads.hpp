// What a transposed convolution's tiles read along one dimension, from its definition (input i adds into the
// outputs i*stride - pad + k for its taps k), by trying every input and tap: the oracle for the scheduler's
// read boxes, halos and legality check.
#pragma once

#include <dsl/scheduler/tiles.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace dsl::test {

struct Deconv1d {
    std::int64_t kernel = 1, stride = 1, pad = 0, output_pad = 0;
    std::int64_t outputs(std::int64_t inputs) const { return (inputs - 1) * stride - 2 * pad + kernel + output_pad; }
};

// The inputs [first, end) of `inputs` that outputs [a, b) read; none where they read none.
struct Read {
    std::int64_t first = 0, end = 0;
};
inline std::optional<Read> deconv_reads(const Deconv1d& l, std::int64_t inputs, std::int64_t a, std::int64_t b) {
    std::optional<Read> r;
    for (std::int64_t i = 0; i < inputs; ++i)
        for (std::int64_t k = 0; k < l.kernel; ++k) {
            const std::int64_t o = i * l.stride - l.pad + k;
            if (o < a || o >= b) continue;
            r = r ? Read{std::min(r->first, i), std::max(r->end, i + 1)} : Read{i, i + 1};
        }
    return r;
}

// Under a split in `parts` of the inputs and of the outputs alike, how far the inputs that block b of the
// outputs reads reach before and after block b of the inputs.
struct Beyond {
    std::int64_t before = 0, after = 0;
};
inline std::vector<Beyond> deconv_beyond(const Deconv1d& l, std::int64_t inputs, std::int64_t parts) {
    using scheduler::block_size;
    using scheduler::block_start;
    const std::int64_t outputs = l.outputs(inputs);
    std::vector<Beyond> out;
    for (std::int64_t b = 0; b < parts; ++b) {
        const std::int64_t a = block_start(outputs, parts, b), lo = block_start(inputs, parts, b);
        const std::int64_t hi = lo + block_size(inputs, parts, b);
        const std::optional<Read> r = deconv_reads(l, inputs, a, a + block_size(outputs, parts, b));
        out.push_back(r ? Beyond{std::max<std::int64_t>(0, lo - r->first), std::max<std::int64_t>(0, r->end - hi)}
                        : Beyond{});
    }
    return out;
}

// Whether every block of the inputs holds what its neighbours' outputs read of it: each halo no longer than
// the block it comes from.
inline bool deconv_halos_fit(const Deconv1d& l, std::int64_t inputs, std::int64_t parts) {
    const std::vector<Beyond> beyond = deconv_beyond(l, inputs, parts);
    for (std::int64_t b = 0; b < parts; ++b) {
        const Beyond& h = beyond[static_cast<std::size_t>(b)];
        if (h.before > 0 && (b == 0 || scheduler::block_size(inputs, parts, b - 1) < h.before)) return false;
        if (h.after > 0 && (b + 1 == parts || scheduler::block_size(inputs, parts, b + 1) < h.after)) return false;
    }
    return true;
}

}  // namespace dsl::test
