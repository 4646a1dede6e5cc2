// Memory shared among tensors that are not alive at the same time: each span of use takes the free buffer
// closest to its size (growing the largest free one when none is large enough). Gradients share their
// buffers this way (plan.cpp), and so do the values of recomputed layers (plan_recompute.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace dsl::scheduler {

// A tensor's use of memory: `size` elements from step `first` to step `last`, both included.
struct BufferUse {
    std::int64_t size = 0;
    int first = 0, last = 0;
};

// The buffer of each use (in `buffers`, whose sizes it grows as they are needed). Uses whose spans meet get
// different buffers; `buffers` may already hold some, each busy until the step it says.
struct SharedBuffers {
    struct Buffer {
        std::int64_t size = 0;
        int busy_until = -2;
    };
    std::vector<Buffer> buffers;

    // Uses must come in order of their first step.
    int place(const BufferUse& use) {
        Buffer* best = nullptr;
        for (Buffer& b : buffers) {
            if (b.busy_until >= use.first) continue;
            const bool fits = b.size >= use.size, best_fits = best && best->size >= use.size;
            if (!best || (fits && (!best_fits || b.size < best->size)) || (!fits && !best_fits && b.size > best->size))
                best = &b;
        }
        if (!best) best = &buffers.emplace_back();
        if (best->size < use.size) best->size = use.size;
        best->busy_until = use.last;
        return static_cast<int>(best - buffers.data());
    }

    std::vector<std::int64_t> sizes() const {
        std::vector<std::int64_t> out;
        for (const Buffer& b : buffers) out.push_back(b.size);
        return out;
    }
};

}  // namespace dsl::scheduler
