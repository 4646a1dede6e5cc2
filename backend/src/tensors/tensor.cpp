// Owned tiles with margins, and views into them.
#include <dsl/backend/tensor.hpp>

#include <dsl/base/error.hpp>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace dsl::backend {

void Tensor::set_shape(const Dims& dims, const Margins& margins, std::int64_t lanes) {
    DSL_INTERNAL_CHECK(lanes == 1 || (dims.c % lanes == 0 && dims.rank() > 0),
                       "a blocked tensor whose channels do not fill their blocks, or without places");
    dims_ = dims;
    lanes_ = lanes;
    // No margins (rank 0) are zero margins along each dimension.
    margins_ = margins.rank() == 0 ? Margins::filled(dims.rank(), {}) : margins;
    DSL_INTERNAL_CHECK(margins_.rank() == dims.rank(), "a tensor's margins and dims have different ranks");
    size_ = padded_dims().elements();
}

Tensor::Tensor(Dims dims, Margins margins) {
    set_shape(dims, margins);
    storage_.assign(static_cast<std::size_t>(size_), 0.0f);
    data_ = storage_.data();
}

Tensor::Tensor(Dims dims, Margins margins, Memory& memory, std::int64_t lanes) {
    set_shape(dims, margins, lanes);
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

Tensor Tensor::over(float* memory, Dims dims, Margins margins, std::int64_t lanes) {
    Tensor t;
    t.set_shape(dims, margins, lanes);
    t.data_ = memory;
    return t;
}

Tensor::Tensor(const Tensor& o)
    : dims_(o.dims_), margins_(o.margins_), lanes_(o.lanes_), storage_(o.storage_), size_(o.size_) {
    DSL_INTERNAL_CHECK(!o.elsewhere_, "a tensor in a GPU's memory is moved, never copied");
    data_ = storage_.empty() ? o.data_ : storage_.data();
}

Tensor& Tensor::operator=(const Tensor& o) {
    if (this != &o) {
        DSL_INTERNAL_CHECK(!o.elsewhere_, "a tensor in a GPU's memory is moved, never copied");
        elsewhere_.reset();
        dims_ = o.dims_;
        margins_ = o.margins_;
        lanes_ = o.lanes_;
        storage_ = o.storage_;
        size_ = o.size_;
        data_ = storage_.empty() ? o.data_ : storage_.data();
    }
    return *this;
}

Dims Tensor::padded_dims() const {
    Dims d = dims_;
    for (int k = 0; k < d.rank(); ++k) d.space[k] += margins_[k].before + margins_[k].after;
    return d;
}

namespace {

// Where a tensor's interior begins in its padded buffer.
Index interior_origin(const Margins& m) {
    Index i = Index::filled(m.rank(), 0);
    for (int d = 0; d < m.rank(); ++d) i[d] = m[d].before;
    return i;
}

Index shifted(Index i, const Margins& m) {
    for (int d = 0; d < m.rank(); ++d) i[d] += m[d].before;
    return i;
}

}  // namespace

View Tensor::padded() { return dense_view(data_, padded_dims(), lanes_); }
ConstView Tensor::padded() const { return dense_view<const float>(data_, padded_dims(), lanes_); }
View Tensor::interior() { return padded().sub(0, 0, interior_origin(margins_), dims_); }
ConstView Tensor::interior() const { return padded().sub(0, 0, interior_origin(margins_), dims_); }

float& Tensor::at(std::int64_t n, std::int64_t c, const Index& i) { return padded().at(n, c, shifted(i, margins_)); }

float Tensor::at(std::int64_t n, std::int64_t c, const Index& i) const {
    return padded().at(n, c, shifted(i, margins_));
}

void Tensor::fill(float v) { std::fill_n(data_, size_, v); }

void Tensor::fill_margins(float v, Memory& memory) {
    Space<Range> keep = Space<Range>::filled(dims_.rank(), Range{});
    for (int d = 0; d < dims_.rank(); ++d) keep[d] = {margins_[d].before, margins_[d].before + dims_.space[d]};
    fill_outside(memory, padded(), keep, v);
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
    if (count > 0) memory_->fill(dense_view(data_, Dims{1, 1, {count}}), 0.0f);
}

}  // namespace dsl::backend
