// The GPU kernel set against the reference kernels, on views of tiles with margins in device memory: every
// operand is made on the host, copied to the device with the same padded layout, and compared after the
// kernels ran on both. Inputs' margins hold NaN (reading them shows) and outputs' a sentinel (writing them
// shows). Images, vectors and volumes alike: every kind has cases of each rank it takes, and those only for
// volumes are in test_gpu_volumes.cpp (the tiles, comparisons and checks both use are in gpu_checks.hpp).
#include <dsl/backend/gpu.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/synthetic.hpp>
#include <dsl/backend/tensor.hpp>

#include "gpu_checks.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace dsl::backend;

namespace {

// Operands and their copies in device memory: the views of both, for kernels that take several.
struct Operands {
    std::vector<std::unique_ptr<Tile>> tiles;
    std::vector<ConstView> views, views_dev;
    explicit Operands(std::vector<Operand>& xs) {
        for (Operand& x : xs) {
            tiles.push_back(std::make_unique<Tile>(x.tensor));
            views.push_back(x.view());
            views_dev.push_back(tiles.back()->on_device(x.view()));
        }
    }
};

const std::vector<Dims> shapes = {{1, 1, {1, 1}}, {2, 3, {5, 7}}, {1, 4, {9, 17}}, {3, 2, {16, 8}}, {2, 5, {1, 33}}};

// Shapes that need many blocks, several reduction chunks per channel and the four-element rows.
const std::vector<Dims> big_shapes = {{2, 3, {150, 130}}, {8, 4, {64, 64}}, {2, 70, {16, 16}}, {3, 200, {5, 7}}};

// Vectors [N, K], without spatial dimensions: planes of 1 x 1 to the kernels.
const std::vector<Dims> vector_shapes = {{1, 1, {}}, {4, 10, {}}, {3, 1000, {}}};

// Volumes {n, c, {d, h, w}}: uneven extents, a depth of one, single rows and columns.
const std::vector<Dims> volume_shapes = {{1, 1, {1, 1, 1}}, {2, 3, {3, 5, 7}},  {1, 4, {4, 9, 17}},
                                         {2, 2, {1, 6, 5}}, {3, 2, {5, 1, 33}}, {2, 5, {6, 4, 1}}};

// Volumes that need many blocks, several reduction chunks per channel and the four-element rows.
const std::vector<Dims> big_volume_shapes = {{2, 3, {24, 40, 36}}, {1, 70, {8, 8, 8}}, {2, 4, {16, 16, 160}}};

// The small shapes, the vectors and the small volumes.
std::vector<Dims> small_shapes() {
    std::vector<Dims> all = shapes;
    all.insert(all.end(), vector_shapes.begin(), vector_shapes.end());
    all.insert(all.end(), volume_shapes.begin(), volume_shapes.end());
    return all;
}

// Every shape above, the images' and vectors' first.
std::vector<Dims> all_shapes() {
    std::vector<Dims> all = shapes;
    for (const std::vector<Dims>* more : {&vector_shapes, &big_shapes, &volume_shapes, &big_volume_shapes})
        all.insert(all.end(), more->begin(), more->end());
    return all;
}

}  // namespace

TEST_CASE("gpu kernel set: one instance, device memory", "[gpu]") {
    std::string why;
    const int devices = gpu_devices(&why);
    INFO(why);
    CHECK(gpu_built());
    CHECK(devices > 0);
    CHECK(!gpu_name().empty());
    CHECK(gpu_for_local_rank(5, 2) == 1);
    const Kernels a = gpu_kernels(), b = gpu_kernels();
    CHECK(a.conv == b.conv);
    CHECK(a.memory == b.memory);
    for (const void* k : {(const void*)a.conv, (const void*)a.batchnorm, (const void*)a.activation, (const void*)a.pool,
                          (const void*)a.fc, (const void*)a.eltwise, (const void*)a.loss, (const void*)a.memory})
        CHECK(k != nullptr);
    CHECK_FALSE(a.memory->host());
}

TEST_CASE("gpu memory allocates zeroed, copies, fills, packs and unpacks", "[gpu]") {
    std::mt19937 rng(3);
    {
        const DeviceArray zeroed(1000);
        const std::vector<float> host = zeroed.download();
        CHECK(std::all_of(host.begin(), host.end(), [](float v) { return v == 0.0f; }));
        const DeviceArray empty(0);
        CHECK(empty.data() != nullptr);
    }
    const std::vector<float> values = random_vector(4099, rng);
    const DeviceArray round_trip(values);
    CHECK(round_trip.download() == values);

    const Dims d = GENERATE(Dims{2, 3, {5, 7}}, Dims{1, 2, {150, 130}}, Dims{3, 1, {1, 1}}, Dims{3, 7, {}},
                            Dims{2, 3, {4, 5, 7}}, Dims{1, 2, {20, 30, 40}}, Dims{3, 1, {1, 1, 1}});
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::channels);
    INFO(name(layout) << " " << text(d));

    // fill writes its view only.
    Operand t = make_operand(d, layout, false, rng);
    const Tile tile(t.tensor);
    device().fill(tile.on_device(t.view()), 3.5f);
    Operand expected = t;
    const View e = expected.view();
    for_each_element(d, [&](std::int64_t n, std::int64_t c, const Index& i) { e.at(n, c, i) = 3.5f; });
    require_close(tile.download(), expected.tensor, "fill", 0.0);

    // pack: the view's elements, densely; unpack: back into a view, or added to it.
    Operand src = make_operand(d, layout, true, rng);
    const Tile src_tile(src.tensor);
    const DeviceArray packed(d.elements());
    device().pack(src_tile.on_device(src.view()), packed.data());
    Tensor dense(d);
    reference().eltwise->copy(src.view(), dense.interior());
    CHECK(packed.download() == std::vector<float>(dense.data(), dense.data() + dense.size()));

    Operand dst = make_operand(d, layout, false, rng);
    const Tile dst_tile(dst.tensor);
    device().unpack(packed.data(), dst_tile.on_device(dst.view()), false);
    Operand dst_expected = dst;
    reference().eltwise->copy(dense.interior(), dst_expected.view());
    require_close(dst_tile.download(), dst_expected.tensor, "unpack", 0.0);

    device().unpack(packed.data(), dst_tile.on_device(dst.view()), true);
    reference().eltwise->accumulate(dense.interior(), dst_expected.view());
    require_close(dst_tile.download(), dst_expected.tensor, "unpack with add", 0.0);

    // narrow and widen (16-bit storage): the host's rounding and bits, element by element.
    for (const auto p : {dsl::scheduler::Precision::bfloat16, dsl::scheduler::Precision::float16}) {
        Operand wide = make_operand(d, layout, true, rng);
        const Tile wide_tile(wide.tensor);
        const DeviceArray bits((d.elements() + 1) / 2);
        device().narrow(wide_tile.on_device(wide.view()), p, reinterpret_cast<std::uint16_t*>(bits.data()));
        Operand host = wide;
        std::vector<std::uint16_t> host_bits(static_cast<std::size_t>(d.elements()));
        dsl::backend::host_memory().narrow(host.view(), p, host_bits.data());
        require_close(wide_tile.download(), host.tensor, "narrow", 0.0);
        const std::vector<float> got = bits.download();
        std::vector<std::uint16_t> got_bits(host_bits.size());
        std::memcpy(got_bits.data(), got.data(), got_bits.size() * sizeof(std::uint16_t));
        CHECK(got_bits == host_bits);
        Operand back = make_operand(d, layout, false, rng);
        const Tile back_tile(back.tensor);
        device().widen(reinterpret_cast<const std::uint16_t*>(bits.data()), p, back_tile.on_device(back.view()));
        Operand back_expected = back;
        dsl::backend::host_memory().widen(host_bits.data(), p, back_expected.view());
        require_close(back_tile.download(), back_expected.tensor, "widen", 0.0);
    }
    device().synchronize();
}

TEST_CASE("gpu convolutions match the reference on strided views", "[gpu]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::padded, Layout::inside, Layout::channels);
    std::mt19937 rng(41);
    for (const ConvProblem& p : conv_problems()) {
        // padded and inside views need room for their margins.
        const std::int64_t in_h = p.window.input_extent(0, p.out_h), in_w = p.window.input_extent(1, p.out_w);
        if ((layout == Layout::padded || layout == Layout::inside) &&
            (in_h < 3 || in_w < 3 || p.out_h < 3 || p.out_w < 3))
            continue;
        check_conv(p, layout, false, rng);
    }
}

TEST_CASE("gpu convolutions in bfloat16 and float16 round their inputs and results, and sum in float32", "[gpu]") {
    // cuDNN's 16-bit kernels (precision=bfloat16, float16: tensor cores) on images and volumes, in every
    // layout (their operands go through dense 16-bit scratch), weights dense or not.
    const dsl::scheduler::Precision p =
        GENERATE(dsl::scheduler::Precision::bfloat16, dsl::scheduler::Precision::float16);
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::channels);
    CAPTURE(dsl::scheduler::precision_name(p));
    REQUIRE(gpu().conv16(p));
    std::mt19937 rng(47);
    for (const ConvProblem& c : conv_problems()) check_conv(c, layout, layout == Layout::channels, rng, p);
    for (const VolumeConvProblem& c : volume_conv_problems()) check_conv(c, layout, false, rng, p);
}

TEST_CASE("gpu convolutions take weights that are not dense", "[gpu]") {
    std::mt19937 rng(43);
    check_conv(conv_problems()[0], Layout::interior, true, rng);
    check_conv(conv_problems()[2], Layout::dense, true, rng);
    check_conv(volume_conv_problems()[0], Layout::interior, true, rng);
    check_conv(volume_conv_problems()[2], Layout::dense, true, rng);
}

namespace {

struct FcProblem {
    Dims x;
    std::int64_t k;
    bool bias;
};

}  // namespace

TEST_CASE("gpu fully connected layers match the reference", "[gpu]") {
    // x an image, a volume, or a vector (of 1 x 1 planes, or without spatial dimensions: another fc's output);
    // y and w are vectors.
    const FcProblem p = GENERATE(FcProblem{{3, 4, {3, 5}}, 7, true}, FcProblem{{5, 64, {1, 1}}, 10, false},
                                 FcProblem{{5, 64, {}}, 10, true}, FcProblem{{2, 16, {7, 7}}, 33, true},
                                 FcProblem{{1, 1, {1, 1}}, 1, true}, FcProblem{{3, 4, {2, 3, 5}}, 7, true},
                                 FcProblem{{2, 8, {1, 1, 1}}, 5, false}, FcProblem{{2, 16, {4, 4, 4}}, 33, true});
    const Layout layout = GENERATE(Layout::dense, Layout::interior);
    INFO("fc x " << text(p.x) << " k=" << p.k << " " << name(layout));
    std::mt19937 rng(47);
    const Dims yd{p.x.n, p.k, {}}, wd{p.k, p.x.c * p.x.points(), {}};
    Operand x = make_operand(p.x, layout, true, rng), w = make_operand(wd, Layout::dense, true, rng);
    const Tile x_dev(x.tensor), w_dev(w.tensor);
    const std::vector<float> bias = random_vector(p.k, rng);
    const DeviceArray bias_dev(bias);

    Operand y = make_operand(yd, Layout::dense, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    reference().fc->forward(x.view(), w.view(), p.bias ? bias.data() : nullptr, y_ref.view());
    gpu().fc->forward(x_dev.on_device(x.view()), w_dev.on_device(w.view()), p.bias ? bias_dev.data() : nullptr,
                      y_dev.on_device(y.view()));
    require_close(y_dev.download(), y_ref.tensor, "fc forward", 1e-4, -1.0);

    Operand dy = make_operand(yd, Layout::dense, true, rng), dx = make_operand(p.x, layout, false, rng), dx_ref = dx;
    const Tile dy_dev(dy.tensor), dx_dev(dx.tensor);
    reference().fc->backward_data(dy.view(), w.view(), dx_ref.view());
    gpu().fc->backward_data(dy_dev.on_device(dy.view()), w_dev.on_device(w.view()), dx_dev.on_device(dx.view()));
    require_close(dx_dev.download(), dx_ref.tensor, "fc backward_data", 1e-4, -1.0);

    Operand dw = make_operand(wd, Layout::dense, false, rng), dw_ref = dw;
    const Tile dw_dev(dw.tensor);
    std::vector<float> db_ref(static_cast<std::size_t>(p.k), sentinel);
    const DeviceArray db_dev(db_ref);
    reference().fc->backward_weights(x.view(), dy.view(), dw_ref.view(), p.bias ? db_ref.data() : nullptr);
    gpu().fc->backward_weights(x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), dw_dev.on_device(dw.view()),
                               p.bias ? db_dev.data() : nullptr);
    require_close(dw_dev.download(), dw_ref.tensor, "fc backward_weights dw", 1e-4, -1.0);
    require_close(db_dev.download(), db_ref, "fc backward_weights db", 1e-4, -1.0);
}

namespace {

// Every batch-norm kernel on x and dy of `d`, statistics adding into what the caller holds.
void check_batchnorm(const Dims& d, std::mt19937& rng) {
    INFO("batchnorm " << text(d));
    const auto c = static_cast<std::size_t>(d.c);
    Operand x = make_operand(d, Layout::interior, true, rng), dy = make_operand(d, Layout::channels, true, rng);
    const Tile x_dev(x.tensor), dy_dev(dy.tensor);

    std::vector<double> sum_ref(c, 1.5), sq_ref(c, -0.5), sum(c, 1.5), sq(c, -0.5);
    reference().batchnorm->statistics(x.view(), sum_ref.data(), sq_ref.data());
    gpu().batchnorm->statistics(x_dev.on_device(x.view()), sum.data(), sq.data());
    require_close(sum, sum_ref, "sum", 1e-10);
    require_close(sq, sq_ref, "sum of squares", 1e-10);

    std::vector<float> mean(c), inv_std(c);
    const std::vector<float> gamma = random_vector(d.c, rng, 0.5f, 1.5f), beta = random_vector(d.c, rng);
    const double count = double(d.n * d.points());
    for (std::size_t k = 0; k < c; ++k) {
        const double m = (sum_ref[k] - 1.5) / count;
        mean[k] = float(m);
        inv_std[k] = float(1.0 / std::sqrt(std::max((sq_ref[k] + 0.5) / count - m * m, 0.0) + 1e-5));
    }
    const DeviceArray gamma_dev(gamma), beta_dev(beta);

    Operand y = make_operand(d, Layout::interior, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    reference().batchnorm->forward(x.view(), mean.data(), inv_std.data(), gamma.data(), beta.data(), y_ref.view());
    gpu().batchnorm->forward(x_dev.on_device(x.view()), mean.data(), inv_std.data(), gamma_dev.data(), beta_dev.data(),
                             y_dev.on_device(y.view()));
    require_close(y_dev.download(), y_ref.tensor, "batchnorm forward", 1e-6);

    std::vector<double> sdy_ref(c, 0.25), sdx_ref(c, 0.0), sdy(c, 0.25), sdx(c, 0.0);
    reference().batchnorm->backward_statistics(x.view(), dy.view(), mean.data(), inv_std.data(), sdy_ref.data(),
                                               sdx_ref.data());
    gpu().batchnorm->backward_statistics(x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), mean.data(),
                                         inv_std.data(), sdy.data(), sdx.data());
    require_close(sdy, sdy_ref, "sum of dy", 1e-10);
    require_close(sdx, sdx_ref, "sum of dy * x_hat", 1e-10);

    Operand dx = make_operand(d, Layout::inside, false, rng), dx_ref = dx;
    const Tile dx_dev(dx.tensor);
    reference().batchnorm->backward(x.view(), dy.view(), mean.data(), inv_std.data(), gamma.data(), sdy_ref.data(),
                                    sdx_ref.data(), count, dx_ref.view());
    gpu().batchnorm->backward(x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), mean.data(), inv_std.data(),
                              gamma_dev.data(), sdy_ref.data(), sdx_ref.data(), count, dx_dev.on_device(dx.view()));
    require_close(dx_dev.download(), dx_ref.tensor, "batchnorm backward", 1e-6);
}

}  // namespace

TEST_CASE("gpu batch norm matches the reference", "[gpu]") {
    std::mt19937 rng(53);
    for (const Dims& d : shapes)
        if (d.space[0] >= 3 && d.space[1] >= 3) check_batchnorm(d, rng);
    for (const Dims& d : big_shapes) check_batchnorm(d, rng);
    for (const Dims& d : vector_shapes) check_batchnorm(d, rng);
    for (const Dims& d : volume_shapes)
        if (std::all_of(d.space.begin(), d.space.end(), [](std::int64_t e) { return e >= 3; })) check_batchnorm(d, rng);
    for (const Dims& d : big_volume_shapes) check_batchnorm(d, rng);
}

namespace {

// Every group-norm kernel on x and dy of `d` in `groups` groups, sums adding into what the caller holds.
void check_groupnorm(const Dims& d, std::int64_t groups, std::mt19937& rng) {
    INFO("groupnorm " << text(d) << " in " << groups);
    const auto c = static_cast<std::size_t>(d.c), stats = static_cast<std::size_t>(d.n * groups);
    Operand x = make_operand(d, Layout::interior, true, rng), dy = make_operand(d, Layout::channels, true, rng);
    const Tile x_dev(x.tensor), dy_dev(dy.tensor);

    std::vector<double> sum_ref(stats, 1.5), sq_ref(stats, -0.5), sum(stats, 1.5), sq(stats, -0.5);
    reference().groupnorm->statistics(x.view(), groups, sum_ref.data(), sq_ref.data());
    gpu().groupnorm->statistics(x_dev.on_device(x.view()), groups, sum.data(), sq.data());
    require_close(sum, sum_ref, "sum", 1e-10);
    require_close(sq, sq_ref, "sum of squares", 1e-10);

    std::vector<float> mean(stats), inv_std(stats);
    const std::vector<float> gamma = random_vector(d.c, rng, 0.5f, 1.5f), beta = random_vector(d.c, rng);
    const double count = double(d.c / groups * d.points());
    for (std::size_t k = 0; k < stats; ++k) {
        const double m = (sum_ref[k] - 1.5) / count;
        mean[k] = float(m);
        inv_std[k] = float(1.0 / std::sqrt(std::max((sq_ref[k] + 0.5) / count - m * m, 0.0) + 1e-5));
    }
    const DeviceArray gamma_dev(gamma), beta_dev(beta);

    Operand y = make_operand(d, Layout::interior, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    reference().groupnorm->forward(x.view(), groups, mean.data(), inv_std.data(), gamma.data(), beta.data(),
                                   y_ref.view());
    gpu().groupnorm->forward(x_dev.on_device(x.view()), groups, mean.data(), inv_std.data(), gamma_dev.data(),
                             beta_dev.data(), y_dev.on_device(y.view()));
    require_close(y_dev.download(), y_ref.tensor, "groupnorm forward", 1e-6);

    std::vector<double> db_ref(c, 0.25), dg_ref(c, 0.0), sg_ref(stats, 0.0), sgx_ref(stats, 1.0);
    std::vector<double> db(c, 0.25), dg(c, 0.0), sg(stats, 0.0), sgx(stats, 1.0);
    reference().groupnorm->backward_statistics(x.view(), dy.view(), groups, mean.data(), inv_std.data(), gamma.data(),
                                               db_ref.data(), dg_ref.data(), sg_ref.data(), sgx_ref.data());
    gpu().groupnorm->backward_statistics(x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), groups, mean.data(),
                                         inv_std.data(), gamma_dev.data(), db.data(), dg.data(), sg.data(), sgx.data());
    require_close(db, db_ref, "sum of dy", 1e-10);
    require_close(dg, dg_ref, "sum of dy * x_hat", 1e-10);
    require_close(sg, sg_ref, "sum of dy * gamma", 1e-10);
    require_close(sgx, sgx_ref, "sum of dy * gamma * x_hat", 1e-10);

    Operand dx = make_operand(d, Layout::inside, false, rng), dx_ref = dx;
    const Tile dx_dev(dx.tensor);
    reference().groupnorm->backward(x.view(), dy.view(), groups, mean.data(), inv_std.data(), gamma.data(),
                                    sg_ref.data(), sgx_ref.data(), count, dx_ref.view());
    gpu().groupnorm->backward(x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), groups, mean.data(),
                              inv_std.data(), gamma_dev.data(), sg_ref.data(), sgx_ref.data(), count,
                              dx_dev.on_device(dx.view()));
    require_close(dx_dev.download(), dx_ref.tensor, "groupnorm backward", 1e-6);
}

}  // namespace

TEST_CASE("gpu group norm matches the reference", "[gpu]") {
    std::mt19937 rng(54);
    const std::vector<Dims> all = all_shapes();
    for (const Dims& d : all)
        for (std::int64_t groups : {std::int64_t{1}, std::int64_t{2}, d.c})
            if (d.c % groups == 0) check_groupnorm(d, groups, rng);
}

TEST_CASE("gpu dropout matches the reference bit for bit", "[gpu]") {
    std::mt19937 rng(55);
    const std::vector<Dims> all = all_shapes();
    for (const Dims& d : all) {
        INFO("dropout " << text(d));
        DropoutMask m;
        m.key = 0x1234567;
        m.step = 5;
        m.n0 = 3, m.at = d.rank() == 0 ? Index{} : d.rank() == 3 ? Index{5, 17, 9} : Index{17, 9};
        m.p = 0.4f;
        Operand x = make_operand(d, Layout::interior, true, rng);
        const Tile x_dev(x.tensor);
        Operand y = make_operand(d, Layout::interior, false, rng), y_ref = y;
        const Tile y_dev(y.tensor);
        reference().dropout->forward(x.view(), m, y_ref.view());
        gpu().dropout->forward(x_dev.on_device(x.view()), m, y_dev.on_device(y.view()));
        require_close(y_dev.download(), y_ref.tensor, "dropout forward", 0.0);
        Operand dx = make_operand(d, Layout::inside, false, rng), dx_ref = dx;
        const Tile dx_dev(dx.tensor);
        reference().dropout->backward(x.view(), m, dx_ref.view());
        gpu().dropout->backward(x_dev.on_device(x.view()), m, dx_dev.on_device(dx.view()));
        require_close(dx_dev.download(), dx_ref.tensor, "dropout backward", 0.0);
    }
}

TEST_CASE("gpu tanh and gelu match the reference", "[gpu]") {
    std::mt19937 rng(62);
    const std::vector<Dims> all = all_shapes();
    for (const auto f : {dsl::frontend::Activation::tanh, dsl::frontend::Activation::gelu})
        for (const Dims& d : all) {
            INFO((f == dsl::frontend::Activation::tanh ? "tanh " : "gelu ") << text(d));
            Operand x = make_operand(d, Layout::interior, true, rng), dy = make_operand(d, Layout::channels, true, rng);
            const Tile x_dev(x.tensor), dy_dev(dy.tensor);
            Operand y = make_operand(d, Layout::interior, false, rng), y_ref = y;
            const Tile y_dev(y.tensor);
            // CUDA's tanhf, erff and expf and the C library's round differently: a few float ulps, of the
            // terms of gelu's gradient too, which cancel near x = -0.75 (hence the absolute floor).
            reference().activation->forward(f, x.view(), 0.0f, y_ref.view());
            gpu().activation->forward(f, x_dev.on_device(x.view()), 0.0f, y_dev.on_device(y.view()));
            require_close(y_dev.download(), y_ref.tensor, "forward", 1e-5, 0.1);
            Operand dx = make_operand(d, Layout::dense, false, rng), dx_ref = dx;
            const Tile dx_dev(dx.tensor);
            reference().activation->backward(f, x.view(), dy.view(), 0.0f, dx_ref.view());
            gpu().activation->backward(f, x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), 0.0f,
                                       dx_dev.on_device(dx.view()));
            require_close(dx_dev.download(), dx_ref.tensor, "backward", 1e-5, 0.1);
        }
}

TEST_CASE("gpu activations match the reference", "[gpu]") {
    const float slope = GENERATE(0.0f, 0.1f);
    const dsl::frontend::Activation f = dsl::frontend::Activation::leaky_relu;
    std::mt19937 rng(59);
    const std::vector<Dims> all = all_shapes();
    for (const Dims& d : all) {
        INFO("activation " << text(d) << " slope " << slope);
        Operand x = make_operand(d, Layout::interior, true, rng), dy = make_operand(d, Layout::channels, true, rng);
        const Tile x_dev(x.tensor), dy_dev(dy.tensor);
        Operand y = make_operand(d, Layout::interior, false, rng), y_ref = y;
        const Tile y_dev(y.tensor);
        reference().activation->forward(f, x.view(), slope, y_ref.view());
        gpu().activation->forward(f, x_dev.on_device(x.view()), slope, y_dev.on_device(y.view()));
        require_close(y_dev.download(), y_ref.tensor, "activation forward", 0.0);

        Operand dx = make_operand(d, Layout::dense, false, rng), dx_ref = dx;
        const Tile dx_dev(dx.tensor);
        reference().activation->backward(f, x.view(), dy.view(), slope, dx_ref.view());
        gpu().activation->backward(f, x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), slope,
                                   dx_dev.on_device(dx.view()));
        require_close(dx_dev.download(), dx_ref.tensor, "activation backward", 0.0);
    }
}

TEST_CASE("gpu batch norm and add with their ReLU are the two kernels one after the other, bit for bit", "[gpu]") {
    const float slope = GENERATE(0.0f, 0.1f);
    const dsl::frontend::Activation f = dsl::frontend::Activation::leaky_relu;
    std::mt19937 rng(67);
    for (const Dims& d : small_shapes()) {
        INFO("fused relu " << text(d) << " slope " << slope);
        Operand x = make_operand(d, Layout::interior, true, rng), other = make_operand(d, Layout::channels, true, rng);
        const Tile x_dev(x.tensor), other_dev(other.tensor);
        const std::vector<float> mean = random_vector(d.c, rng), inv_std = random_vector(d.c, rng, 0.5f, 1.5f);
        const std::vector<float> gamma = random_vector(d.c, rng, 0.5f, 1.5f), beta = random_vector(d.c, rng);
        const DeviceArray gamma_dev(gamma), beta_dev(beta);
        Operand y = make_operand(d, Layout::interior, false, rng);
        const Tile apart(y.tensor), fused(y.tensor);
        const View a = apart.on_device(y.view()), b = fused.on_device(y.view());
        const ConstView xd = x_dev.on_device(x.view());

        gpu().batchnorm->forward(xd, mean.data(), inv_std.data(), gamma_dev.data(), beta_dev.data(), a);
        gpu().activation->forward(f, a, slope, a);
        CHECK(gpu().batchnorm->forward_relu(xd, mean.data(), inv_std.data(), gamma_dev.data(), beta_dev.data(), slope,
                                            b));
        require_close(fused.download(), apart.download(), "batchnorm relu", 0.0);

        const std::vector<ConstView> two{xd, other_dev.on_device(other.view())};
        gpu().eltwise->add(two, a);
        gpu().activation->forward(f, a, slope, a);
        CHECK(gpu().eltwise->add_relu(two, slope, b));
        require_close(fused.download(), apart.download(), "add relu", 0.0);
        CHECK_FALSE(gpu().eltwise->add_relu({xd, xd, xd}, slope, b));
    }
}

TEST_CASE("gpu sigmoid matches the reference", "[gpu]") {
    const dsl::frontend::Activation f = dsl::frontend::Activation::sigmoid;
    std::mt19937 rng(61);
    const std::vector<Dims> all = all_shapes();
    for (const Dims& d : all) {
        INFO("sigmoid " << text(d));
        Operand x = make_operand(d, Layout::interior, true, rng), dy = make_operand(d, Layout::channels, true, rng);
        const Tile x_dev(x.tensor), dy_dev(dy.tensor);
        Operand y = make_operand(d, Layout::interior, false, rng), y_ref = y;
        const Tile y_dev(y.tensor);
        // CUDA's expf and the C library's round differently: a few float ulps.
        reference().activation->forward(f, x.view(), 0.0f, y_ref.view());
        gpu().activation->forward(f, x_dev.on_device(x.view()), 0.0f, y_dev.on_device(y.view()));
        require_close(y_dev.download(), y_ref.tensor, "sigmoid forward", 1e-6);

        Operand dx = make_operand(d, Layout::dense, false, rng), dx_ref = dx;
        const Tile dx_dev(dx.tensor);
        reference().activation->backward(f, x.view(), dy.view(), 0.0f, dx_ref.view());
        gpu().activation->backward(f, x_dev.on_device(x.view()), dy_dev.on_device(dy.view()), 0.0f,
                                   dx_dev.on_device(dx.view()));
        require_close(dx_dev.download(), dx_ref.tensor, "sigmoid backward", 1e-5);
    }
}

TEST_CASE("gpu pooling matches the reference, ties included", "[gpu]") {
    // Disjoint windows, overlapping ones (3x3 stride 2 and stride 1), gaps (stride > kernel), non-square,
    // dilation (which the reference honours), and long rows.
    const PoolCase pc =
        GENERATE(PoolCase{window(2, 2, 2, 2), {2, 3, {4, 5}}}, PoolCase{window(3, 3, 2, 2), {2, 3, {5, 7}}},
                 PoolCase{window(3, 3, 1, 1), {1, 4, {6, 9}}}, PoolCase{window(2, 2, 3, 3), {2, 2, {3, 4}}},
                 PoolCase{window(3, 2, 2, 1), {3, 2, {4, 11}}}, PoolCase{window(1, 1, 1, 1), {1, 2, {3, 3}}},
                 PoolCase{window(5, 5, 1, 1), {1, 1, {1, 1}}}, PoolCase{window(3, 3, 1, 2, 2, 1), {2, 2, {4, 5}}},
                 PoolCase{window(3, 3, 2, 2), {2, 3, {40, 150}}});
    const PoolKind kind = GENERATE(PoolKind::max, PoolKind::average);
    const int levels = GENERATE(0, 3);  // few levels make ties, so that routing to the first maximum is tested
    check_pool(pc, kind, levels);
}

TEST_CASE("gpu global pooling sums and broadcasts as the reference", "[gpu]") {
    std::mt19937 rng(67);
    std::vector<Dims> all = shapes;
    all.insert(all.end(), big_shapes.begin(), big_shapes.end());
    all.push_back({64, 512, {7, 7}});  // many small planes
    all.insert(all.end(), volume_shapes.begin(), volume_shapes.end());
    all.insert(all.end(), big_volume_shapes.begin(), big_volume_shapes.end());
    all.push_back({16, 256, {2, 3, 3}});  // many small volumes
    for (const Dims& d : all) {
        INFO("global pool " << text(d));
        Operand x = make_operand(d, Layout::interior, true, rng);
        const Tile x_dev(x.tensor);
        const auto planes = static_cast<std::size_t>(d.n * d.c);
        std::vector<double> expected(planes, 2.0), got(planes, 2.0);
        reference().pool->global_sum(x.view(), expected.data());
        gpu().pool->global_sum(x_dev.on_device(x.view()), got.data());
        require_close(got, expected, "global sum", 1e-10);

        std::vector<float> values(planes);
        for (std::size_t i = 0; i < planes; ++i) values[i] = float(i) - 1.5f;
        Operand dx = make_operand(d, Layout::channels, false, rng), dx_ref = dx;
        const Tile dx_dev(dx.tensor);
        reference().pool->broadcast(values.data(), 0.125f, dx_ref.view());
        gpu().pool->broadcast(values.data(), 0.125f, dx_dev.on_device(dx.view()));
        require_close(dx_dev.download(), dx_ref.tensor, "broadcast", 0.0);
    }
}

TEST_CASE("gpu element-wise kernels match the reference", "[gpu]") {
    const Dims d = GENERATE(from_range(small_shapes()));
    const int count = GENERATE(1, 2, 3, 4, 8, 9, 16);
    INFO("add of " << count << " inputs, " << text(d));
    std::mt19937 rng(71);
    std::vector<Operand> xs;
    for (int k = 0; k < count; ++k)
        xs.push_back(make_operand(d, k % 2 ? Layout::interior : Layout::channels, true, rng));
    const Operands copies(xs);
    const std::vector<ConstView>& views = copies.views;
    const std::vector<ConstView>& views_dev = copies.views_dev;

    Operand y = make_operand(d, Layout::interior, false, rng), y_ref = y;
    const Tile y_dev(y.tensor);
    reference().eltwise->add(views, y_ref.view());
    gpu().eltwise->add(views_dev, y_dev.on_device(y.view()));
    // Up to eight inputs round once, as the reference; more once per kernel, each rounding relative to the
    // terms, which may cancel: relative then to the largest sum.
    const double tolerance = count <= 8 ? 0.0 : 1e-5, floor = count <= 8 ? 1e-6 : -1.0;
    require_close(y_dev.download(), y_ref.tensor, "add", tolerance, floor);

    // Copy into a channel range of a bigger tensor, as concat does.
    Operand wide = make_operand(d, Layout::channels, false, rng), wide_ref = wide;
    const Tile wide_dev(wide.tensor);
    reference().eltwise->copy(views[0], wide_ref.view());
    gpu().eltwise->copy(views_dev[0], wide_dev.on_device(wide.view()));
    require_close(wide_dev.download(), wide_ref.tensor, "copy", 0.0);

    // Accumulate in place into a non-dense view.
    reference().eltwise->accumulate(views.back(), y_ref.view());
    gpu().eltwise->accumulate(views_dev.back(), y_dev.on_device(y.view()));
    require_close(y_dev.download(), y_ref.tensor, "accumulate", tolerance, floor);
}

TEST_CASE("gpu add may write into an input", "[gpu]") {
    const Dims d =
        GENERATE(Dims{2, 3, {5, 9}}, Dims{1, 2, {150, 130}}, Dims{2, 3, {3, 5, 9}}, Dims{1, 2, {12, 40, 50}});
    const int inputs = GENERATE(2, 3, 9);
    const int into = GENERATE(0, 1);
    INFO(inputs << " inputs, into input " << into);
    std::mt19937 rng(73);
    std::vector<Operand> xs;
    for (int k = 0; k < inputs; ++k) xs.push_back(make_operand(d, Layout::interior, true, rng));
    const Operands copies(xs);
    const std::vector<ConstView>& views = copies.views;
    const std::vector<ConstView>& views_dev = copies.views_dev;
    Operand expected = xs[static_cast<std::size_t>(into)];
    reference().eltwise->add(views, expected.view());
    const Tile& target = *copies.tiles[static_cast<std::size_t>(into)];
    gpu().eltwise->add(views_dev, target.on_device(xs[static_cast<std::size_t>(into)].view()));
    require_close(target.download(), expected.tensor, "add in place", inputs <= 8 ? 0.0 : 1e-5);
}

TEST_CASE("gpu sgd matches the reference", "[gpu]") {
    const std::int64_t count = GENERATE(1, 7, 100, 40009, 3000017);
    std::mt19937 rng(79);
    std::vector<float> w = random_vector(count, rng), m = random_vector(count, rng), g = random_vector(count, rng);
    const DeviceArray w_dev(w), m_dev(m), g_dev(g);
    for (int step = 0; step < 3; ++step) {
        reference().eltwise->sgd(w.data(), m.data(), g.data(), count, 0.05f, 0.9f, 1e-4f);
        gpu().eltwise->sgd(w_dev.data(), m_dev.data(), g_dev.data(), count, 0.05f, 0.9f, 1e-4f);
    }
    require_close(w_dev.download(), w, "sgd weights", 1e-6, 1.0);
    require_close(m_dev.download(), m, "sgd momentum", 1e-6, 1.0);
}

TEST_CASE("gpu adam and adamw match the reference bit for bit", "[gpu]") {
    const std::int64_t count = GENERATE(1, 7, 100, 40009, 3000017);
    const bool decoupled = GENERATE(false, true);
    std::mt19937 rng(89);
    std::vector<float> w = random_vector(count, rng), g = random_vector(count, rng);
    std::vector<float> m(static_cast<std::size_t>(count), 0.0f), v(static_cast<std::size_t>(count), 0.0f);
    const DeviceArray w_dev(w), m_dev(m), v_dev(v), g_dev(g);
    for (int t = 1; t <= 3; ++t) {
        const AdamStep s = adam_step(decoupled, 0.01 / t, 0.9, 0.999, 1e-8, 0.01, t);
        reference().eltwise->adam(w.data(), m.data(), v.data(), g.data(), count, s);
        gpu().eltwise->adam(w_dev.data(), m_dev.data(), v_dev.data(), g_dev.data(), count, s);
    }
    // The same roundings in the same order (equal where the host makes no fused multiply-adds).
    require_close(w_dev.download(), w, "adam weights", 1e-6, 1.0);
    require_close(m_dev.download(), m, "adam first moments", 1e-6, 1.0);
    require_close(v_dev.download(), v, "adam second moments", 1e-6, 1.0);
}

TEST_CASE("gpu unscaling matches the reference and finds gradients that are not finite", "[gpu]") {
    // Loss scaling's: every array times the factor, and whether all were finite before (one infinity or NaN
    // anywhere in any array says no).
    const std::int64_t count = GENERATE(1, 100, 40009, 3000017);
    const int bad = GENERATE(0, 1, 2);  // none, an infinity, a NaN
    std::mt19937 rng(97);
    std::vector<float> a = random_vector(count, rng), b = random_vector(7, rng);
    if (bad) a[static_cast<std::size_t>(count / 2)] = bad == 1 ? -INFINITY : NAN;
    const DeviceArray a_dev(a), b_dev(b);
    const float factor = 1.0f / 65536.0f;
    const bool expected = reference().eltwise->unscale({{a.data(), count}, {b.data(), 7}}, factor);
    CHECK(expected == (bad == 0));
    CHECK(gpu().eltwise->unscale({{a_dev.data(), count}, {b_dev.data(), 7}}, factor) == expected);
    require_close(a_dev.download(), a, "unscaled", 0.0);
    require_close(b_dev.download(), b, "unscaled", 0.0);
    CHECK(gpu().eltwise->unscale({{b_dev.data(), 7}}, factor));  // the flag starts clear each time
}

TEST_CASE("gpu cross-entropy matches the reference", "[gpu]") {
    // A warp per sample ({n, k}, or {n, k, {1, 1}} or {n, k, {1, 1, 1}}, contiguous or not), a thread per pixel
    // or voxel otherwise.
    const Dims d =
        GENERATE(Dims{4, 10, {}}, Dims{4, 10, {1, 1}}, Dims{2, 3, {5, 6}}, Dims{3, 1000, {}}, Dims{3, 1000, {1, 1}},
                 Dims{2, 2, {64, 80}}, Dims{3, 20, {1, 1, 1}}, Dims{2, 3, {3, 5, 6}}, Dims{1, 4, {16, 24, 20}});
    const Layout layout = GENERATE(Layout::dense, Layout::interior);
    INFO("cross entropy " << text(d) << " " << name(layout));
    std::mt19937 rng(83);
    Operand logits = make_operand(d, layout, true, rng);
    // Logits of several units, so that the softmax is not flat.
    const View v = logits.view();
    for_each_element(d, [&](std::int64_t n, std::int64_t c, const Index& i) { v.at(n, c, i) *= 4.0f; });
    const Tile logits_dev(logits.tensor);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(d.n * d.points()));
    std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(d.c - 1));
    for (auto& l : labels) l = label(rng);
    const LabelView lv = dense_view<const std::int32_t>(labels.data(), Dims{d.n, 1, d.space});

    Operand dlogits = make_operand(d, layout, false, rng), dlogits_ref = dlogits;
    const Tile dlogits_dev(dlogits.tensor);
    const double loss_ref = reference().loss->cross_entropy(logits.view(), lv, 0.25f, dlogits_ref.view());
    const double loss = gpu().loss->cross_entropy(logits_dev.on_device(logits.view()), lv, 0.25f,
                                                  dlogits_dev.on_device(dlogits.view()));
    CHECK(loss == Approx(loss_ref).epsilon(1e-10));
    CHECK(loss > 0.0);
    require_close(dlogits_dev.download(), dlogits_ref.tensor, "dlogits", 1e-6);

    // Without a gradient: the loss alone.
    CHECK(gpu().loss->cross_entropy(logits_dev.on_device(logits.view()), lv, 0.25f, View{}) ==
          Approx(loss_ref).epsilon(1e-10));
    require_close(logits_dev.download(), logits.tensor, "logits untouched", 0.0);

    // The gradient written over the logits.
    Operand in_place_ref = logits;
    reference().loss->cross_entropy(in_place_ref.view(), lv, 0.25f, in_place_ref.view());
    const View in_place = logits_dev.on_device(logits.view());
    CHECK(gpu().loss->cross_entropy(in_place, lv, 0.25f, in_place) == Approx(loss_ref).epsilon(1e-10));
    require_close(logits_dev.download(), in_place_ref.tensor, "dlogits over logits", 1e-6);
}

TEST_CASE("gpu regression losses match the reference", "[gpu]") {
    using dsl::frontend::Regression;
    const Regression r = GENERATE(Regression::mse, Regression::l1, Regression::bce_with_logits);
    const Dims d = GENERATE(Dims{4, 10, {}}, Dims{4, 10, {1, 1}}, Dims{2, 3, {5, 6}}, Dims{2, 2, {64, 80}},
                            Dims{2, 3, {3, 5, 6}}, Dims{1, 2, {16, 24, 20}});
    const Layout layout = GENERATE(Layout::dense, Layout::interior);
    INFO("regression " << static_cast<int>(r) << " " << text(d) << " " << name(layout));
    std::mt19937 rng(89);
    Operand x = make_operand(d, layout, true, rng), t = make_operand(d, layout, true, rng);
    const Tile x_dev(x.tensor), t_dev(t.tensor);
    Operand dx = make_operand(d, layout, false, rng), dx_ref = dx;
    const Tile dx_dev(dx.tensor);
    const double loss_ref = reference().loss->regression(r, x.view(), t.view(), 0.25f, dx_ref.view());
    const double loss = gpu().loss->regression(r, x_dev.on_device(x.view()), t_dev.on_device(t.view()), 0.25f,
                                               dx_dev.on_device(dx.view()));
    CHECK(loss == Approx(loss_ref).epsilon(1e-10));
    CHECK(loss > 0.0);
    require_close(dx_dev.download(), dx_ref.tensor, "dprediction", 1e-6);
    // Without a gradient: the loss alone.
    CHECK(gpu().loss->regression(r, x_dev.on_device(x.view()), t_dev.on_device(t.view()), 0.25f, View{}) ==
          Approx(loss_ref).epsilon(1e-10));
}

TEST_CASE("gpu synthetic inputs are the host's", "[gpu]") {
    SyntheticData data;
    data.seed = 11;
    data.channels = 3;
    data.height = 96;
    data.width = 80;
    data.classes = 5;
    const bool per_pixel = GENERATE(false, true);
    if (per_pixel) data.label_h = 12, data.label_w = 10, data.block = 1;
    // A tile inside a tile with margins, away from the origin (as a process's of a split), and a whole one.
    const std::int64_t sample0 = GENERATE(0, 7), y0 = GENERATE(0, 33), x0 = GENERATE(0, 41);
    INFO((per_pixel ? "per pixel" : "per sample") << ", sample " << sample0 << ", row " << y0 << ", column " << x0);
    std::mt19937 rng(79);
    check_synthetic(data, false, Dims{2, 3, {data.height - y0, data.width - x0}}, sample0, {y0, x0}, rng);
}

TEST_CASE("gpu synthetic targets are the host's", "[gpu]") {
    // A regression's float targets: a label [3, 24, 20] under inputs of 96x80 (a tile of them away from the
    // origin, and a whole one), and a label [4] per sample.
    SyntheticData data;
    data.seed = 17;
    data.channels = 3;
    data.height = 96;
    data.width = 80;
    const bool per_pixel = GENERATE(true, false);
    if (per_pixel)
        data.target_c = 3, data.target_h = 24, data.target_w = 20;
    else
        data.target_c = 4;
    const std::int64_t sample0 = GENERATE(0, 7), y0 = per_pixel ? GENERATE(0, 9) : 0,
                       x0 = per_pixel ? GENERATE(0, 5) : 0;
    INFO((per_pixel ? "per pixel" : "per sample") << ", sample " << sample0 << ", row " << y0 << ", column " << x0);
    std::mt19937 rng(83);
    const Dims d = per_pixel ? Dims{2, 3, {data.target_h - y0, data.target_w - x0}} : Dims{2, 4, {}};
    check_synthetic(data, true, d, sample0, per_pixel ? Index{y0, x0} : Index{}, rng);
}

TEST_CASE("gpu upsample matches the reference, on tiles anywhere in the tensor", "[gpu]") {
    struct Case {
        std::int64_t scale;
        bool linear;
        std::int64_t in_h, in_w, oy0, oy1, ox0, ox1;
    };
    std::mt19937 rng(71);
    for (const Case& c :
         {Case{2, false, 9, 6, 0, 18, 0, 12}, Case{2, true, 9, 6, 0, 18, 0, 12}, Case{2, true, 9, 6, 5, 13, 3, 12},
          Case{3, true, 5, 4, 4, 13, 1, 7}, Case{3, false, 5, 4, 4, 13, 1, 7}, Case{2, true, 64, 80, 0, 128, 0, 160}}) {
        INFO("upsample scale " << c.scale << (c.linear ? " bilinear" : " nearest") << " rows " << c.oy0 << ".." << c.oy1
                               << " columns " << c.ox0 << ".." << c.ox1);
        const auto rows = dsl::scheduler::upsample_input(c.oy0, c.oy1, c.scale, c.linear, c.in_h);
        const auto cols = dsl::scheduler::upsample_input(c.ox0, c.ox1, c.scale, c.linear, c.in_w);
        const Dims xd{2, 3, {rows.end - rows.first, cols.end - cols.first}}, yd{2, 3, {c.oy1 - c.oy0, c.ox1 - c.ox0}};
        const Upsample u{c.scale, c.linear, {c.in_h, c.in_w}, Placement{{rows.first, cols.first}, {c.oy0, c.ox0}}};
        check_upsample(xd, yd, u, rng);
    }
}

TEST_CASE("gpu deconv (cuDNN's convolutions) matches the reference, on tiles anywhere in the tensor", "[gpu]") {
    struct Case {
        std::int64_t cin, cout, k, s, p, op, in_h, in_w, oy0, oy1, ox0, ox1;
    };
    std::mt19937 rng(73);
    for (const Case& c : {Case{2, 3, 3, 2, 1, 1, 5, 4, 0, 10, 0, 8}, Case{2, 3, 3, 2, 1, 1, 5, 4, 3, 8, 1, 6},
                          Case{3, 2, 2, 2, 0, 0, 4, 3, 1, 6, 0, 6}, Case{2, 2, 3, 1, 1, 0, 5, 5, 2, 4, 0, 5},
                          Case{1, 2, 1, 3, 0, 2, 3, 3, 0, 9, 0, 9}, Case{16, 8, 4, 2, 1, 0, 32, 24, 0, 64, 0, 48}}) {
        INFO("deconv k " << c.k << " s " << c.s << " p " << c.p << " rows " << c.oy0 << ".." << c.oy1);
        const auto rows = dsl::scheduler::deconv_input(c.oy0, c.oy1, c.k, c.s, c.p, c.in_h);
        const auto cols = dsl::scheduler::deconv_input(c.ox0, c.ox1, c.k, c.s, c.p, c.in_w);
        const Dims xd{2, c.cin, {rows.end - rows.first, cols.end - cols.first}};
        const Dims yd{2, c.cout, {c.oy1 - c.oy0, c.ox1 - c.ox0}};
        const Dims wd{c.cin, c.cout, {c.k, c.k}};
        const Deconv d{{c.k, c.k}, {c.s, c.s}, {c.p, c.p}, Placement{{rows.first, cols.first}, {c.oy0, c.ox0}}};
        check_deconv(xd, wd, yd, d, rng);
    }
}
