// Owned tiles with margins, and views into them.
#include <dsl/backend/tensor.hpp>

#include <algorithm>

namespace dsl::backend {

Tensor::Tensor(Dims dims, Margins margins) : dims_(dims), margins_(margins) {
    storage_.assign(static_cast<std::size_t>(padded_dims().elements()), 0.0f);
}

Dims Tensor::padded_dims() const {
    return Dims{dims_.n, dims_.c, dims_.h + margins_.top + margins_.bottom, dims_.w + margins_.left + margins_.right};
}

View Tensor::padded() { return dense_view(storage_.data(), padded_dims()); }
ConstView Tensor::padded() const { return dense_view(storage_.data(), padded_dims()); }
View Tensor::interior() { return padded().sub(0, 0, margins_.top, margins_.left, dims_); }
ConstView Tensor::interior() const { return padded().sub(0, 0, margins_.top, margins_.left, dims_); }

float& Tensor::at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) {
    return padded().at(n, c, y + margins_.top, x + margins_.left);
}

float Tensor::at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) const {
    return padded().at(n, c, y + margins_.top, x + margins_.left);
}

void Tensor::fill(float v) { std::fill(storage_.begin(), storage_.end(), v); }

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
