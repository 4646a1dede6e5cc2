// Strided views of tiles' elements (samples, channels, then the spatial dimensions, the innermost contiguous),
// which kernels read and write, and the walk over their rows.
#pragma once

#include <dsl/base/space.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <cstdint>

namespace dsl::backend {

using dsl::Dims;

// How far a tile reaches beyond its interior along each spatial dimension: the halo that neighbours send, or
// zero padding at the tensor's border. The margins hold the padding, so the same kernel runs on a whole
// tensor and on a tile of it (a convolution told which places are padding may add it itself: Window::zeros).
using scheduler::Margins;
using scheduler::Range;
using Index = Space<std::int64_t>;  // a place along each spatial dimension

// A strided window over floats (or labels): element (n, c, i) is at
// base[n * stride_n + c * stride_c + the sum over d of i[d] * stride[d]]; the innermost spatial dimension
// is contiguous (its stride is 1), so the view is made of rows.
template <typename T>
struct BasicView {
    T* base = nullptr;
    Dims dims;
    std::int64_t stride_n = 0, stride_c = 0;
    Index stride;  // per spatial dimension

    std::int64_t offset(std::int64_t n, std::int64_t c, const Index& i) const {
        std::int64_t o = n * stride_n + c * stride_c;
        for (int d = 0; d < i.rank(); ++d) o += i[d] * stride[d];
        return o;
    }
    T& at(std::int64_t n, std::int64_t c, const Index& i) const { return base[offset(n, c, i)]; }
    // The window of `d` elements starting at (n, c, i) of this one.
    BasicView sub(std::int64_t n, std::int64_t c, const Index& i, const Dims& d) const {
        return BasicView{&at(n, c, i), d, stride_n, stride_c, stride};
    }
    // Channels [c0, c0 + count) of this view (concat's inputs, in its output).
    BasicView channels(std::int64_t c0, std::int64_t count) const {
        BasicView v = *this;
        v.base += c0 * stride_c;
        v.dims.c = count;
        return v;
    }
    // Samples [n0, n0 + count) of this view.
    BasicView samples(std::int64_t n0, std::int64_t count) const {
        BasicView v = *this;
        v.base += n0 * stride_n;
        v.dims.n = count;
        return v;
    }
    // Whether its elements lie one after another, without gaps (a whole buffer, not a window of one).
    bool dense() const {
        std::int64_t expect = 1;
        for (int d = dims.rank() - 1; d >= 0; --d) {
            if (stride[d] != expect) return false;
            expect *= dims.space[d];
        }
        return stride_c == expect && stride_n == dims.c * expect;
    }
    operator BasicView<const T>() const { return {base, dims, stride_n, stride_c, stride}; }
};

using View = BasicView<float>;
using ConstView = BasicView<const float>;
using LabelView = BasicView<const std::int32_t>;  // class indices; labels [N] are {n, 1}, [N, H, W] {n, 1, {h, w}}

// The rows of a view: the innermost spatial dimension's runs of contiguous elements (single elements for a
// view without spatial dimensions), each with its length.
inline std::int64_t row_length(const Dims& d) { return d.rank() > 0 ? d.space[d.rank() - 1] : 1; }

// Calls f(n, c, i, row) for every row of `v` in order: i is the place of its first element, `row` points at
// it, and row_length(v.dims) elements follow contiguously.
template <typename T, typename F>
void for_each_row(const BasicView<T>& v, F&& f) {
    const int outer = v.dims.rank() - 1;  // the spatial dimensions a row does not run along
    if (v.dims.elements() == 0) return;
    for (std::int64_t n = 0; n < v.dims.n; ++n)
        for (std::int64_t c = 0; c < v.dims.c; ++c) {
            Index i = Index::filled(v.dims.rank(), 0);
            while (true) {
                f(n, c, static_cast<const Index&>(i), &v.at(n, c, i));
                int d = outer - 1;
                for (; d >= 0 && i[d] + 1 == v.dims.space[d]; --d) i[d] = 0;
                if (d < 0) break;
                ++i[d];
            }
        }
}

// A view of a whole dense buffer of `dims`.
template <typename T>
BasicView<T> dense_view(T* data, const Dims& dims) {
    BasicView<T> v{data, dims, 0, 0, Index::filled(dims.rank(), 1)};
    std::int64_t s = 1;
    for (int d = dims.rank() - 1; d >= 0; --d) v.stride[d] = s, s *= dims.space[d];
    v.stride_c = s;
    v.stride_n = dims.c * s;
    return v;
}

}  // namespace dsl::backend
