// The oneDNN convolution and fully connected kernels against the reference, on views of tiles with margins.
#include "../backend/src/onednn_kernels.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/frontend/diagnostics.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace dsl::backend;

namespace {

// How a kernel's operand sits in its tile. The margins outside the view hold NaN for inputs (so reading them
// shows in the result) and a sentinel for outputs (so writing them shows in the comparison).
enum class Layout {
    dense,     // a tensor without margins
    interior,  // the interior of a tensor with uneven margins
    padded,    // the whole padded view of a tensor whose margins of 1 hold the (zero) padding
    inside,    // margins of 2, and the view starts 1 row and column inside them, as a pad-1 convolution reads
    channels,  // a channel range of a larger tensor with margins: stride_n is not C * stride_c
};

const char* name(Layout l) {
    switch (l) {
        case Layout::dense: return "dense";
        case Layout::interior: return "interior";
        case Layout::padded: return "padded";
        case Layout::inside: return "inside";
        case Layout::channels: return "channels";
    }
    return "?";
}

constexpr float sentinel = 1234.5f;

// A tile and the view of it that a kernel receives.
struct Operand {
    Tensor tensor;
    std::int64_t offset = 0;  // of the view's first element in the tensor's storage
    Dims dims;

    View view() {
        const View p = tensor.padded();
        return View{tensor.data() + offset, dims, p.stride_n, p.stride_c, p.stride_h};
    }
};

Operand make_operand(Dims d, Layout layout, bool input, std::mt19937& rng) {
    Operand o;
    o.dims = d;
    switch (layout) {
        case Layout::dense: o.tensor = Tensor(d); break;
        case Layout::interior: o.tensor = Tensor(d, Margins{2, 1, 3, 2}); break;
        case Layout::padded: o.tensor = Tensor(Dims{d.n, d.c, d.h - 2, d.w - 2}, Margins{1, 1, 1, 1}); break;
        case Layout::inside: o.tensor = Tensor(Dims{d.n, d.c, d.h - 2, d.w - 2}, Margins{2, 2, 2, 2}); break;
        case Layout::channels: o.tensor = Tensor(Dims{d.n, d.c + 3, d.h, d.w}, Margins{1, 2, 1, 0}); break;
    }
    const View p = o.tensor.padded();
    switch (layout) {
        case Layout::dense:
        case Layout::padded: o.offset = 0; break;
        case Layout::interior: o.offset = &p.at(0, 0, 2, 3) - p.base; break;
        case Layout::inside: o.offset = &p.at(0, 0, 1, 1) - p.base; break;
        case Layout::channels: o.offset = &p.at(0, 1, 1, 1) - p.base; break;
    }
    o.tensor.fill(input ? std::numeric_limits<float>::quiet_NaN() : sentinel);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const View v = o.view();
    const Dims in = o.tensor.dims();
    const Margins m = o.tensor.margins();
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t c = 0; c < d.c; ++c)
            for (std::int64_t y = 0; y < d.h; ++y)
                for (std::int64_t x = 0; x < d.w; ++x) {
                    float value = uniform(rng);
                    // Where the view covers margins they are a convolution's zero padding.
                    const std::int64_t ty = &v.at(n, c, y, x) - &p.at(n, 0, 0, 0);
                    const std::int64_t row = (ty % p.stride_c) / p.stride_h, col = ty % p.stride_h;
                    const bool margin = row < m.top || row >= m.top + in.h || col < m.left || col >= m.left + in.w;
                    if (input && margin) value = 0.0f;
                    v.at(n, c, y, x) = value;
                }
    return o;
}

std::vector<float> random_vector(std::int64_t size, std::mt19937& rng) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(size));
    for (float& x : v) x = uniform(rng);
    return v;
}

// Every element of two buffers that started equal, margins included: values within `tolerance` of the
// largest expected magnitude, no NaN, and sentinels exactly where they were.
void require_close(const float* got, const float* expected, std::int64_t size, const std::string& what,
                   double tolerance = 1e-4) {
    double scale = 0.0, error = 0.0;
    std::int64_t nans = 0, sentinels_changed = 0;
    for (std::int64_t i = 0; i < size; ++i) {
        if (std::isnan(got[i]) != std::isnan(expected[i])) ++nans;
        if ((got[i] == sentinel) != (expected[i] == sentinel)) ++sentinels_changed;
        if (std::isnan(got[i]) || std::isnan(expected[i])) continue;
        if (expected[i] != sentinel) scale = std::max(scale, std::abs(double(expected[i])));
        error = std::max(error, std::abs(double(got[i]) - double(expected[i])));
    }
    INFO(what << ": max error " << error << ", scale " << scale);
    CHECK(nans == 0);
    CHECK(sentinels_changed == 0);
    CHECK(scale > 0.0);
    CHECK(error <= tolerance * scale);
}

void require_close(Operand& got, Operand& expected, const std::string& what) {
    REQUIRE(got.tensor.size() == expected.tensor.size());
    require_close(got.tensor.data(), expected.tensor.data(), got.tensor.size(), what);
}

struct ConvProblem {
    std::int64_t n, c, f, out_h, out_w;
    Window window;
    bool bias;
};

Window window(std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw, std::int64_t dh, std::int64_t dw) {
    Window w;
    w.kernel = {kh, kw};
    w.stride = {sh, sw};
    w.dilation = {dh, dw};
    return w;
}

std::string describe(const ConvProblem& p, Layout layout) {
    const Window& w = p.window;
    return "conv n=" + std::to_string(p.n) + " c=" + std::to_string(p.c) + " f=" + std::to_string(p.f) +
           " out=" + std::to_string(p.out_h) + "x" + std::to_string(p.out_w) +
           " kernel=" + std::to_string(w.kernel[0]) + "x" + std::to_string(w.kernel[1]) +
           " stride=" + std::to_string(w.stride[0]) + "," + std::to_string(w.stride[1]) +
           " dilation=" + std::to_string(w.dilation[0]) + "," + std::to_string(w.dilation[1]) +
           (p.bias ? " bias" : " no-bias") + " layout=" + name(layout);
}

// Forward, backward-data and backward-weights of one problem with both kernel sets, on the same inputs.
void check_conv(const ConvProblem& p, Layout layout, std::mt19937& rng) {
    const std::string what = describe(p, layout);
    INFO(what);
    const Window& win = p.window;
    const Dims xd{p.n, p.c, win.input_extent(0, p.out_h), win.input_extent(1, p.out_w)};
    const Dims yd{p.n, p.f, p.out_h, p.out_w};
    const Dims wd{p.f, p.c, win.kernel[0], win.kernel[1]};
    ConvKernels& ref = *reference_kernels().conv;
    ConvKernels& dnn = onednn_conv();

    Operand x = make_operand(xd, layout, true, rng);
    Operand w = make_operand(wd, Layout::dense, true, rng);
    const std::vector<float> bias = random_vector(p.f, rng);
    const float* b = p.bias ? bias.data() : nullptr;

    Operand y = make_operand(yd, layout, false, rng), y_ref = y;
    dnn.forward(x.view(), w.view(), b, y.view(), win);
    ref.forward(x.view(), w.view(), b, y_ref.view(), win);
    require_close(y, y_ref, "forward: " + what);

    Operand dy = make_operand(yd, layout, true, rng);
    Operand dx = make_operand(xd, layout, false, rng), dx_ref = dx;
    dnn.backward_data(dy.view(), w.view(), dx.view(), win);
    ref.backward_data(dy.view(), w.view(), dx_ref.view(), win);
    require_close(dx, dx_ref, "backward_data: " + what);

    Operand dw = make_operand(wd, Layout::dense, false, rng), dw_ref = dw;
    std::vector<float> db(p.f, sentinel), db_ref = db;
    dnn.backward_weights(x.view(), dy.view(), dw.view(), p.bias ? db.data() : nullptr, win);
    ref.backward_weights(x.view(), dy.view(), dw_ref.view(), p.bias ? db_ref.data() : nullptr, win);
    require_close(dw, dw_ref, "backward_weights dw: " + what);
    if (p.bias)
        require_close(db.data(), db_ref.data(), p.f, "backward_weights db: " + what);
    else
        CHECK(std::all_of(db.begin(), db.end(), [](float v) { return v == sentinel; }));
}

const std::vector<ConvProblem>& conv_problems() {
    static const std::vector<ConvProblem> problems = {
        {2, 3, 5, 7, 5, window(3, 3, 1, 1, 1, 1), true},
        {1, 4, 6, 5, 6, window(3, 1, 1, 1, 1, 1), false},    // non-square kernel
        {3, 5, 4, 4, 3, window(3, 3, 2, 2, 1, 1), true},     // stride 2
        {2, 3, 7, 5, 4, window(3, 3, 1, 1, 2, 2), false},    // dilation 2
        {2, 6, 3, 3, 5, window(1, 3, 2, 1, 1, 2), true},     // mixed stride and dilation per dimension
        {1, 17, 19, 9, 11, window(5, 5, 1, 1, 1, 1), true},  // odd channel counts
        {4, 16, 32, 8, 8, window(3, 3, 1, 1, 1, 1), true},   // channels that blocked layouts like
        {2, 3, 5, 6, 6, window(1, 1, 1, 1, 1, 1), false},    // 1x1
        {2, 8, 8, 3, 4, window(2, 2, 2, 2, 1, 1), true},     // even kernel, stride 2
        {1, 2, 3, 4, 4, window(7, 7, 2, 2, 1, 1), true},     // first-layer-like: few channels, large kernel
        {3, 1, 1, 5, 7, window(3, 2, 1, 2, 2, 1), false},    // one channel in and out
    };
    return problems;
}

struct FcProblem {
    std::int64_t n, c, h, w, k;
    bool bias;
};

void check_fc(const FcProblem& p, Layout layout, std::mt19937& rng) {
    const std::string what = "fc n=" + std::to_string(p.n) + " x=" + std::to_string(p.c) + "x" + std::to_string(p.h) +
                             "x" + std::to_string(p.w) + " k=" + std::to_string(p.k) + (p.bias ? " bias" : " no-bias") +
                             " layout=" + name(layout);
    INFO(what);
    const Dims xd{p.n, p.c, p.h, p.w}, yd{p.n, p.k, 1, 1}, wd{p.k, p.c * p.h * p.w, 1, 1};
    FcKernels& ref = *reference_kernels().fc;
    FcKernels& dnn = onednn_fc();

    Operand x = make_operand(xd, layout, true, rng);
    Operand w = make_operand(wd, layout, true, rng);
    const std::vector<float> bias = random_vector(p.k, rng);
    const float* b = p.bias ? bias.data() : nullptr;

    Operand y = make_operand(yd, layout, false, rng), y_ref = y;
    dnn.forward(x.view(), w.view(), b, y.view());
    ref.forward(x.view(), w.view(), b, y_ref.view());
    require_close(y, y_ref, "forward: " + what);

    Operand dy = make_operand(yd, layout, true, rng);
    Operand dx = make_operand(xd, layout, false, rng), dx_ref = dx;
    dnn.backward_data(dy.view(), w.view(), dx.view());
    ref.backward_data(dy.view(), w.view(), dx_ref.view());
    require_close(dx, dx_ref, "backward_data: " + what);

    Operand dw = make_operand(wd, layout, false, rng), dw_ref = dw;
    std::vector<float> db(p.k, sentinel), db_ref = db;
    dnn.backward_weights(x.view(), dy.view(), dw.view(), p.bias ? db.data() : nullptr);
    ref.backward_weights(x.view(), dy.view(), dw_ref.view(), p.bias ? db_ref.data() : nullptr);
    require_close(dw, dw_ref, "backward_weights dw: " + what);
    if (p.bias)
        require_close(db.data(), db_ref.data(), p.k, "backward_weights db: " + what);
    else
        CHECK(std::all_of(db.begin(), db.end(), [](float v) { return v == sentinel; }));
}

}  // namespace

TEST_CASE("oneDNN convolution matches the reference on views of tiles", "[onednn]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::padded, Layout::inside, Layout::channels);
    std::mt19937 rng(17 + static_cast<unsigned>(layout));
    for (const ConvProblem& p : conv_problems()) check_conv(p, layout, rng);
}

TEST_CASE("oneDNN convolution follows new data on cached problems", "[onednn]") {
    // The same problems again and again, interleaved, as a training step repeats them: each call must use
    // its own buffers, not the ones the cached primitive first ran on.
    std::mt19937 rng(5);
    for (int step = 0; step < 3; ++step) {
        check_conv(conv_problems()[0], Layout::interior, rng);
        check_conv(conv_problems()[2], Layout::inside, rng);
        check_conv(conv_problems()[0], Layout::dense, rng);
    }
}

TEST_CASE("oneDNN convolution rejects an input that does not match its window", "[onednn]") {
    Tensor x(Dims{1, 2, 6, 6}), w(Dims{3, 2, 3, 3}), y(Dims{1, 3, 5, 4});  // 6x6 input gives 4x4 outputs
    const Window win = window(3, 3, 1, 1, 1, 1);
    CHECK_THROWS_AS(onednn_conv().forward(x.interior(), w.interior(), nullptr, y.interior(), win), dsl::InternalError);
    CHECK_THROWS_AS(onednn_conv().backward_data(y.interior(), w.interior(), x.interior(), win), dsl::InternalError);
    Tensor wrong_w(Dims{3, 2, 3, 1});
    Tensor y_ok(Dims{1, 3, 4, 4});
    CHECK_THROWS_AS(onednn_conv().backward_weights(x.interior(), y_ok.interior(), wrong_w.interior(), nullptr, win),
                    dsl::InternalError);
}

TEST_CASE("oneDNN fully connected layer matches the reference on views of tiles", "[onednn]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::channels);
    std::mt19937 rng(29 + static_cast<unsigned>(layout));
    const std::vector<FcProblem> problems = {
        {3, 4, 5, 6, 7, true},   {2, 10, 1, 1, 5, false}, {5, 3, 3, 2, 11, true},
        {1, 16, 4, 4, 10, true}, {7, 1, 1, 1, 1, false},  {4, 64, 2, 2, 33, true},
    };
    for (const FcProblem& p : problems) check_fc(p, layout, rng);
}

TEST_CASE("oneDNN fully connected layer rejects mismatched weights", "[onednn]") {
    Tensor x(Dims{2, 3, 2, 2}), w(Dims{5, 11, 1, 1}), y(Dims{2, 5, 1, 1});
    CHECK_THROWS_AS(onednn_fc().forward(x.interior(), w.interior(), nullptr, y.interior()), dsl::InternalError);
}
