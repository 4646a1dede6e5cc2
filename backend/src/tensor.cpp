// Owned tiles with margins, and views into them.
#include <dsl/backend/tensor.hpp>

#include <algorithm>

namespace dsl::backend {

Tensor::Tensor(Dims dims, Margins margins) : dims_(dims), margins_(margins) {
    size_ = padded_dims().elements();
    storage_.assign(static_cast<std::size_t>(size_), 0.0f);
    data_ = storage_.data();
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
    data_ = storage_.empty() ? o.data_ : storage_.data();
}

Tensor& Tensor::operator=(const Tensor& o) {
    if (this != &o) {
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

void Tensor::fill_margins(float v) {
    const View p = padded();
    for (std::int64_t n = 0; n < p.dims.n; ++n)
        for (std::int64_t c = 0; c < p.dims.c; ++c)
            for (std::int64_t y = 0; y < p.dims.h; ++y) {
                float* row = &p.at(n, c, y, 0);
                if (y < margins_.top || y >= margins_.top + dims_.h) {
                    std::fill_n(row, p.dims.w, v);
                    continue;
                }
                std::fill_n(row, margins_.left, v);
                std::fill_n(row + margins_.left + dims_.w, margins_.right, v);
            }
}

View dense_view(float* data, Dims dims) { return View{data, dims, dims.c * dims.h * dims.w, dims.h * dims.w, dims.w}; }

ConstView dense_view(const float* data, Dims dims) {
    return ConstView{data, dims, dims.c * dims.h * dims.w, dims.h * dims.w, dims.w};
}

}  // namespace dsl::backend
