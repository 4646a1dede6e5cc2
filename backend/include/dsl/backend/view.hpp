// Strided views of tiles' elements (samples, channels, then the spatial dimensions, the innermost contiguous),
// which kernels read and write, and the walk over their rows.
#pragma once

#include <dsl/base/error.hpp>
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
//
// Or, with `lanes` > 1, channels in blocks of `lanes` (oneDNN's nChw16c: blocked_lanes), a block's channels
// innermost: element (n, c, i) is at base[n * stride_n + (c / lanes) * stride_c + the sum of i[d] * stride[d]
// + c % lanes], stride_c steps a block and the innermost place's stride is `lanes`. A blocked view has no rows:
// only the kernels that say so take one (for_each_row and planes() refuse it), and its channels are a whole
// number of blocks.
template <typename T>
struct BasicView {
    T* base = nullptr;
    Dims dims;
    std::int64_t stride_n = 0, stride_c = 0;
    Index stride;            // per spatial dimension
    std::int64_t lanes = 1;  // channels interleaved innermost: 1 (planar) or blocked_lanes

    std::int64_t offset(std::int64_t n, std::int64_t c, const Index& i) const {
        std::int64_t o = n * stride_n + (lanes == 1 ? c * stride_c : c / lanes * stride_c + c % lanes);
        for (int d = 0; d < i.rank(); ++d) o += i[d] * stride[d];
        return o;
    }
    bool blocked() const { return lanes > 1; }
    T& at(std::int64_t n, std::int64_t c, const Index& i) const { return base[offset(n, c, i)]; }
    // The window of `d` elements starting at (n, c, i) of this one.
    // Of a blocked view, c and d.c are whole blocks.
    BasicView sub(std::int64_t n, std::int64_t c, const Index& i, const Dims& d) const {
        DSL_INTERNAL_CHECK(c % lanes == 0 && (d.c % lanes == 0 || c + d.c == dims.c),
                           "a window of a blocked view that cuts a block of channels");
        return BasicView{&at(n, c, i), d, stride_n, stride_c, stride, lanes};
    }
    // Channels [c0, c0 + count) of this view (concat's inputs, in its output).
    BasicView channels(std::int64_t c0, std::int64_t count) const {
        DSL_INTERNAL_CHECK(c0 % lanes == 0 && count % lanes == 0, "channels of a blocked view that cut a block");
        BasicView v = *this;
        v.base += c0 / lanes * stride_c;
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
    // A blocked one's channels fill their last block.
    bool dense() const {
        std::int64_t expect = lanes;
        for (int d = dims.rank() - 1; d >= 0; --d) {
            if (stride[d] != expect) return false;
            expect *= dims.space[d];
        }
        return stride_c == expect && stride_n == dims.c / lanes * expect && dims.c % lanes == 0;
    }
    operator BasicView<const T>() const { return {base, dims, stride_n, stride_c, stride, lanes}; }
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
    DSL_INTERNAL_CHECK(!v.blocked(), "rows of a view whose channels lie in blocks");
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

// Calls f(run, length) for every run of contiguous elements of `v` in order: its rows (for_each_row's), or a
// blocked view's rows of places with each place's block of channels, row_length(v.dims) * v.lanes elements.
// For what treats every element alike (fills and copies between views of one layout).
template <typename T, typename F>
void for_each_run(const BasicView<T>& v, F&& f) {
    if (!v.blocked()) {
        const std::int64_t w = row_length(v.dims);
        for_each_row(v, [&](std::int64_t, std::int64_t, const Index&, T* row) { f(row, w); });
        return;
    }
    BasicView<T> blocks = v;  // a block's place as a single element of a planar view
    blocks.dims.c = v.dims.c / v.lanes;
    blocks.lanes = 1;
    const std::int64_t w = row_length(v.dims) * v.lanes;
    for_each_row(blocks, [&](std::int64_t, std::int64_t, const Index&, T* row) { f(row, w); });
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

// The channels of a block in the blocked layout (oneDNN's nChw16c and nCdhw16c): 16 floats, one AVX-512
// register.
constexpr std::int64_t blocked_lanes = 16;

// A view of a whole dense buffer of `dims` in `lanes`' layout: blocked where lanes > 1 (dims.c a multiple of
// it), else dense_view's.
template <typename T>
BasicView<T> dense_view(T* data, const Dims& dims, std::int64_t lanes) {
    if (lanes == 1) return dense_view(data, dims);
    DSL_INTERNAL_CHECK(dims.c % lanes == 0, "a blocked view of channels that do not fill their blocks");
    BasicView<T> v{data, dims, 0, 0, Index::filled(dims.rank(), 1), lanes};
    std::int64_t s = lanes;
    for (int d = dims.rank() - 1; d >= 0; --d) v.stride[d] = s, s *= dims.space[d];
    v.stride_c = s;
    v.stride_n = dims.c / lanes * s;
    return v;
}

}  // namespace dsl::backend
