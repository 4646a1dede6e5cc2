// The memory of a kernel set (kernels.hpp), apart from the kernels so that tensors (tensor.hpp) live in it
// without them.
#pragma once

#include <dsl/backend/view.hpp>
#include <dsl/scheduler/distribution.hpp>

#include <cstdint>

namespace dsl::backend {

// Where a kernel set's tensors live, and what is done to them beyond the layers' kernels: allocation,
// filling, copies between host and kernel memory, and the packing of the parts of tiles that travel in
// messages.
class Memory {
public:
    virtual ~Memory() = default;
    virtual bool host() const = 0;                    // the CPU reads and writes it directly
    virtual float* allocate(std::int64_t count) = 0;  // zeroed
    virtual void release(float* data) = 0;
    virtual void fill(View v, float value) = 0;
    // Between host memory and this memory; `download` waits for the kernels that write `data`.
    virtual void upload(const float* host, float* data, std::int64_t count) = 0;
    virtual void download(const float* data, float* host, std::int64_t count) = 0;
    virtual void pack(ConstView v, float* out) = 0;              // v's elements, densely, into `out`
    virtual void unpack(const float* in, View v, bool add) = 0;  // the reverse; adds into v when `add`
    virtual void synchronize() = 0;                              // waits for every kernel started
    // 16-bit storage (precision=bfloat16 or float16; narrow.hpp rounds): `narrow` rounds v's elements to `p`
    // in place and writes their 16 bits densely, in v's order, to `out` (in this memory); `widen` is its
    // inverse into v.
    virtual void narrow(View v, scheduler::Precision p, std::uint16_t* out) = 0;
    virtual void widen(const std::uint16_t* in, scheduler::Precision p, View v) = 0;
};

Memory& host_memory();

// Sets every element of `p` outside `keep` (a range of each spatial dimension, clamped to p) to `v`, through
// `memory`: the slabs around it, one fill each.
void fill_outside(Memory& memory, View p, Space<Range> keep, float v);

}  // namespace dsl::backend
