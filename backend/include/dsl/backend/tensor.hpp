// Tiles of tensors: owned buffers (samples, channels, then the spatial dimensions, the innermost contiguous)
// with halo margins around the interior (view.hpp: the views into them), in the host's memory or a kernel
// set's (memory.hpp).
#pragma once

#include <dsl/backend/memory.hpp>
#include <dsl/backend/view.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace dsl::backend {

// A tile: the interior (`dims`) with `margins` around it along each spatial dimension, stored densely (margins
// included) so that a view of any part of it is a plain strided view. It owns its elements, or lies over
// memory that it does not own (a buffer shared by tiles that are never needed at the same time). Its elements
// are in the host's memory, or in a kernel set's (a GPU's), where only views of it are used: `at` and `fill`
// read and write the host's, and a tensor in a GPU's memory is moved, never copied.
//
// Its channels are planar (lanes 1), or in blocks of `lanes` (view.hpp), which its views have too.
class Tensor {
public:
    Tensor() = default;
    explicit Tensor(Dims dims, Margins margins = {});
    Tensor(Dims dims, Margins margins, Memory& memory, std::int64_t lanes = 1);  // zeroed, in `memory`
    // Over `memory`, which holds at least the padded dims' elements and outlives the tensor and its copies
    // (which lie over it too).
    static Tensor over(float* memory, Dims dims, Margins margins = {}, std::int64_t lanes = 1);

    Tensor(const Tensor& o);
    Tensor& operator=(const Tensor& o);
    Tensor(Tensor&& o) noexcept = default;  // a moved vector keeps its elements where they are
    Tensor& operator=(Tensor&& o) noexcept = default;

    const Dims& dims() const { return dims_; }
    const Margins& margins() const { return margins_; }  // of the dims' rank
    Dims padded_dims() const;                            // interior and margins
    std::int64_t lanes() const { return lanes_; }

    View interior();
    ConstView interior() const;
    View padded();  // interior and margins
    ConstView padded() const;

    // Element at interior coordinates; i may reach into the margins: -before <= i[d] < extent + after.
    float& at(std::int64_t n, std::int64_t c, const Index& i);
    float at(std::int64_t n, std::int64_t c, const Index& i) const;

    float* data() { return data_; }
    const float* data() const { return data_; }
    std::int64_t size() const { return size_; }

    void fill(float v);
    // The margins (zero for padding, -infinity before max pooling), through the memory the tensor is in.
    void fill_margins(float v, Memory& memory = host_memory());

private:
    void set_shape(const Dims& dims, const Margins& margins, std::int64_t lanes = 1);
    struct Release {
        Memory* memory;
        void operator()(float* data) const;
    };
    Dims dims_;
    Margins margins_;
    std::int64_t lanes_ = 1;
    std::vector<float> storage_;  // empty when over memory it does not own, or in a kernel set's memory
    std::unique_ptr<float, Release> elsewhere_{nullptr, Release{nullptr}};  // owned, in a kernel set's memory
    float* data_ = nullptr;
    std::int64_t size_ = 0;
};

// A buffer of floats in a kernel set's memory (or the host's), grown on demand: message buffers and
// scratch that the trainer keeps between steps.
class Buffer {
public:
    explicit Buffer(Memory& memory) : memory_(&memory) {}
    Buffer(Buffer&& o) noexcept;
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer();

    float* data() { return data_; }
    std::int64_t size() const { return size_; }  // the elements last asked for
    // Room for `count` elements; what it held is lost when it grows.
    float* reserve(std::int64_t count);
    void resize(std::int64_t count);  // exactly `count`, zeroed

private:
    Memory* memory_;
    float* data_ = nullptr;
    std::int64_t size_ = 0, capacity_ = 0;
};

}  // namespace dsl::backend
