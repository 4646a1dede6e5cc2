// What the GPU kernel tests share (test_gpu_kernels.cpp, and test_gpu_volumes.cpp with the cases only for
// volumes): the kernel sets, device memory and host tiles copied to it with their layout, the comparison of
// tiles that shows NaN and sentinels in the wrong places, names for messages, volumes' windows, and the checks
// of convolutions, transposed convolutions and upsampling (of images and of volumes, whose problems both files run) and
// of pooling on both kernel sets.
#pragma once

#include <dsl/backend/gpu.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/synthetic.hpp>
#include <dsl/backend/tensor.hpp>

#include "../../backend/src/kernels/rounded_conv.hpp"
#include "../../backend/src/tensors/narrow.hpp"
#include "../kernel_layouts.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsl::backend;

inline Kernels gpu() { return gpu_kernels(); }  // default options: no TF32
inline Memory& device() { return *gpu_kernels().memory; }
inline Kernels reference() { return reference_kernels(); }

// A buffer of device memory, released when it goes.
class DeviceArray {
public:
    explicit DeviceArray(std::int64_t size) : size_(size), data_(device().allocate(size)) {}
    explicit DeviceArray(const std::vector<float>& host) : DeviceArray(static_cast<std::int64_t>(host.size())) {
        device().upload(host.data(), data_, size_);
    }
    ~DeviceArray() { device().release(data_); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    float* data() const { return data_; }
    std::vector<float> download() const {
        std::vector<float> host(static_cast<std::size_t>(size_));
        device().download(data_, host.data(), size_);
        return host;
    }

private:
    std::int64_t size_;
    float* data_;
};

// A host tile (margins included) and its copy in device memory with the same layout, so that a view of one
// is at the same offset in the other. It refers to the host tile, whose views it translates: a copy would
// put them at another address.
struct Tile {
    const Tensor& host;
    DeviceArray memory;

    explicit Tile(const Tensor& t) : host(t), memory(host.size()) {
        device().upload(host.data(), memory.data(), host.size());
    }
    explicit Tile(Tensor&&) = delete;

    // The device view at the place of `v`, a view of `host`.
    View on_device(ConstView v) const {
        const std::int64_t offset = v.base - host.data();
        REQUIRE(offset >= 0);
        REQUIRE(offset < host.size());
        return View{memory.data() + offset, v.dims, v.stride_n, v.stride_c, v.stride};
    }
    View interior() const { return on_device(host.interior()); }
    // The host tile with the device's elements.
    Tensor download() const {
        Tensor t = host;
        device().download(memory.data(), t.data(), t.size());
        return t;
    }
};

// Two tiles that started equal, margins included: NaN and sentinels exactly where the expected has them, and
// every other element within `tolerance` of the expected, relative to the larger of its magnitude and `floor`
// (the largest expected magnitude when `floor` is negative: sums whose terms cancel); 0 asks for equality.
inline void require_close(const Tensor& got, const Tensor& expected, const std::string& what, double tolerance,
                          double floor = 1e-6) {
    REQUIRE(got.size() == expected.size());
    const float* g = got.data();
    const float* e = expected.data();
    double scale = 0.0;
    for (std::int64_t i = 0; i < expected.size(); ++i)
        if (!std::isnan(e[i]) && e[i] != sentinel) scale = std::max(scale, std::abs(double(e[i])));
    if (floor < 0.0) floor = scale;
    std::int64_t nans = 0, sentinels = 0, bad = 0;
    double worst = 0.0;
    for (std::int64_t i = 0; i < expected.size(); ++i) {
        if (std::isnan(g[i]) != std::isnan(e[i])) ++nans;
        if ((g[i] == sentinel) != (e[i] == sentinel)) ++sentinels;
        if (std::isnan(g[i]) || std::isnan(e[i])) continue;
        const double error = std::abs(double(g[i]) - double(e[i]));
        worst = std::max(worst, error);
        if (error > tolerance * std::max(std::abs(double(e[i])), floor)) ++bad;
    }
    INFO(what << ": largest error " << worst << ", largest magnitude " << scale);
    CHECK(nans == 0);
    CHECK(sentinels == 0);
    CHECK(bad == 0);
}

inline void require_close(const std::vector<float>& got, const std::vector<float>& expected, const std::string& what,
                          double tolerance, double floor = 1e-6) {
    REQUIRE(got.size() == expected.size());
    Tensor g(Dims{1, static_cast<std::int64_t>(got.size()), {}}), e = g;
    std::copy(got.begin(), got.end(), g.data());
    std::copy(expected.begin(), expected.end(), e.data());
    require_close(g, e, what, tolerance, floor);
}

inline void require_close(const std::vector<double>& got, const std::vector<double>& expected, const std::string& what,
                          double tolerance) {
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO(what << " [" << i << "]");
        CHECK(got[i] == Approx(expected[i]).epsilon(tolerance).margin(tolerance));
    }
}

// "2x3x5x7", for messages.
inline std::string text(const Dims& d) {
    std::string s = std::to_string(d.n) + "x" + std::to_string(d.c);
    for (std::int64_t e : d.space) s += "x" + std::to_string(e);
    return s;
}

// "3x3x3", for messages.
inline std::string text(const Index& i) {
    std::string s;
    for (std::int64_t e : i) s += (s.empty() ? "" : "x") + std::to_string(e);
    return s;
}

// A volume's window: kernel, stride and dilation per dimension (depth, rows, columns).
inline Window volume_window(Index kernel, Index stride, Index dilation = {1, 1, 1}) {
    Window w;
    w.kernel = kernel;
    w.stride = stride;
    w.dilation = dilation;
    return w;
}

// Forward, backward-data and backward-weights of the convolution of x (xd) with w (wd) into y (yd), of images
// or volumes, on both kernel sets, twice on the GPU: the first call times cuDNN's algorithms, the second runs
// the plan it chose.
// The elements of view `v` of `host` that are not 16-bit values of precision `p` in `got` (a copy of `host`).
inline std::int64_t not_16_bit(const Tensor& got, const Tensor& host, ConstView v, dsl::scheduler::Precision p) {
    const bool bfloat = p == dsl::scheduler::Precision::bfloat16;
    const std::int64_t w = row_length(v.dims);
    std::int64_t bad = 0;
    for_each_row(v, [&](std::int64_t, std::int64_t, const Index&, const float* row) {
        const float* g = got.data() + (row - host.data());
        for (std::int64_t i = 0; i < w; ++i) bad += from_16(to_16(g[i], bfloat), bfloat) != g[i];
    });
    return bad;
}

// The GPU's convolutions against the reference's, in float32; or, of precision `p` bfloat16 or float16,
// cuDNN's 16-bit kernels against the reference's of rounded inputs (exact products, double sums): each
// result rounded to 16 bits (checked where no bias is added after), so a 16-bit step from the reference's
// where the two sums fall either side of a rounding boundary.
inline void check_conv(const Dims& xd, const Dims& wd, const Dims& yd, const Window& win, bool has_bias, Layout layout,
                       bool strided_weights, std::mt19937& rng,
                       dsl::scheduler::Precision p = dsl::scheduler::Precision::float32) {
    const bool sixteen = p != dsl::scheduler::Precision::float32;
    ConvKernels& conv = sixteen ? *gpu().conv16(p) : *gpu().conv;
    const std::unique_ptr<ConvKernels> rounded = rounded_to(*reference().conv, p);
    ConvKernels& expected = sixteen ? *rounded : *reference().conv;
    // Weights as a channel range of a bigger filter bank: not dense, so they go through scratch.
    const Layout weights = strided_weights ? Layout::channels : Layout::dense;
    // Convolution sums have terms that cancel: errors are measured against the largest output. A 16-bit
    // step is 2^-8 of a value in bfloat16, 2^-11 in float16.
    const double tolerance = !sixteen                                   ? 1e-4
                             : p == dsl::scheduler::Precision::bfloat16 ? 0x1p-7
                                                                        : 0x1p-10,
                 scale = -1.0;

    Operand x = make_operand(xd, layout, true, rng), w = make_operand(wd, weights, true, rng);
    const Tile x_dev(x.tensor), w_dev(w.tensor);
    const std::vector<float> bias = random_vector(yd.c, rng);
    const DeviceArray bias_dev(bias);

    Operand y = make_operand(yd, layout, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    expected.forward(x.view(), w.view(), has_bias ? bias.data() : nullptr, y_ref.view(), win);
    for (int run = 0; run < 2; ++run) {
        conv.forward(x_dev.on_device(x.view()), w_dev.on_device(w.view()), has_bias ? bias_dev.data() : nullptr,
                     y_dev.on_device(y.view()), win);
        const Tensor got = y_dev.download();
        require_close(got, y_ref.tensor, "forward " + std::to_string(run), tolerance, scale);
        if (sixteen && !has_bias) CHECK(not_16_bit(got, y.tensor, y.view(), p) == 0);
    }

    Operand dy = make_operand(yd, layout, true, rng), dx = make_operand(xd, layout, false, rng), dx_ref = dx;
    const Tile dy_dev(dy.tensor), dx_dev(dx.tensor);
    expected.backward_data(dy.view(), w.view(), dx_ref.view(), win);
    for (int run = 0; run < 2; ++run) {
        conv.backward_data(dy_dev.on_device(dy.view()), w_dev.on_device(w.view()), dx_dev.on_device(dx.view()), win);
        const Tensor got = dx_dev.download();
        require_close(got, dx_ref.tensor, "backward_data " + std::to_string(run), tolerance, scale);
        if (sixteen) CHECK(not_16_bit(got, dx.tensor, dx.view(), p) == 0);
    }

    Operand dw = make_operand(wd, weights, false, rng), dw_ref = dw;
    const Tile dw_dev(dw.tensor);
    std::vector<float> db_ref(static_cast<std::size_t>(yd.c), sentinel);
    const DeviceArray db_dev(db_ref);
    expected.backward_weights(x.view(), dy.view(), dw_ref.view(), has_bias ? db_ref.data() : nullptr, win);
    for (int run = 0; run < 2; ++run) {
        conv.backward_weights(x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), dw_dev.on_device(dw.view()),
                              has_bias ? db_dev.data() : nullptr, win);
        const Tensor got = dw_dev.download();
        require_close(got, dw_ref.tensor, "backward_weights dw " + std::to_string(run), tolerance, scale);
        if (sixteen) CHECK(not_16_bit(got, dw.tensor, dw.view(), p) == 0);
        require_close(db_dev.download(), db_ref, "backward_weights db " + std::to_string(run), tolerance, scale);
    }
}

inline void check_conv(const ConvProblem& p, Layout layout, bool strided_weights, std::mt19937& rng,
                       dsl::scheduler::Precision precision = dsl::scheduler::Precision::float32) {
    const std::string what = describe(p, layout, strided_weights);
    INFO(what);
    const Window& win = p.window;
    const Dims xd{p.n, p.c, {win.input_extent(0, p.out_h), win.input_extent(1, p.out_w)}};
    const Dims yd{p.n, p.f, {p.out_h, p.out_w}};
    const Dims wd{p.f, p.c, {win.kernel[0], win.kernel[1]}};
    check_conv(xd, wd, yd, win, p.bias, layout, strided_weights, rng, precision);
}

// A volume's convolution: n samples, c channels in, f out, the output's extents.
struct VolumeConvProblem {
    std::int64_t n, c, f;
    Index out;
    Window window;
    bool bias;
};

inline const std::vector<VolumeConvProblem>& volume_conv_problems() {
    static const std::vector<VolumeConvProblem> problems = {
        {2, 3, 5, {4, 5, 6}, volume_window({3, 3, 3}, {1, 1, 1}), true},
        {1, 4, 6, {3, 5, 4}, volume_window({1, 3, 2}, {1, 1, 1}), false},             // a kernel of 1, 3 and 2
        {2, 5, 4, {3, 4, 3}, volume_window({3, 3, 3}, {2, 2, 2}), true},              // stride 2
        {2, 3, 7, {3, 4, 5}, volume_window({3, 3, 3}, {1, 1, 1}, {2, 2, 2}), false},  // dilation 2
        {1, 6, 3, {2, 5, 3}, volume_window({1, 3, 3}, {2, 1, 2}, {1, 2, 1}), true},   // mixed per dimension
        {2, 16, 32, {8, 8, 8}, volume_window({3, 3, 3}, {1, 1, 1}), true},            // channels blocked layouts like
        {2, 3, 5, {4, 4, 4}, volume_window({1, 1, 1}, {1, 1, 1}), false},             // 1x1x1
        {2, 8, 8, {2, 3, 4}, volume_window({2, 2, 2}, {2, 2, 2}), true},              // even kernel, stride 2
        {1, 2, 4, {3, 6, 7}, volume_window({5, 5, 5}, {1, 2, 1}), true},              // a large kernel
        {3, 1, 1, {5, 1, 7}, volume_window({3, 1, 3}, {1, 1, 1}), false},             // one channel, one row
        {1, 32, 16, {6, 7, 9}, volume_window({3, 3, 3}, {2, 2, 2}), false},           // stride 2, more channels
    };
    return problems;
}

inline Dims volume_conv_input(const VolumeConvProblem& p) {
    Dims xd{p.n, p.c, p.out};
    for (int k = 0; k < 3; ++k) xd.space[k] = p.window.input_extent(k, p.out[k]);
    return xd;
}

inline void check_conv(const VolumeConvProblem& p, Layout layout, bool strided_weights, std::mt19937& rng,
                       dsl::scheduler::Precision precision = dsl::scheduler::Precision::float32) {
    const Window& w = p.window;
    INFO("volume conv n=" << p.n << " c=" << p.c << " f=" << p.f << " out=" << text(p.out)
                          << " kernel=" << text(w.kernel) << " stride=" << text(w.stride)
                          << " dilation=" << text(w.dilation) << (p.bias ? " bias" : " no-bias")
                          << " layout=" << name(layout) << (strided_weights ? " strided-weights" : ""));
    check_conv(volume_conv_input(p), Dims{p.f, p.c, w.kernel}, Dims{p.n, p.f, p.out}, w, p.bias, layout,
               strided_weights, rng, precision);
}

struct PoolCase {
    Window window;
    Dims out;
};

// Pooling forward and backward of `pc` on both kernel sets, of an image or a volume.
inline void check_pool(const PoolCase& pc, PoolKind kind, int levels) {
    const Window& w = pc.window;
    Dims in = pc.out;
    for (int k = 0; k < in.rank(); ++k) in.space[k] = w.input_extent(k, pc.out.space[k]);
    INFO("pool kernel " << text(w.kernel) << " stride " << text(w.stride) << " dilation " << text(w.dilation) << " out "
                        << text(pc.out) << (kind == PoolKind::max ? " max" : " average") << " levels " << levels);
    std::mt19937 rng(61);

    Operand x = make_operand(in, Layout::channels, true, rng, levels),
            dy = make_operand(pc.out, Layout::interior, true, rng);
    const Tile x_dev(x.tensor), dy_dev(dy.tensor);

    Operand y = make_operand(pc.out, Layout::interior, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    reference().pool->forward(kind, x.view(), y_ref.view(), w);
    gpu().pool->forward(kind, x_dev.on_device(x.view()), y_dev.on_device(y.view()), w);
    require_close(y_dev.download(), y_ref.tensor, "pool forward", kind == PoolKind::max ? 0.0 : 1e-6);

    Operand dx = make_operand(in, Layout::interior, false, rng), dx_ref = dx;
    const Tile dx_dev(dx.tensor);
    reference().pool->backward(kind, x.view(), dy.view(), dx_ref.view(), w);
    gpu().pool->backward(kind, x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), dx_dev.on_device(dx.view()), w);
    require_close(dx_dev.download(), dx_ref.tensor, "pool backward", 1e-6);
}

// Forward and backward of the upsampling `u` of x (xd) into y (yd), of images or volumes, on both kernel sets.
// The GPU's synthetic inputs (or, with `targets`, float targets) of a tile of `dims` inside a tile with
// margins, from global sample `sample0` and place `at`, against the host's. The GPU's sines and cosines (and
// the targets' exponential) may differ from the host's in a double's last bits: a float's last bit at most.
inline void check_synthetic(const SyntheticData& data, bool targets, const Dims& dims, std::int64_t sample0,
                            const Index& at, std::mt19937& rng) {
    Operand tile = make_operand(dims, Layout::interior, false, rng), expected = tile;
    const Tile on_device(tile.tensor);
    if (targets) {
        gpu().synthetic->targets(data, sample0, at, on_device.on_device(tile.view()));
        data.fill_targets(sample0, at, expected.view());
    } else {
        gpu().synthetic->inputs(data, sample0, at, on_device.on_device(tile.view()));
        data.fill_inputs(sample0, 0, at, expected.view());
    }
    require_close(on_device.download(), expected.tensor, targets ? "synthetic targets" : "synthetic inputs", 1e-6,
                  -1.0);
    // The host wrote every element of the tile, and only those (its margins keep the sentinel).
    CHECK(std::count_if(expected.tensor.data(), expected.tensor.data() + expected.tensor.size(),
                        [](float v) { return v != sentinel; }) == dims.elements());
}

inline void check_upsample(const Dims& xd, const Dims& yd, const Upsample& u, std::mt19937& rng) {
    Operand x = make_operand(xd, Layout::interior, true, rng), dy = make_operand(yd, Layout::channels, true, rng);
    const Tile x_dev(x.tensor), dy_dev(dy.tensor);
    Operand y = make_operand(yd, Layout::interior, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    reference().upsample->forward(u, x.view(), y_ref.view());
    gpu().upsample->forward(u, x_dev.on_device(x.view()), y_dev.on_device(y.view()));
    // Linear weights mix inputs of either sign, so an output near zero is a difference of larger terms, and
    // the GPU fuses each product into an add (one rounding, not two): within 1e-6 of the largest output.
    require_close(y_dev.download(), y_ref.tensor, "upsample forward", 1e-6, -1.0);

    Operand dx = make_operand(xd, Layout::channels, false, rng), dx_ref = dx;
    const Tile dx_dev(dx.tensor);
    reference().upsample->backward(u, dy.view(), dx_ref.view());
    gpu().upsample->backward(u, dy_dev.on_device(dy.view()), dx_dev.on_device(dx.view()));
    require_close(dx_dev.download(), dx_ref.tensor, "upsample backward", 1e-5, -1.0);
}

// Forward, backward-data and backward-weights of the transposed convolution `d` of x (xd) with w (wd) into y
// (yd), of images or volumes, on both kernel sets.
inline void check_deconv(const Dims& xd, const Dims& wd, const Dims& yd, const Deconv& d, std::mt19937& rng) {
    Operand x = make_operand(xd, Layout::interior, true, rng), dy = make_operand(yd, Layout::channels, true, rng);
    Operand w = make_operand(wd, Layout::dense, true, rng);
    const Tile x_dev(x.tensor), dy_dev(dy.tensor), w_dev(w.tensor);
    const std::vector<float> bias = random_vector(yd.c, rng);
    const DeviceArray bias_dev(bias);

    Operand y = make_operand(yd, Layout::interior, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    reference().deconv->forward(x.view(), w.view(), bias.data(), y_ref.view(), d);
    gpu().deconv->forward(x_dev.on_device(x.view()), w_dev.on_device(w.view()), bias_dev.data(),
                          y_dev.on_device(y.view()), d);
    require_close(y_dev.download(), y_ref.tensor, "deconv forward", 1e-5, -1.0);

    Operand dx = make_operand(xd, Layout::channels, false, rng), dx_ref = dx;
    const Tile dx_dev(dx.tensor);
    reference().deconv->backward_data(dy.view(), w.view(), dx_ref.view(), d);
    gpu().deconv->backward_data(dy_dev.on_device(dy.view()), w_dev.on_device(w.view()), dx_dev.on_device(dx.view()), d);
    require_close(dx_dev.download(), dx_ref.tensor, "deconv backward_data", 1e-5, -1.0);

    Operand dw = make_operand(wd, Layout::dense, false, rng), dw_ref = dw;
    const Tile dw_dev(dw.tensor);
    std::vector<float> db_ref(bias.size());
    const DeviceArray db_dev(static_cast<std::int64_t>(bias.size()));
    reference().deconv->backward_weights(x.view(), dy.view(), dw_ref.view(), db_ref.data(), d);
    gpu().deconv->backward_weights(x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), dw_dev.on_device(dw.view()),
                                   db_dev.data(), d);
    require_close(dw_dev.download(), dw_ref.tensor, "deconv backward_weights", 1e-5, -1.0);
    require_close(db_dev.download(), db_ref, "deconv bias gradient", 1e-5, -1.0);
}

}  // namespace
