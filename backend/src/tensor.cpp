// Owned tiles with margins, and views into them.
#include <dsl/backend/tensor.hpp>

#include <dsl/backend/kernels.hpp>
#include <dsl/base/error.hpp>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace dsl::backend {

namespace {

// The host's memory: plain loops, as the trainer has always done them on the CPU.
class HostMemory final : public Memory {
public:
    bool host() const override { return true; }
    float* allocate(std::int64_t count) override { return new float[static_cast<std::size_t>(count)](); }
    void release(float* data) override { delete[] data; }
    void fill(View v, float value) override {
        for (std::int64_t n = 0; n < v.dims.n; ++n)
            for (std::int64_t c = 0; c < v.dims.c; ++c)
                for (std::int64_t y = 0; y < v.dims.h; ++y) std::fill_n(&v.at(n, c, y, 0), v.dims.w, value);
    }
    void upload(const float* host, float* data, std::int64_t count) override {
        if (count > 0 && host != data) std::memcpy(data, host, static_cast<std::size_t>(count) * sizeof(float));
    }
    void download(const float* data, float* host, std::int64_t count) override { upload(data, host, count); }
    void pack(ConstView v, float* out) override {
        for (std::int64_t n = 0; n < v.dims.n; ++n)
            for (std::int64_t c = 0; c < v.dims.c; ++c)
                for (std::int64_t y = 0; y < v.dims.h; ++y, out += v.dims.w)
                    std::copy_n(&v.at(n, c, y, 0), v.dims.w, out);
    }
    void unpack(const float* in, View v, bool add) override {
        for (std::int64_t n = 0; n < v.dims.n; ++n)
            for (std::int64_t c = 0; c < v.dims.c; ++c)
                for (std::int64_t y = 0; y < v.dims.h; ++y, in += v.dims.w) {
                    float* row = &v.at(n, c, y, 0);
                    if (add)
                        for (std::int64_t x = 0; x < v.dims.w; ++x) row[x] += in[x];
                    else
                        std::copy_n(in, v.dims.w, row);
                }
    }
    void synchronize() override {}
};

}  // namespace

Memory& host_memory() {
    static HostMemory memory;
    return memory;
}

Tensor::Tensor(Dims dims, Margins margins) : dims_(dims), margins_(margins) {
    size_ = padded_dims().elements();
    storage_.assign(static_cast<std::size_t>(size_), 0.0f);
    data_ = storage_.data();
}

Tensor::Tensor(Dims dims, Margins margins, Memory& memory) : dims_(dims), margins_(margins) {
    size_ = padded_dims().elements();
    if (memory.host()) {
        storage_.assign(static_cast<std::size_t>(size_), 0.0f);
        data_ = storage_.data();
        return;
    }
    elsewhere_ = std::unique_ptr<float, Release>(memory.allocate(size_), Release{&memory});
    data_ = elsewhere_.get();
}

void Tensor::Release::operator()(float* data) const {
    if (data) memory->release(data);
}

Tensor Tensor::over(float* memory, Dims dims, Margins margins) {
    Tensor t;
    t.dims_ = dims;
    t.margins_ = margins;
    t.size_ = t.padded_dims().elements();
    t.data_ = memory;
    return t;
}

Tensor::Tensor(const Tensor& o) : dims_(o.dims_), margins_(o.margins_), storage_(o.storage_), size_(o.size_) {
    DSL_INTERNAL_CHECK(!o.elsewhere_, "a tensor in a GPU's memory is moved, never copied");
    data_ = storage_.empty() ? o.data_ : storage_.data();
}

Tensor& Tensor::operator=(const Tensor& o) {
    if (this != &o) {
        DSL_INTERNAL_CHECK(!o.elsewhere_, "a tensor in a GPU's memory is moved, never copied");
        elsewhere_.reset();
        dims_ = o.dims_;
        margins_ = o.margins_;
        storage_ = o.storage_;
        size_ = o.size_;
        data_ = storage_.empty() ? o.data_ : storage_.data();
    }
    return *this;
}

Dims Tensor::padded_dims() const {
    return Dims{dims_.n, dims_.c, dims_.h + margins_.top + margins_.bottom, dims_.w + margins_.left + margins_.right};
}

View Tensor::padded() { return dense_view(data_, padded_dims()); }
ConstView Tensor::padded() const { return dense_view(data_, padded_dims()); }
View Tensor::interior() { return padded().sub(0, 0, margins_.top, margins_.left, dims_); }
ConstView Tensor::interior() const { return padded().sub(0, 0, margins_.top, margins_.left, dims_); }

float& Tensor::at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) {
    return padded().at(n, c, y + margins_.top, x + margins_.left);
}

float Tensor::at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) const {
    return padded().at(n, c, y + margins_.top, x + margins_.left);
}

void Tensor::fill(float v) { std::fill_n(data_, size_, v); }

void Tensor::fill_margins(float v, Memory& memory) {
    fill_outside(memory, padded(), margins_.top, margins_.top + dims_.h, margins_.left, margins_.left + dims_.w, v);
}

void fill_outside(Memory& memory, View p, std::int64_t y0, std::int64_t y1, std::int64_t x0, std::int64_t x1, float v) {
    const Dims d = p.dims;
    y0 = std::clamp<std::int64_t>(y0, 0, d.h), y1 = std::clamp<std::int64_t>(y1, y0, d.h);
    x0 = std::clamp<std::int64_t>(x0, 0, d.w), x1 = std::clamp<std::int64_t>(x1, x0, d.w);
    auto strip = [&](std::int64_t y, std::int64_t x, std::int64_t h, std::int64_t w) {
        if (h > 0 && w > 0) memory.fill(p.sub(0, 0, y, x, Dims{d.n, d.c, h, w}), v);
    };
    strip(0, 0, y0, d.w);
    strip(y1, 0, d.h - y1, d.w);
    strip(y0, 0, y1 - y0, x0);
    strip(y0, x1, y1 - y0, d.w - x1);
}

Buffer::Buffer(Buffer&& o) noexcept
    : memory_(o.memory_),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      capacity_(std::exchange(o.capacity_, 0)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
    if (this != &o) {
        if (data_) memory_->release(data_);
        memory_ = o.memory_;
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
}

Buffer::~Buffer() {
    if (data_) memory_->release(data_);
}

float* Buffer::reserve(std::int64_t count) {
    if (count > capacity_) {
        if (data_) memory_->release(data_);
        data_ = nullptr;
        capacity_ = 0;
        data_ = memory_->allocate(count);
        capacity_ = count;
    }
    size_ = count;
    return data_;
}

void Buffer::resize(std::int64_t count) {
    reserve(count);
    size_ = count;
    if (count > 0) memory_->fill(dense_view(data_, Dims{1, 1, 1, count}), 0.0f);
}

View dense_view(float* data, Dims dims) { return View{data, dims, dims.c * dims.h * dims.w, dims.h * dims.w, dims.w}; }

ConstView dense_view(const float* data, Dims dims) {
    return ConstView{data, dims, dims.c * dims.h * dims.w, dims.h * dims.w, dims.w};
}

}  // namespace dsl::backend
