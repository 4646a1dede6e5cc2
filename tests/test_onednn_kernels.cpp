// The oneDNN convolution and fully connected kernels against the reference, on views of tiles with margins, of
// images and volumes.
#include "../backend/src/kernels/halide_kernels.hpp"
#include "../backend/src/kernels/onednn_kernels.hpp"
#include "../backend/src/tensors/planes.hpp"
#include "../backend/src/tensors/weight_blocks.hpp"
#include "kernel_layouts.hpp"
#include "skip.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/base/error.hpp>
#include <dsl/scheduler/layout_groups.hpp>

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
using dsl::test::skip;

namespace {

// Why the cases of bfloat16 products cannot run on this CPU.
const char* const no_bf16 = "this CPU has no AVX-512 BF16 instructions (its bfloat16 layers convolve in float32)";

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

// The kernels a test compares: oneDNN's and the reference's, of float32 or of bfloat16 products.
struct ConvPair {
    ConvKernels& dnn;
    ConvKernels& ref;
};

ConvPair float32_pair() { return {onednn_conv(), *reference_kernels().conv}; }

// Backward-weights of both kernel sets on the same x and dy (each with its window), against each other: the
// weights' gradient (unblocked first where dnn's window has it in blocks), and the bias's or none (left as it
// was).
void check_weight_gradients(ConvKernels& dnn, ConvKernels& ref, Operand& x, Operand& dy, const Dims& wd, bool with_bias,
                            const Window& dnn_window, const Window& ref_window, const std::string& what,
                            std::mt19937& rng) {
    Operand dw = make_operand(wd, Layout::dense, false, rng), dw_ref = dw;
    std::vector<float> db(static_cast<std::size_t>(wd.n), sentinel), db_ref = db;
    dnn.backward_weights(x.view(), dy.view(), dw.view(), with_bias ? db.data() : nullptr, dnn_window);
    ref.backward_weights(x.view(), dy.view(), dw_ref.view(), with_bias ? db_ref.data() : nullptr, ref_window);
    if (dnn_window.blocked_weights) {
        Operand blocks = dw;
        unblock_weights(wd, blocks.view().base, dw.view().base);
    }
    require_close(dw, dw_ref, "backward_weights dw: " + what);
    if (with_bias)
        require_close(db.data(), db_ref.data(), wd.n, "backward_weights db: " + what);
    else
        CHECK(std::all_of(db.begin(), db.end(), [](float v) { return v == sentinel; }));
}

// Forward, backward-data and backward-weights of one problem (y of `yd` from `c` channels through `win`) with
// both kernel sets, on the same inputs; with `blocked`, dnn's weights and their gradient in 16 x 16 blocks
// (Window::blocked_weights).
void check_conv(const Dims& yd, std::int64_t c, const Window& win, bool with_bias, Layout layout,
                const std::string& what, std::mt19937& rng, ConvPair kernels = float32_pair(), bool blocked = false) {
    INFO(what);
    Dims xd{yd.n, c, yd.space};
    for (int d = 0; d < yd.rank(); ++d) xd.space[d] = win.input_extent(d, yd.space[d]);
    const Dims wd{yd.c, c, win.kernel};
    ConvKernels& ref = kernels.ref;
    ConvKernels& dnn = kernels.dnn;

    Operand x = make_operand(xd, layout, true, rng);
    Operand w = make_operand(wd, Layout::dense, true, rng);
    const std::vector<float> bias = random_vector(yd.c, rng);
    const float* b = with_bias ? bias.data() : nullptr;
    Window dnn_win = win;
    dnn_win.blocked_weights = blocked;
    Operand dnn_w = w;
    if (blocked) block_weights(wd, w.view().base, dnn_w.view().base);

    Operand y = make_operand(yd, layout, false, rng), y_ref = y;
    dnn.forward(x.view(), dnn_w.view(), b, y.view(), dnn_win);
    ref.forward(x.view(), w.view(), b, y_ref.view(), win);
    require_close(y, y_ref, "forward: " + what);

    Operand dy = make_operand(yd, layout, true, rng);
    Operand dx = make_operand(xd, layout, false, rng), dx_ref = dx;
    dnn.backward_data(dy.view(), dnn_w.view(), dx.view(), dnn_win);
    ref.backward_data(dy.view(), w.view(), dx_ref.view(), win);
    require_close(dx, dx_ref, "backward_data: " + what);

    check_weight_gradients(dnn, ref, x, dy, wd, with_bias, dnn_win, win, what, rng);
}

void check_conv(const ConvProblem& p, Layout layout, std::mt19937& rng, ConvPair kernels = float32_pair(),
                bool blocked = false) {
    check_conv(Dims{p.n, p.f, {p.out_h, p.out_w}}, p.c, p.window, p.bias, layout,
               describe(p, layout) + (blocked ? " blocked-weights" : ""), rng, kernels, blocked);
}

// A convolution of volumes: n samples, c channels in, f out, the output's extents.
struct VolumeConvProblem {
    std::int64_t n, c, f;
    Index out;
    Window window;
    bool bias;
};

Window volume_window(Index kernel, Index stride = {1, 1, 1}, Index dilation = {1, 1, 1}) {
    Window w;
    w.kernel = kernel;
    w.stride = stride;
    w.dilation = dilation;
    return w;
}

std::string text(const Index& i) {
    std::string s;
    for (int d = 0; d < i.rank(); ++d) s += (d > 0 ? "x" : "") + std::to_string(i[d]);
    return s;
}

void check_conv(const VolumeConvProblem& p, Layout layout, std::mt19937& rng, ConvPair kernels = float32_pair()) {
    const Window& w = p.window;
    const std::string what = "conv n=" + std::to_string(p.n) + " c=" + std::to_string(p.c) +
                             " f=" + std::to_string(p.f) + " out=" + text(p.out) + " kernel=" + text(w.kernel) +
                             " stride=" + text(w.stride) + " dilation=" + text(w.dilation) +
                             (p.bias ? " bias" : " no-bias") + " layout=" + name(layout);
    check_conv(Dims{p.n, p.f, p.out}, p.c, w, p.bias, layout, what, rng, kernels);
}

// Outputs of at least 3 along each dimension, so that the padded and inside layouts leave an interior.
const std::vector<VolumeConvProblem>& volume_conv_problems() {
    static const std::vector<VolumeConvProblem> problems = {
        {2, 3, 5, {4, 5, 3}, volume_window({3, 3, 3}), true},
        {1, 4, 6, {3, 4, 5}, volume_window({3, 1, 3}), false},                        // non-cubic kernel
        {2, 5, 4, {3, 3, 4}, volume_window({3, 3, 3}, {2, 2, 2}), true},              // stride 2
        {1, 3, 7, {3, 4, 4}, volume_window({3, 3, 3}, {1, 1, 1}, {2, 2, 2}), false},  // dilation 2
        {2, 6, 3, {3, 3, 5}, volume_window({1, 3, 2}, {2, 1, 2}, {1, 2, 1}), true},   // mixed per dimension
        {1, 17, 19, {4, 5, 3}, volume_window({3, 3, 3}), true},                       // odd channel counts
        {2, 16, 32, {6, 6, 6}, volume_window({3, 3, 3}), true},                       // blocked layouts' channels
        {1, 4, 16, {8, 8, 8}, volume_window({3, 3, 3}), true},                        // CosmoFlow's first layer
        {2, 32, 16, {3, 4, 5}, volume_window({3, 3, 3}, {2, 2, 2}), false},           // stride 2, more channels
        {1, 3, 5, {4, 4, 4}, volume_window({1, 1, 1}), false},                        // 1x1x1
        {2, 8, 8, {3, 3, 4}, volume_window({2, 2, 2}, {2, 2, 2}), true},              // even kernel, stride 2
        {1, 256, 32, {3, 4, 4}, volume_window({3, 3, 3}), true},                      // CosmoFlow's last layers
    };
    return problems;
}

// Windows of one tap and a stride above 1 along some dimension, which the kernels run as a stride-1
// convolution of the places read (ResNet's downsampling 1x1 convolutions): channels in 16-channel blocks and
// not, odd extents, strides of 2 and 3, and one tap along one dimension only.
const std::vector<ConvProblem>& strided_1x1_problems() {
    static const std::vector<ConvProblem> problems = {
        {2, 64, 128, 7, 7, window(1, 1, 2, 2), false},      // layer4.0.downsample.0's shape, fewer channels
        {1, 17, 19, 5, 6, window(1, 1, 2, 2), true},        // odd channel counts and extents
        {2, 16, 24, 4, 5, window(1, 1, 3, 2), true},        // strides 3 and 2
        {1, 8, 8, 3, 4, window(1, 3, 2, 1), false},         // one tap along rows only
        {2, 32, 16, 3, 3, window(1, 1, 2, 2, 2, 3), true},  // dilation, which one tap never uses
    };
    return problems;
}

const std::vector<VolumeConvProblem>& strided_1x1_volume_problems() {
    static const std::vector<VolumeConvProblem> problems = {
        {2, 32, 48, {3, 4, 5}, volume_window({1, 1, 1}, {2, 2, 2}), true},
        {1, 16, 16, {3, 3, 3}, volume_window({1, 1, 1}, {2, 1, 2}), false},  // stride 1 along one dimension
        {1, 5, 7, {3, 3, 4}, volume_window({1, 3, 1}, {2, 1, 3}), true},     // three taps along one
    };
    return problems;
}

// y {n, k} = x times w {k, features}: x is an image {n, c, {h, w}} or a vector {n, c} (fc after fc).
struct FcProblem {
    Dims x;
    std::int64_t k;
    bool bias;
};

void check_fc(const FcProblem& p, Layout layout, std::mt19937& rng) {
    const Dims& xd = p.x;
    std::string what = "fc n=" + std::to_string(xd.n) + " x=" + std::to_string(xd.c);
    for (std::int64_t e : xd.space) what += "x" + std::to_string(e);
    what += " k=" + std::to_string(p.k) + (p.bias ? " bias" : " no-bias") + " layout=" + name(layout);
    INFO(what);
    const Dims yd{xd.n, p.k, {}}, wd{p.k, xd.c * xd.points(), {}};
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

// As check_conv, with the places of x at its ends that `zeros` names (each cut to what the window reaches)
// zero and told to oneDNN as padding (Window::zeros), which it may add in their place; the reference reads
// the zeros. In dx those places hold zero, and the rest the reference's gradient.
void check_padded_conv(const Dims& yd, std::int64_t c, Window win, std::int64_t zeros, bool with_bias,
                       const std::string& what, std::mt19937& rng) {
    INFO(what << " zeros=" << zeros);
    Dims xd{yd.n, c, yd.space};
    for (int d = 0; d < yd.rank(); ++d) xd.space[d] = win.input_extent(d, yd.space[d]);
    win.zeros = Margins::filled(yd.rank(), {});
    for (int d = 0; d < yd.rank(); ++d) {
        const std::int64_t reach = win.input_extent(d, 1), cut = std::min(zeros, reach - 1);
        if (xd.space[d] - 2 * cut >= 1) win.zeros[d] = {cut, d % 2 == 0 ? cut : 0};  // one-sided along some
    }
    Window plain = win;
    plain.zeros = {};
    const Dims wd{yd.c, c, win.kernel};
    ConvKernels& ref = *reference_kernels().conv;
    ConvKernels& dnn = onednn_conv();
    const auto padding = [&](const Index& i) {
        for (int d = 0; d < i.rank(); ++d)
            if (i[d] < win.zeros[d].before || i[d] >= xd.space[d] - win.zeros[d].after) return true;
        return false;
    };

    Operand x = make_operand(xd, Layout::interior, true, rng);
    const View xv = x.view();
    for_each_place(xd.space, [&](const Index& i) {
        if (!padding(i)) return;
        for (std::int64_t n = 0; n < xd.n; ++n)
            for (std::int64_t ch = 0; ch < c; ++ch) xv.at(n, ch, i) = 0.0f;
    });
    Operand w = make_operand(wd, Layout::dense, true, rng);
    const std::vector<float> bias = random_vector(yd.c, rng);
    const float* b = with_bias ? bias.data() : nullptr;

    Operand y = make_operand(yd, Layout::interior, false, rng), y_ref = y;
    dnn.forward(x.view(), w.view(), b, y.view(), win);
    ref.forward(x.view(), w.view(), b, y_ref.view(), plain);
    require_close(y, y_ref, "forward: " + what);

    Operand dy = make_operand(yd, Layout::interior, true, rng);
    Operand dx = make_operand(xd, Layout::interior, false, rng), dx_ref = dx;
    dnn.backward_data(dy.view(), w.view(), dx.view(), win);
    ref.backward_data(dy.view(), w.view(), dx_ref.view(), plain);
    std::int64_t nonzero_padding = 0;
    const View got = dx.view(), want = dx_ref.view();
    for_each_place(xd.space, [&](const Index& i) {
        if (!padding(i)) return;
        for (std::int64_t n = 0; n < xd.n; ++n)
            for (std::int64_t ch = 0; ch < c; ++ch) {
                nonzero_padding += got.at(n, ch, i) != 0.0f;
                want.at(n, ch, i) = 0.0f;
            }
    });
    CHECK(nonzero_padding == 0);
    require_close(dx, dx_ref, "backward_data: " + what);

    check_weight_gradients(dnn, ref, x, dy, wd, with_bias, win, plain, what, rng);
}

}  // namespace

TEST_CASE("oneDNN convolution pads in place of the zeros that its window names, as the reference reads them",
          "[onednn]") {
    std::mt19937 rng(53);
    const std::int64_t zeros = GENERATE(1, 2, 3);
    for (const ConvProblem& p : conv_problems())
        check_padded_conv(Dims{p.n, p.f, {p.out_h, p.out_w}}, p.c, p.window, zeros, p.bias,
                          describe(p, Layout::interior), rng);
    for (const ConvProblem& p : strided_1x1_problems())
        check_padded_conv(Dims{p.n, p.f, {p.out_h, p.out_w}}, p.c, p.window, zeros, p.bias,
                          describe(p, Layout::interior), rng);
    for (const auto* problems : {&volume_conv_problems(), &strided_1x1_volume_problems()})
        for (const VolumeConvProblem& p : *problems)
            check_padded_conv(Dims{p.n, p.f, p.out}, p.c, p.window, zeros, p.bias,
                              "volume kernel " + text(p.window.kernel) + " stride " + text(p.window.stride), rng);
}

namespace {

// The forward with its ReLU fused against the forward and the ReLU's kernel after it, on views of tiles: bit for
// bit where the kernel fuses, nothing written where it declines. Returns whether it fused.
bool check_conv_relu(const Dims& yd, std::int64_t c, const Window& win, bool with_bias, float slope,
                     const std::string& what, std::mt19937& rng, ConvKernels& dnn = onednn_conv()) {
    INFO(what << " slope " << slope);
    Dims xd{yd.n, c, yd.space};
    for (int d = 0; d < yd.rank(); ++d) xd.space[d] = win.input_extent(d, yd.space[d]);
    Operand x = make_operand(xd, Layout::interior, true, rng);
    Operand w = make_operand(Dims{yd.c, c, win.kernel}, Layout::dense, true, rng);
    const std::vector<float> bias = random_vector(yd.c, rng);
    const float* b = with_bias ? bias.data() : nullptr;
    Operand apart = make_operand(yd, Layout::interior, false, rng), fused = apart, untouched = apart;
    dnn.forward(x.view(), w.view(), b, apart.view(), win);
    halide_activation().forward(dsl::frontend::Activation::leaky_relu, apart.view(), slope, apart.view());
    const bool did = dnn.forward_relu(x.view(), w.view(), b, slope, fused.view(), win);
    const Operand& expected = did ? apart : untouched;
    CHECK(std::equal(fused.tensor.data(), fused.tensor.data() + fused.tensor.size(), expected.tensor.data()));
    return did;
}

}  // namespace

TEST_CASE("oneDNN convolution with its ReLU fused writes what the two write one after the other", "[onednn]") {
    const float slope = GENERATE(0.0f, 0.1f);
    std::mt19937 rng(43);
    int fused = 0, problems = 0;
    for (const auto* list : {&conv_problems(), &strided_1x1_problems()})
        for (const ConvProblem& p : *list) {
            ++problems;
            fused += check_conv_relu(Dims{p.n, p.f, {p.out_h, p.out_w}}, p.c, p.window, p.bias, slope,
                                     describe(p, Layout::interior), rng);
        }
    for (const auto* list : {&volume_conv_problems(), &strided_1x1_volume_problems()})
        for (const VolumeConvProblem& p : *list) {
            ++problems;
            fused += check_conv_relu(Dims{p.n, p.f, p.out}, p.c, p.window, p.bias, slope,
                                     "volume kernel " + text(p.window.kernel), rng);
        }
    // Tiles of large samples go to oneDNN in groups of samples: never fused, as a later group could decline.
    CHECK_FALSE(check_conv_relu(Dims{2, 4, {512, 512}}, 16, window(3, 3, 1, 1), true, slope, "groups", rng));
    INFO(fused << " of " << problems << " problems fused");
    CHECK(fused * 2 > problems);
}

TEST_CASE("oneDNN convolution with bfloat16 products and its ReLU fused writes what the two write", "[onednn]") {
    ConvKernels* bf16 = onednn_conv_bfloat16();
    if (!bf16) return skip(no_bf16);
    const float slope = GENERATE(0.0f, 0.1f);
    std::mt19937 rng(47);
    for (const ConvProblem& p : conv_problems())
        check_conv_relu(Dims{p.n, p.f, {p.out_h, p.out_w}}, p.c, p.window, p.bias, slope,
                        "bfloat16 " + describe(p, Layout::interior), rng, *bf16);
}

TEST_CASE("oneDNN convolution matches the reference on views of tiles", "[onednn]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::padded, Layout::inside, Layout::channels);
    std::mt19937 rng(17 + static_cast<unsigned>(layout));
    for (const ConvProblem& p : conv_problems()) check_conv(p, layout, rng);
}

TEST_CASE("oneDNN convolution of volumes matches the reference on views of tiles", "[onednn]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::padded, Layout::inside, Layout::channels);
    std::mt19937 rng(71 + static_cast<unsigned>(layout));
    for (const VolumeConvProblem& p : volume_conv_problems()) check_conv(p, layout, rng);
}

TEST_CASE("oneDNN strided convolution of one tap matches the reference on views of tiles", "[onednn]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::padded, Layout::inside, Layout::channels);
    std::mt19937 rng(37 + static_cast<unsigned>(layout));
    for (const ConvProblem& p : strided_1x1_problems()) check_conv(p, layout, rng);
    for (const VolumeConvProblem& p : strided_1x1_volume_problems()) check_conv(p, layout, rng);
}

TEST_CASE("oneDNN convolution of tiles of large samples runs over groups of them and matches the reference",
          "[onednn]") {
    // A sample of 16 MiB or more in oneDNN's layouts is a call of its own, smaller ones share calls in groups
    // (layout_groups.hpp), the last group short: the calls' outputs, and the weight gradients added over the
    // groups, match the reference's of the whole tile.
    using dsl::scheduler::layout_group;
    REQUIRE(layout_group(Dims{3, 16, {512, 512}}, Dims{3, 16, {512, 512}}) == 1);
    REQUIRE(layout_group(Dims{2, 16, {514, 514}}, Dims{2, 4, {512, 512}}) == 1);
    REQUIRE(layout_group(Dims{5, 16, {256, 256}}, Dims{5, 16, {256, 256}}) == 4);
    REQUIRE(layout_group(Dims{4, 16, {64, 64}}, Dims{4, 16, {64, 64}}) == 4);  // small samples: one call
    std::mt19937 rng(91);
    check_conv(Dims{3, 16, {512, 512}}, 16, window(1, 1, 1, 1), true, Layout::padded, "1x1, a call per sample", rng);
    check_conv(Dims{2, 4, {512, 512}}, 16, window(3, 3, 1, 1), true, Layout::interior, "3x3, a call per sample", rng);
    check_conv(Dims{5, 16, {256, 256}}, 16, window(1, 1, 1, 1), false, Layout::dense, "1x1, groups of 4 and 1", rng);
}

TEST_CASE("oneDNN convolution with bfloat16 products matches the reference's of rounded inputs", "[onednn]") {
    // precision=bfloat16's convolutions (AVX-512 BF16): each pass's inputs rounded to bfloat16, products exact
    // and summed in float32, against the reference's double sums of the same rounded inputs.
    ConvKernels* bf16 = onednn_conv_bfloat16();
    if (!bf16) return skip(no_bf16);
    const ConvPair pair{*bf16, *reference_kernels().conv_bfloat16};
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::padded, Layout::channels);
    std::mt19937 rng(53 + static_cast<unsigned>(layout));
    for (const ConvProblem& p : conv_problems()) check_conv(p, layout, rng, pair);
    for (const VolumeConvProblem& p : volume_conv_problems()) check_conv(p, layout, rng, pair);
    for (const ConvProblem& p : strided_1x1_problems()) check_conv(p, layout, rng, pair);
}

TEST_CASE("oneDNN convolution with bfloat16 products rounds its inputs", "[onednn]") {
    // Against float32's: as far apart as bfloat16's rounding puts them (2^-9 of each input, relative), which
    // float32's own sums are not.
    ConvKernels* bf16 = onednn_conv_bfloat16();
    if (!bf16) return skip(no_bf16);
    std::mt19937 rng(59);
    const Dims xd{2, 16, {10, 12}}, wd{8, 16, {3, 3}}, yd{2, 8, {8, 10}};
    Window win;
    win.kernel = {3, 3}, win.stride = {1, 1}, win.dilation = {1, 1};
    Operand x = make_operand(xd, Layout::dense, true, rng), w = make_operand(wd, Layout::dense, true, rng);
    Operand y = make_operand(yd, Layout::dense, false, rng), y32 = y;
    bf16->forward(x.view(), w.view(), nullptr, y.view(), win);
    onednn_conv().forward(x.view(), w.view(), nullptr, y32.view(), win);
    double scale = 0.0, apart = 0.0;
    for (std::int64_t i = 0; i < y.tensor.size(); ++i) {
        scale = std::max(scale, std::abs(double(y32.tensor.data()[i])));
        apart = std::max(apart, std::abs(double(y.tensor.data()[i]) - double(y32.tensor.data()[i])));
    }
    CHECK(apart > 1e-4 * scale);
    CHECK(apart < 2e-2 * scale);
}

TEST_CASE("oneDNN convolution follows new data on cached problems", "[onednn]") {
    // The same problems again and again, interleaved, as a training step repeats them: each call must use
    // its own buffers, not the ones the cached primitive first ran on.
    std::mt19937 rng(5);
    for (int step = 0; step < 3; ++step) {
        check_conv(conv_problems()[0], Layout::interior, rng);
        check_conv(conv_problems()[2], Layout::inside, rng);
        check_conv(conv_problems()[0], Layout::dense, rng);
        check_conv(volume_conv_problems()[0], Layout::inside, rng);
        check_conv(volume_conv_problems()[6], Layout::dense, rng);
        check_conv(strided_1x1_problems()[0], Layout::inside, rng);  // zeroes dx on each call
    }
}

TEST_CASE("oneDNN convolution uses the weights of its previous call again only when told, and only right after it",
          "[onednn]") {
    // Two parts of one layer's output, as an overlapped layer's interior and strip: different problems over
    // the same weights, which oneDNN takes in a blocked layout (16 and 32 channels), so that there is a
    // reorder of them to keep.
    std::mt19937 rng(23);
    Window win = window(3, 3, 1, 1);
    const Dims ya{2, 32, {6, 5}}, yb{2, 32, {2, 5}};
    auto input = [&](const Dims& y) {
        Dims x{y.n, 16, y.space};
        for (int d = 0; d < 2; ++d) x.space[d] = win.input_extent(d, y.space[d]);
        return make_operand(x, Layout::interior, true, rng);
    };
    Operand xa = input(ya), xb = input(yb);
    Operand w = make_operand(Dims{32, 16, win.kernel}, Layout::dense, true, rng);
    const Operand first = w, second = make_operand(w.dims, Layout::dense, true, rng);
    ConvKernels& dnn = onednn_conv();
    ConvKernels& ref = *reference_kernels().conv;
    // b's output from the weights in w's buffer now, and from `expected`'s, which must be the same.
    auto part_b = [&](const Window& window, const Operand& expected) {
        Operand y = make_operand(yb, Layout::interior, false, rng), y_ref = y, weights = expected;
        dnn.forward(xb.view(), w.view(), nullptr, y.view(), window);
        ref.forward(xb.view(), weights.view(), nullptr, y_ref.view(), win);
        require_close(y, y_ref, "part b");
    };
    auto part_a = [&] {
        Operand y = make_operand(ya, Layout::interior, false, rng);
        dnn.forward(xa.view(), w.view(), nullptr, y.view(), win);
    };
    Window again = win;
    again.same_weights = true;

    part_a();    // with the first weights
    w = second;  // the same buffer's values change (an update)
    part_b(win, second);
    part_a();
    part_b(again, second);  // what part a made of the weights is what b reads
    part_a();
    w = first;  // told the weights are the same, wrongly: what shows that they are used again
    part_b(again, second);
    // Any other primitive between the two: the weights are reordered again, whatever the window says.
    part_a();
    Operand dy = make_operand(ya, Layout::interior, true, rng),
            dx = make_operand(xa.dims, Layout::interior, false, rng);
    dnn.backward_data(dy.view(), w.view(), dx.view(), win);
    w = second;
    part_b(again, second);
}

TEST_CASE("Weights in 16 x 16 blocks lie where their layout says, and come back plain", "[onednn]") {
    const Dims w{32, 48, {3, 2}};
    const std::int64_t taps = 6;
    std::vector<float> plain(static_cast<std::size_t>(w.elements())), blocked(plain.size()), back(plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<float>(i);
    block_weights(w, plain.data(), blocked.data());
    for (std::int64_t f = 0; f < w.n; ++f)
        for (std::int64_t c = 0; c < w.c; ++c)
            for (std::int64_t t = 0; t < taps; ++t) {
                const auto b =
                    static_cast<std::size_t>((((f / 16 * 3 + c / 16) * taps + t) * 16 + c % 16) * 16 + f % 16);
                REQUIRE(blocked[b] == plain[static_cast<std::size_t>((f * w.c + c) * taps + t)]);
            }
    unblock_weights(w, blocked.data(), back.data());
    CHECK(back == plain);
    CHECK(has_weight_blocks(Dims{16, 16, {1, 1}}));
    CHECK_FALSE(has_weight_blocks(Dims{32, 18, {3, 3}}));
    CHECK_FALSE(has_weight_blocks(Dims{8, 16, {3, 3}}));
}

TEST_CASE("oneDNN convolution reads and writes weights in blocks where its window says so", "[onednn]") {
    ConvKernels& dnn = onednn_conv();
    ConvKernels& ref = *reference_kernels().conv;
    // Images' weights of 16-channel blocks in and out, f32: the layout the trainer keeps them in, where the CPU's
    // convolutions take them (AVX-512's); the kernels read and write them all the same elsewhere, below.
    CHECK(dnn.blocks_weights(Dims{32, 16, {3, 3}}) == onednn_blocks16());
    CHECK_FALSE(dnn.blocks_weights(Dims{32, 18, {3, 3}}));
    CHECK_FALSE(dnn.blocks_weights(Dims{32, 16, {3, 3, 3}}));
    CHECK_FALSE(ref.blocks_weights(Dims{32, 16, {3, 3}}));
    std::mt19937 rng(31);
    const std::vector<ConvProblem> problems = {
        {2, 16, 32, 8, 8, window(3, 3, 1, 1), true},      // 3x3
        {2, 32, 16, 7, 9, window(3, 3, 2, 2), false},     // stride 2
        {1, 32, 64, 5, 6, window(1, 1, 1, 1), true},      // 1x1: the forward's own 1x1 layout
        {2, 16, 16, 4, 4, window(1, 1, 2, 2), false},     // strided 1x1, gathered
        {5, 16, 16, 256, 256, window(1, 1, 1, 1), true},  // large samples: groups of 4 and 1
    };
    for (const ConvProblem& p : problems)
        for (const Layout layout : {Layout::dense, Layout::interior}) check_conv(p, layout, rng, float32_pair(), true);
    // The kernels with bfloat16 products keep float32 weights in the same blocks, and reorder them from there.
    ConvKernels* bf16 = onednn_conv_bfloat16();
    if (!bf16) return skip(no_bf16);
    CHECK(bf16->blocks_weights(Dims{32, 16, {3, 3}}));
    const ConvPair pair{*bf16, *reference_kernels().conv_bfloat16};
    for (const ConvProblem& p : problems)
        for (const Layout layout : {Layout::dense, Layout::interior}) check_conv(p, layout, rng, pair, true);
}

TEST_CASE("oneDNN convolution rejects an input that does not match its window", "[onednn]") {
    Tensor x(Dims{1, 2, {6, 6}}), w(Dims{3, 2, {3, 3}}), y(Dims{1, 3, {5, 4}});  // 6x6 input gives 4x4 outputs
    const Window win = window(3, 3, 1, 1, 1, 1);
    CHECK_THROWS_AS(onednn_conv().forward(x.interior(), w.interior(), nullptr, y.interior(), win), dsl::InternalError);
    CHECK_THROWS_AS(onednn_conv().backward_data(y.interior(), w.interior(), x.interior(), win), dsl::InternalError);
    Tensor wrong_w(Dims{3, 2, {3, 1}});
    Tensor y_ok(Dims{1, 3, {4, 4}});
    CHECK_THROWS_AS(onednn_conv().backward_weights(x.interior(), y_ok.interior(), wrong_w.interior(), nullptr, win),
                    dsl::InternalError);
    // Volumes: a window of an image, and an input of the wrong depth.
    Tensor vx(Dims{1, 2, {6, 6, 6}}), vw(Dims{3, 2, {3, 3, 3}}), vy(Dims{1, 3, {4, 4, 4}}),
        vy_wrong(Dims{1, 3, {3, 4, 4}});
    CHECK_THROWS_AS(onednn_conv().forward(vx.interior(), vw.interior(), nullptr, vy.interior(), win),
                    dsl::InternalError);
    const Window vwin = volume_window({3, 3, 3});
    CHECK_NOTHROW(onednn_conv().forward(vx.interior(), vw.interior(), nullptr, vy.interior(), vwin));
    CHECK_THROWS_AS(onednn_conv().forward(vx.interior(), vw.interior(), nullptr, vy_wrong.interior(), vwin),
                    dsl::InternalError);
}

TEST_CASE("oneDNN fully connected layer matches the reference on views of tiles", "[onednn]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::channels);
    std::mt19937 rng(29 + static_cast<unsigned>(layout));
    const std::vector<FcProblem> problems = {
        {{3, 4, {5, 6}}, 7, true},      {{2, 10, {1, 1}}, 5, false},      {{5, 3, {3, 2}}, 11, true},
        {{1, 16, {4, 4}}, 10, true},    {{7, 1, {1, 1}}, 1, false},       {{4, 64, {2, 2}}, 33, true},
        {{3, 12, {}}, 6, true},         {{2, 40, {}}, 3, false},          {{3, 4, {2, 3, 5}}, 7, true},
        {{2, 16, {2, 2, 2}}, 5, false}, {{1, 256, {1, 1, 1}}, 128, true},
    };
    for (const FcProblem& p : problems) check_fc(p, layout, rng);
}

TEST_CASE("oneDNN fully connected layer rejects mismatched weights", "[onednn]") {
    Tensor x(Dims{2, 3, {2, 2}}), w(Dims{5, 11, {}}), y(Dims{2, 5, {}});
    CHECK_THROWS_AS(onednn_fc().forward(x.interior(), w.interior(), nullptr, y.interior()), dsl::InternalError);
}
