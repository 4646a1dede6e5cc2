// Tiles of tensors: owned NCHW buffers with halo margins around the interior, and strided views into them
// that kernels read and write.
#pragma once

#include <dsl/scheduler/tiles.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace dsl::backend {

class Memory;  // kernels.hpp
Memory& host_memory();

// Sizes of a 4-D block, NCHW. A matrix [N, K] is {n, k, 1, 1}.
struct Dims {
    std::int64_t n = 0, c = 0, h = 0, w = 0;
    std::int64_t elements() const { return n * c * h * w; }
    bool operator==(const Dims& o) const { return n == o.n && c == o.c && h == o.h && w == o.w; }
};

// Rows and columns around a tile's interior: the halo that neighbours send, or zero padding at the
// tensor's border. Kernels never pad; the margins hold the padding, so the same kernel runs on a whole
// tensor and on a tile of it.
using scheduler::Margins;

// A strided window over floats (or labels): element (n, c, y, x) is at
// base[n * stride_n + c * stride_c + y * stride_h + x]; rows are contiguous in x.
template <typename T>
struct BasicView {
    T* base = nullptr;
    Dims dims;
    std::int64_t stride_n = 0, stride_c = 0, stride_h = 0;

    T& at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) const {
        return base[n * stride_n + c * stride_c + y * stride_h + x];
    }
    // The window of `d` elements starting at (n, c, y, x) of this one.
    BasicView sub(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x, Dims d) const {
        return BasicView{&at(n, c, y, x), d, stride_n, stride_c, stride_h};
    }
    bool dense() const { return stride_h == dims.w && stride_c == dims.h * dims.w && stride_n == dims.c * stride_c; }
    operator BasicView<const T>() const { return {base, dims, stride_n, stride_c, stride_h}; }
};

using View = BasicView<float>;
using ConstView = BasicView<const float>;
using LabelView = BasicView<const std::int32_t>;  // class indices; a label [N] is {n, 1, 1, 1}

// A tile: the interior (`dims`) with `margins` around it in H and W, stored densely (margins included) so
// that a view of any part of it is a plain strided view. It owns its elements, or lies over memory that it
// does not own (a buffer shared by tiles that are never needed at the same time). Its elements are in the
// host's memory, or in a kernel set's (a GPU's), where only views of it are used: `at` and `fill` read and
// write the host's, and a tensor in a GPU's memory is moved, never copied.
class Tensor {
public:
    Tensor() = default;
    explicit Tensor(Dims dims, Margins margins = {});
    Tensor(Dims dims, Margins margins, Memory& memory);  // zeroed, in `memory`
    // Over `memory`, which holds at least the padded dims' elements and outlives the tensor and its copies
    // (which lie over it too).
    static Tensor over(float* memory, Dims dims, Margins margins = {});

    Tensor(const Tensor& o);
    Tensor& operator=(const Tensor& o);
    Tensor(Tensor&& o) noexcept = default;  // a moved vector keeps its elements where they are
    Tensor& operator=(Tensor&& o) noexcept = default;

    const Dims& dims() const { return dims_; }
    const Margins& margins() const { return margins_; }
    Dims padded_dims() const;  // interior and margins

    View interior();
    ConstView interior() const;
    View padded();  // interior and margins
    ConstView padded() const;

    // Element at interior coordinates; y may reach into the margins: -top <= y < h + bottom.
    float& at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x);
    float at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) const;

    float* data() { return data_; }
    const float* data() const { return data_; }
    std::int64_t size() const { return size_; }

    void fill(float v);
    // The margins (zero for padding, -infinity before max pooling), through the memory the tensor is in.
    void fill_margins(float v, Memory& memory = host_memory());

private:
    struct Release {
        Memory* memory;
        void operator()(float* data) const;
    };
    Dims dims_;
    Margins margins_;
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

// A view of a whole dense buffer of `dims`.
View dense_view(float* data, Dims dims);
ConstView dense_view(const float* data, Dims dims);

}  // namespace dsl::backend
