// What the kernel tests share: operands placed in tiles the way the trainer hands them to kernels (with
// margins, inside margins, channel ranges), random values, windows, a walk over a view's elements.
#pragma once

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/tensor.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using dsl::backend::Dims;
using dsl::backend::Index;
using dsl::backend::Margins;
using dsl::backend::Tensor;
using dsl::backend::View;
using dsl::backend::Window;

constexpr float sentinel = 1234.5f;

// Calls f(n, c, i) for every element of a view of `d` in order: samples, channels, then the place i (an image's
// {row, column}; {} for a vector), its last index fastest.
template <typename F>
void for_each_element(const Dims& d, F&& f) {
    if (d.elements() == 0) return;
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t c = 0; c < d.c; ++c)
            for (Index i = Index::filled(d.rank(), 0);;) {
                f(n, c, static_cast<const Index&>(i));
                int k = d.rank() - 1;
                while (k >= 0 && ++i[k] == d.space[k]) i[k--] = 0;
                if (k < 0) break;
            }
}

// How a kernel's operand sits in its tile. The margins outside the view hold NaN for inputs (so reading them
// shows in the result) and a sentinel for outputs (so writing them shows in the comparison). A vector {n, k}
// has no margins: in every layout but dense it is a channel range. A volume's tile has margins along its depth
// too (uneven where an image's are).
enum class Layout {
    dense,     // a tensor without margins
    interior,  // the interior of a tensor with uneven margins
    padded,    // the whole padded view of a tensor whose margins of 1 hold the (zero) padding
    inside,    // margins of 2, and the view starts 1 place inside them along each dimension, as a pad-1
               // convolution reads
    channels,  // a channel range of a larger tensor with margins: stride_n is not C * stride_c
};

inline const char* name(Layout l) {
    switch (l) {
        case Layout::dense: return "dense";
        case Layout::interior: return "interior";
        case Layout::padded: return "padded";
        case Layout::inside: return "inside";
        case Layout::channels: return "channels";
    }
    return "?";
}

// A tile and the view of it that a kernel receives.
struct Operand {
    Tensor tensor;
    std::int64_t offset = 0;  // of the view's first element in the tensor's storage
    Dims dims;

    View view() {
        const View p = tensor.padded();
        return View{tensor.data() + offset, dims, p.stride_n, p.stride_c, p.stride};
    }
};

// A view of `d` (a vector, an image or a volume) in a tile laid out as `layout`: its elements random in
// [-1, 1) (or integers below `levels` when `levels` > 0, to make ties), but zero where an input's view covers
// the tile's margins (a convolution's padding); the rest of the tile NaN for an input and the sentinel for an
// output.
inline Operand make_operand(Dims d, Layout layout, bool input, std::mt19937& rng, int levels = 0) {
    Operand o;
    o.dims = d;
    const bool vector = d.rank() == 0, volume = d.rank() == 3;
    if (vector && layout != Layout::dense) layout = Layout::channels;
    const auto grown = [&](std::int64_t by) {
        Dims g = d;
        for (std::int64_t& e : g.space) e += by;
        return g;
    };
    const auto even = [&](std::int64_t m) { return Margins::filled(d.rank(), {m, m}); };
    // An image's margins and first place, with a volume's depth before them.
    const auto of_rank = [&](Margins image, dsl::scheduler::Reach depth) {
        return volume ? Margins{depth, image[0], image[1]} : image;
    };
    const auto place = [&](Index image, std::int64_t depth) {
        return volume ? Index{depth, image[0], image[1]} : image;
    };
    Index first = Index::filled(d.rank(), 0);  // the view's first element in the padded tile
    std::int64_t channel = 0;
    switch (layout) {
        case Layout::dense: o.tensor = Tensor(d); break;
        case Layout::interior:
            o.tensor = Tensor(d, of_rank(Margins{{2, 1}, {3, 2}}, {1, 2}));
            first = place({2, 3}, 1);
            break;
        case Layout::padded: o.tensor = Tensor(grown(-2), even(1)); break;
        case Layout::inside:
            o.tensor = Tensor(grown(-2), even(2));
            first = place({1, 1}, 1);
            break;
        case Layout::channels:
            o.tensor =
                Tensor(Dims{d.n, d.c + 3, d.space}, vector ? Margins{} : of_rank(Margins{{1, 2}, {1, 0}}, {1, 0}));
            first = vector ? Index{} : place({1, 1}, 1);
            channel = 1;
            break;
    }
    const View p = o.tensor.padded();
    o.offset = &p.at(0, channel, first) - p.base;
    o.tensor.fill(input ? std::numeric_limits<float>::quiet_NaN() : sentinel);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::uniform_int_distribution<int> level(0, std::max(levels - 1, 0));
    const View v = o.view();
    const Dims in = o.tensor.dims();
    const Margins m = o.tensor.margins();
    for_each_element(d, [&](std::int64_t n, std::int64_t c, const Index& i) {
        float value = levels > 0 ? static_cast<float>(level(rng)) : uniform(rng);
        bool margin = false;
        for (int k = 0; k < d.rank(); ++k) {
            const std::int64_t at = first[k] + i[k];  // in the padded tile
            margin = margin || at < m[k].before || at >= m[k].before + in.space[k];
        }
        if (input && margin) value = 0.0f;
        v.at(n, c, i) = value;
    });
    return o;
}

inline std::vector<float> random_vector(std::int64_t size, std::mt19937& rng, float low = -1.0f, float high = 1.0f) {
    std::uniform_real_distribution<float> uniform(low, high);
    std::vector<float> v(static_cast<std::size_t>(size));
    for (float& x : v) x = uniform(rng);
    return v;
}

inline Window window(std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t dh = 1,
                     std::int64_t dw = 1) {
    Window w;
    w.kernel = {kh, kw};
    w.stride = {sh, sw};
    w.dilation = {dh, dw};
    return w;
}

// A convolution the kernel tests run on every kernel set: n samples, c channels in, f out, the output's size.
struct ConvProblem {
    std::int64_t n, c, f, out_h, out_w;
    Window window;
    bool bias;
};

inline std::string describe(const ConvProblem& p, Layout layout, bool strided_weights = false) {
    const Window& w = p.window;
    return "conv n=" + std::to_string(p.n) + " c=" + std::to_string(p.c) + " f=" + std::to_string(p.f) +
           " out=" + std::to_string(p.out_h) + "x" + std::to_string(p.out_w) +
           " kernel=" + std::to_string(w.kernel[0]) + "x" + std::to_string(w.kernel[1]) +
           " stride=" + std::to_string(w.stride[0]) + "," + std::to_string(w.stride[1]) +
           " dilation=" + std::to_string(w.dilation[0]) + "," + std::to_string(w.dilation[1]) +
           (p.bias ? " bias" : " no-bias") + " layout=" + name(layout) + (strided_weights ? " strided-weights" : "");
}

inline const std::vector<ConvProblem>& conv_problems() {
    static const std::vector<ConvProblem> problems = {
        {2, 3, 5, 7, 5, window(3, 3, 1, 1), true},
        {1, 4, 6, 5, 6, window(3, 1, 1, 1), false},        // non-square kernel
        {3, 5, 4, 4, 3, window(3, 3, 2, 2), true},         // stride 2
        {2, 3, 7, 5, 4, window(3, 3, 1, 1, 2, 2), false},  // dilation 2
        {2, 6, 3, 3, 5, window(1, 3, 2, 1, 1, 2), true},   // mixed stride and dilation per dimension
        {1, 17, 19, 9, 11, window(5, 5, 1, 1), true},      // odd channel counts
        {4, 16, 32, 8, 8, window(3, 3, 1, 1), true},       // channels that blocked layouts like
        {4, 16, 32, 16, 16, window(3, 3, 1, 1), true},     // big enough for Winograd and FFT algorithms
        {2, 3, 5, 6, 6, window(1, 1, 1, 1), false},        // 1x1
        {2, 8, 8, 3, 4, window(2, 2, 2, 2), true},         // even kernel, stride 2
        {1, 2, 3, 4, 4, window(7, 7, 2, 2), true},         // first-layer-like: few channels, large kernel
        {3, 1, 1, 5, 7, window(3, 2, 1, 2, 2, 1), false},  // one channel in and out
        {2, 32, 16, 7, 9, window(3, 3, 2, 2), false},      // stride 2 with more channels
    };
    return problems;
}

}  // namespace

// CAPTURE(dims) shows them as {n, c, {h, w}}.
template <>
struct Catch::StringMaker<dsl::Dims> {
    static std::string convert(const dsl::Dims& d) {
        std::string s = "{" + std::to_string(d.n) + ", " + std::to_string(d.c) + ", {";
        for (int k = 0; k < d.rank(); ++k) s += (k > 0 ? ", " : "") + std::to_string(d.space[k]);
        return s + "}}";
    }
};

// CAPTURE(index) shows it as {d, h, w}.
template <>
struct Catch::StringMaker<dsl::Space<std::int64_t>> {
    static std::string convert(const dsl::Space<std::int64_t>& i) {
        std::string s = "{";
        for (int k = 0; k < i.rank(); ++k) s += (k > 0 ? ", " : "") + std::to_string(i[k]);
        return s + "}";
    }
};
