// The reference kernels against central finite differences of their own forwards, and against values worked
// out by hand, so that the oracle of every other backend is itself checked both ways: on images and vectors,
// and on volumes where a case takes every rank (the cases only for volumes are in test_reference_volumes.cpp,
// the losses in test_reference_losses.cpp, and the tiles, finite differences and checks they share in
// reference_checks.hpp).
//
// Finite differences run in float (the kernels' storage type) with a step of 1e-2: smaller steps drown in
// the rounding of the forward's float outputs (about 1e-7 relative), larger ones in the curvature of batch
// norm and the softmax. The objective is L = sum(forward(x) * R) in double for a fixed random R, so
// dL/dx = backward(R). A gradient element passes when |numeric - analytic| <= 1e-2 * max(|analytic|,
// 0.1 * max|analytic|) + 1e-5: a wrong index or a missing term is off by O(max|analytic|) and fails.
#include "reference_checks.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/base/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsl::backend;
using std::int64_t;

struct ConvCase {
    int64_t n, c, f, out_h, out_w, kh, kw, sh, sw, dh, dw;
};

}  // namespace

TEST_CASE("reference conv: backward_data and backward_weights are the transposes of forward", "[reference]") {
    const ConvCase k = GENERATE(values<ConvCase>({
        {1, 1, 1, 3, 3, 3, 3, 1, 1, 1, 1},  // the plain case
        {2, 3, 4, 3, 5, 3, 2, 1, 1, 1, 1},  // non-square kernel, rectangular input
        {2, 2, 3, 2, 3, 3, 3, 2, 2, 1, 1},  // stride 2, odd input
        {1, 3, 2, 3, 2, 2, 3, 1, 2, 2, 1},  // dilation 2 in H, stride 2 in W
        {2, 2, 2, 2, 2, 3, 3, 2, 1, 2, 2},  // stride and dilation together
        {1, 2, 3, 3, 2, 1, 1, 2, 2, 1, 1},  // 1x1 stride 2: inputs no output reads get zero gradient
    }));
    const Window win = make_window(k.kh, k.kw, k.sh, k.sw, k.dh, k.dw);
    CAPTURE(k.n, k.c, k.f, k.out_h, k.out_w, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw);
    const Dims xd{k.n, k.c, {win.input_extent(0, k.out_h), win.input_extent(1, k.out_w)}};
    check_conv_transposes(xd, Dims{k.f, k.c, {k.kh, k.kw}}, Dims{k.n, k.f, {k.out_h, k.out_w}}, win);
}

TEST_CASE("reference conv: hand-computed outputs", "[reference]") {
    ConvKernels& conv = *reference_kernels().conv;
    std::vector<float> xs(25);
    std::iota(xs.begin(), xs.end(), 1.0f);  // x(y, x) = 1 + 4y + x on 4x4, 1 + 5y + x on 5x5

    SECTION("3x3 on 4x4, weights 1..9 (catches flipped or transposed kernels)") {
        std::vector<float> ws(9);
        std::iota(ws.begin(), ws.end(), 1.0f);
        std::vector<float> ys(4);
        const float bias = 0.5f;
        conv.forward(dense_view(xs.data(), {1, 1, {4, 4}}), dense_view(ws.data(), {1, 1, {3, 3}}), &bias,
                     dense_view(ys.data(), {1, 1, {2, 2}}), make_window(3, 3, 1, 1, 1, 1));
        // y(0,0) = 1*1+2*2+3*3 + 5*4+6*5+7*6 + 9*7+10*8+11*9 = 14 + 92 + 242 = 348; each step right adds sum(w) = 45,
        // each step down 4 * 45.
        CHECK(ys == std::vector<float>{348.5f, 393.5f, 528.5f, 573.5f});

        // The transpose of a single output: dx = dy * w placed at the window.
        std::vector<float> dy{0, 0, 0, 2}, dx(16, -1.0f);
        conv.backward_data(dense_view(dy.data(), {1, 1, {2, 2}}), dense_view(ws.data(), {1, 1, {3, 3}}),
                           dense_view(dx.data(), {1, 1, {4, 4}}), make_window(3, 3, 1, 1, 1, 1));
        CHECK(dx == std::vector<float>{0, 0, 0, 0, 0, 2, 4, 6, 0, 8, 10, 12, 0, 14, 16, 18});
    }
    SECTION("2x2 stride 2: block sums") {
        std::vector<float> ws(4, 1.0f), ys(4);
        conv.forward(dense_view(xs.data(), {1, 1, {4, 4}}), dense_view(ws.data(), {1, 1, {2, 2}}), nullptr,
                     dense_view(ys.data(), {1, 1, {2, 2}}), make_window(2, 2, 2, 2, 1, 1));
        CHECK(ys == std::vector<float>{14, 22, 46, 54});
    }
    SECTION("2x2 dilation 2 on 5x5: corners of 3x3 blocks") {
        std::vector<float> ws(4, 1.0f), ys(9);
        conv.forward(dense_view(xs.data(), {1, 1, {5, 5}}), dense_view(ws.data(), {1, 1, {2, 2}}), nullptr,
                     dense_view(ys.data(), {1, 1, {3, 3}}), make_window(2, 2, 1, 1, 2, 2));
        // y(i, j) = x(i,j) + x(i,j+2) + x(i+2,j) + x(i+2,j+2) = 4 * x(i,j) + 24 = 28 + 4 * (5i + j)
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) CHECK(ys[i * 3 + j] == float(28 + 4 * (5 * i + j)));
    }
    SECTION("two channels in, two filters out") {
        // x channel 0 = 1..4, channel 1 = 5..8 on 2x2; 1x1 filters mix the channels.
        std::vector<float> ws{1, 10, -1, 2}, ys(8);
        conv.forward(dense_view(xs.data(), {1, 2, {2, 2}}), dense_view(ws.data(), {2, 2, {1, 1}}), nullptr,
                     dense_view(ys.data(), {1, 2, {2, 2}}), make_window(1, 1, 1, 1, 1, 1));
        CHECK(ys == std::vector<float>{51, 62, 73, 84, 9, 10, 11, 12});
    }
    SECTION("same padding lives in zero margins") {
        Tensor x({1, 1, {3, 3}}, {{1, 1}, {1, 1}});
        x.fill(1.0f);
        x.fill_margins(0.0f);
        std::vector<float> ws(9, 1.0f), ys(9);
        conv.forward(x.padded(), dense_view(ws.data(), {1, 1, {3, 3}}), nullptr, dense_view(ys.data(), {1, 1, {3, 3}}),
                     make_window(3, 3, 1, 1, 1, 1));
        CHECK(ys == std::vector<float>{4, 6, 4, 6, 9, 6, 4, 6, 4});
    }
}

TEST_CASE("reference batchnorm: statistics, forward and backward compose to the gradient", "[reference]") {
    const Dims d = GENERATE(Dims{2, 3, {3, 5}}, Dims{3, 2, {1, 1}}, Dims{1, 2, {4, 3}}, Dims{3, 4, {}},
                            Dims{2, 3, {3, 4, 2}}, Dims{1, 2, {2, 1, 3}});
    CAPTURE(d);
    std::mt19937 rng(99);
    const float eps = 1e-5f;
    Tile x(d, rng, -2.0f, 2.0f), y(d, rng), r(d, rng), dx(d, rng);
    std::vector<float> gamma(d.c), beta(d.c), mean(d.c), inv_std(d.c);
    for (float& g : gamma) g = uniform(rng, 0.5f, 1.5f);
    for (float& b : beta) b = uniform(rng, -0.5f, 0.5f);
    BatchNormKernels& bn = *reference_kernels().batchnorm;
    const double count = double(d.n * d.points());

    auto batch_statistics = [&] {
        std::vector<double> sum(d.c, 0.0), sum_sq(d.c, 0.0);
        bn.statistics(x.view, sum.data(), sum_sq.data());
        for (int64_t c = 0; c < d.c; ++c) {
            const double m = sum[c] / count;
            mean[c] = static_cast<float>(m);
            inv_std[c] = static_cast<float>(1.0 / std::sqrt(sum_sq[c] / count - m * m + eps));
        }
    };
    auto objective = [&] {
        batch_statistics();
        bn.forward(x.view, mean.data(), inv_std.data(), gamma.data(), beta.data(), y.view);
        return dot(y.view, r.view);
    };
    y.save();
    objective();
    CHECK(y.changed_outside() == 0);

    // The forward normalises: per channel, (y - beta) / gamma has mean 0 and variance 1 (less eps).
    for (int64_t c = 0; c < d.c; ++c) {
        double s = 0.0, s2 = 0.0;
        for_each_element(Dims{d.n, 1, d.space}, [&](int64_t n, int64_t, const Index& i) {
            const double z = (y.view.at(n, c, i) - beta[c]) / gamma[c];
            s += z;
            s2 += z * z;
        });
        CHECK(s / count == Approx(0.0).margin(1e-5));
        CHECK(s2 / count == Approx(1.0).epsilon(1e-3));
    }

    std::vector<double> sum_dy(d.c, 0.0), sum_dy_xhat(d.c, 0.0);
    bn.backward_statistics(x.view, r.view, mean.data(), inv_std.data(), sum_dy.data(), sum_dy_xhat.data());
    dx.save();
    bn.backward(x.view, r.view, mean.data(), inv_std.data(), gamma.data(), sum_dy.data(), sum_dy_xhat.data(), count,
                dx.view);
    CHECK(dx.changed_outside() == 0);
    {
        Dense xs(x.view), rs(r.view), ys(y.view), dxs(dx.view);
        std::vector<double> sum(d.c, 0.0), sum_sq(d.c, 0.0), dense_dy(d.c, 0.0), dense_dy_xhat(d.c, 0.0);
        bn.statistics(xs.view, sum.data(), sum_sq.data());
        bn.forward(xs.view, mean.data(), inv_std.data(), gamma.data(), beta.data(), ys.view);
        bn.backward_statistics(xs.view, rs.view, mean.data(), inv_std.data(), dense_dy.data(), dense_dy_xhat.data());
        bn.backward(xs.view, rs.view, mean.data(), inv_std.data(), gamma.data(), dense_dy.data(), dense_dy_xhat.data(),
                    count, dxs.view);
        CHECK(to_vector(ys.view) == to_vector(y.view));
        CHECK(to_vector(dxs.view) == to_vector(dx.view));
        CHECK(dense_dy == sum_dy);
        CHECK(dense_dy_xhat == sum_dy_xhat);
    }

    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
    check_gradient("dgamma", to_vector(sum_dy_xhat.data(), d.c), numeric_gradient(vector_view(gamma), objective));
    check_gradient("dbeta", to_vector(sum_dy.data(), d.c), numeric_gradient(vector_view(beta), objective));
}

TEST_CASE("reference batchnorm: the local sums add into the caller's and split across tiles", "[reference]") {
    std::mt19937 rng(7);
    const Dims d{2, 3, {5, 4}};
    Tile x(d, rng), dy(d, rng);
    BatchNormKernels& bn = *reference_kernels().batchnorm;
    std::vector<float> mean{0.1f, -0.2f, 0.3f}, inv_std{1.5f, 0.8f, 2.0f};

    std::vector<double> sum(3, 0.0), sum_sq(3, 0.0), sum_dy(3, 0.0), sum_dy_xhat(3, 0.0);
    bn.statistics(x.view, sum.data(), sum_sq.data());
    bn.backward_statistics(x.view, dy.view, mean.data(), inv_std.data(), sum_dy.data(), sum_dy_xhat.data());

    // Two tiles of rows 0..1 and 2..4, into sums that already hold 1.
    std::vector<double> split_sum(3, 1.0), split_sq(3, 1.0), split_dy(3, 1.0), split_dy_xhat(3, 1.0);
    for (auto [row, rows] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}}) {
        const Dims part{d.n, d.c, {rows, d.space[1]}};
        bn.statistics(x.view.sub(0, 0, {row, 0}, part), split_sum.data(), split_sq.data());
        bn.backward_statistics(x.view.sub(0, 0, {row, 0}, part), dy.view.sub(0, 0, {row, 0}, part), mean.data(),
                               inv_std.data(), split_dy.data(), split_dy_xhat.data());
    }
    for (int c = 0; c < 3; ++c) {
        double s = 0.0, s2 = 0.0, g = 0.0, gx = 0.0;
        for_each_element(Dims{d.n, 1, d.space}, [&](int64_t n, int64_t, const Index& i) {
            const double v = x.view.at(n, c, i), dv = dy.view.at(n, c, i);
            s += v;
            s2 += v * v;
            g += dv;
            gx += dv * (v - mean[c]) * inv_std[c];
        });
        CHECK(sum[c] == Approx(s).margin(1e-9));
        CHECK(sum_sq[c] == Approx(s2).margin(1e-9));
        CHECK(sum_dy[c] == Approx(g).margin(1e-9));
        CHECK(sum_dy_xhat[c] == Approx(gx).margin(1e-6));
        CHECK(split_sum[c] - 1.0 == Approx(s).margin(1e-9));
        CHECK(split_sq[c] - 1.0 == Approx(s2).margin(1e-9));
        CHECK(split_dy[c] - 1.0 == Approx(g).margin(1e-9));
        CHECK(split_dy_xhat[c] - 1.0 == Approx(gx).margin(1e-6));
    }
}

TEST_CASE("reference batchnorm: hand-computed forward", "[reference]") {
    BatchNormKernels& bn = *reference_kernels().batchnorm;
    const Dims d = GENERATE(Dims{1, 1, {2, 2}}, Dims{1, 1, {2, 1, 2}});  // an image and a volume
    CAPTURE(d);
    std::vector<float> xs{1, 2, 3, 4}, ys(4);
    std::vector<double> sum(1, 0.0), sum_sq(1, 0.0);
    bn.statistics(dense_view(xs.data(), d), sum.data(), sum_sq.data());
    CHECK(sum[0] == 10.0);
    CHECK(sum_sq[0] == 30.0);
    // mean 2.5, variance 1.25: x_hat = (x - 2.5) / sqrt(1.25); y = 2 x_hat + 1
    const float mean = 2.5f, inv_std = static_cast<float>(1.0 / std::sqrt(1.25)), gamma = 2.0f, beta = 1.0f;
    bn.forward(dense_view(xs.data(), d), &mean, &inv_std, &gamma, &beta, dense_view(ys.data(), d));
    CHECK(ys[0] == Approx(-1.6832816));
    CHECK(ys[1] == Approx(0.1055728));
    CHECK(ys[2] == Approx(1.8944272));
    CHECK(ys[3] == Approx(3.6832816));
}

TEST_CASE("reference activation: relu and leaky relu", "[reference]") {
    ActivationKernels& act = *reference_kernels().activation;
    const float slope = GENERATE(0.0f, 0.1f);
    // relu is leaky_relu with slope 0: the trainer passes relu that slope.
    const dsl::frontend::Activation f =
        slope == 0.0f ? dsl::frontend::Activation::relu : dsl::frontend::Activation::leaky_relu;
    CAPTURE(slope);

    SECTION("forward by hand") {
        std::vector<float> xs{-2.0f, -0.5f, 0.0f, 0.5f, 3.0f}, ys(5), dy{1, 2, 3, 4, 5}, dx(5);
        act.forward(f, dense_view(xs.data(), {1, 5, {}}), slope, dense_view(ys.data(), {1, 5, {}}));
        CHECK(ys == std::vector<float>{-2.0f * slope, -0.5f * slope, 0.0f, 0.5f, 3.0f});
        // x = 0 is not above zero: it takes the slope, as PyTorch's relu gradient does.
        act.backward(f, dense_view(xs.data(), {1, 5, {}}), dense_view(dy.data(), {1, 5, {}}), slope,
                     dense_view(dx.data(), {1, 5, {}}));
        CHECK(dx == std::vector<float>{1 * slope, 2 * slope, 3 * slope, 4, 5});
    }
    SECTION("backward by finite differences") {
        std::mt19937 rng(5);
        const Dims d{2, 3, {3, 4}};
        Tile x(d, rng), y(d, rng), r(d, rng), dx(d, rng);
        x.fill([&] { return off_zero(rng); });
        auto objective = [&] {
            act.forward(f, x.view, slope, y.view);
            return dot(y.view, r.view);
        };
        y.save();
        objective();
        CHECK(y.changed_outside() == 0);
        dx.save();
        act.backward(f, x.view, r.view, slope, dx.view);
        CHECK(dx.changed_outside() == 0);
        Dense xs(x.view), rs(r.view), ys(y.view), dxs(dx.view);
        act.forward(f, xs.view, slope, ys.view);
        act.backward(f, xs.view, rs.view, slope, dxs.view);
        CHECK(to_vector(ys.view) == to_vector(y.view));
        CHECK(to_vector(dxs.view) == to_vector(dx.view));
        check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
    }
}

TEST_CASE("reference activation: sigmoid", "[reference][oracle]") {
    ActivationKernels& act = *reference_kernels().activation;
    const dsl::frontend::Activation f = dsl::frontend::Activation::sigmoid;

    SECTION("against torch.sigmoid in float64") {
        // PyTorch is not installed here: these are torch.sigmoid(x.double()) and its gradient dy * y * (1 - y)
        // as float64 computes them (1 / (1 + exp(-x)), by Python's math.exp; torch's own agree to an ulp).
        std::vector<float> xs{-10, -3, -0.5, 0, 0.5, 3, 10}, dy{1, -2, 0.5, 3, -1, 2, 4}, ys(7), dx(7);
        const std::vector<double> y64{4.5397868702434395e-05, 0.04742587317756678, 0.3775406687981454, 0.5,
                                      0.6224593312018546,     0.9525741268224334,  0.9999546021312976};
        const std::vector<double> dx64{4.5395807735951673e-05, -0.09035331946182427, 0.11750185610079725,   0.75,
                                       -0.2350037122015945,    0.090353319461824,    0.00018158323094363062};
        act.forward(f, vector_view(xs), 0.0f, vector_view(ys));
        act.backward(f, vector_view(xs), vector_view(dy), 0.0f, vector_view(dx));
        for (std::size_t i = 0; i < xs.size(); ++i) {
            CAPTURE(xs[i]);
            CHECK(ys[i] == Approx(y64[i]).epsilon(1e-6).margin(1e-7));
            // 1 - y in float loses digits where y is near 1: float32 (PyTorch's too) is that close.
            CHECK(dx[i] == Approx(dx64[i]).epsilon(1e-5).margin(1e-6));
        }
    }
    SECTION("backward by finite differences in double") {
        std::mt19937 rng(17);
        const Dims d{2, 3, {3, 4}};
        Tile x(d, rng, -4.0f, 4.0f), y(d, rng), r(d, rng), dx(d, rng);
        auto objective = [&] {
            act.forward(f, x.view, 0.0f, y.view);
            return dot(y.view, r.view);
        };
        y.save();
        objective();
        CHECK(y.changed_outside() == 0);
        dx.save();
        act.backward(f, x.view, r.view, 0.0f, dx.view);
        CHECK(dx.changed_outside() == 0);
        Dense xs(x.view), rs(r.view), ys(y.view), dxs(dx.view);
        act.forward(f, xs.view, 0.0f, ys.view);
        act.backward(f, xs.view, rs.view, 0.0f, dxs.view);
        CHECK(to_vector(ys.view) == to_vector(y.view));
        CHECK(to_vector(dxs.view) == to_vector(dx.view));
        check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
    }
}

namespace {

// An element-wise function's forward against float64 values and its backward by finite differences.
void check_activation(dsl::frontend::Activation f, const std::vector<float>& xs, const std::vector<double>& y64,
                      const std::vector<double>& dx64) {
    ActivationKernels& act = *reference_kernels().activation;
    std::vector<float> in = xs, dy{1, -2, 0.5, 3, -1, 2, 4}, ys(xs.size()), dx(xs.size());
    act.forward(f, vector_view(in), 0.0f, vector_view(ys));
    act.backward(f, vector_view(in), vector_view(dy), 0.0f, vector_view(dx));
    for (std::size_t i = 0; i < xs.size(); ++i) {
        CAPTURE(xs[i]);
        CHECK(ys[i] == Approx(y64[i]).epsilon(1e-6).margin(1e-7));
        CHECK(dx[i] == Approx(dx64[i]).epsilon(1e-5).margin(1e-6));
    }
    std::mt19937 rng(23);
    const Dims d{2, 3, {3, 4}};
    Tile x(d, rng, -4.0f, 4.0f), y(d, rng), r(d, rng), g(d, rng);
    auto objective = [&] {
        act.forward(f, x.view, 0.0f, y.view);
        return dot(y.view, r.view);
    };
    y.save();
    objective();
    CHECK(y.changed_outside() == 0);
    g.save();
    act.backward(f, x.view, r.view, 0.0f, g.view);
    CHECK(g.changed_outside() == 0);
    check_gradient("dx", to_vector(g.view), numeric_gradient(x.view, objective));
}

}  // namespace

TEST_CASE("reference activation: tanh and gelu", "[reference][oracle]") {
    // PyTorch is not installed here: these are torch.tanh and torch.nn.functional.gelu (approximate='none')
    // in float64 as Python's math computes them (math.tanh; x / 2 * (1 + math.erf(x / sqrt 2))), and their
    // gradients dy * (1 - tanh^2) and dy * ((1 + erf(x / sqrt 2)) / 2 + x exp(-x^2 / 2) / sqrt(2 pi)).
    SECTION("tanh") {
        check_activation(dsl::frontend::Activation::tanh, {-10, -3, -0.5, 0, 0.5, 3, 10},
                         {-0.9999999958776927, -0.9950547536867305, -0.46211715726000974, 0.0, 0.46211715726000974,
                          0.9950547536867305, 0.9999999958776927},
                         {8.244614546626394e-09, -0.019732074330880423, 0.3932238664829637, 3.0, -0.7864477329659274,
                          0.019732074330880423, 3.297845818650558e-08});
    }
    SECTION("gelu") {
        check_activation(dsl::frontend::Activation::gelu, {-5, -3, -0.5, 0, 0.5, 1, 3},
                         {-1.4332578593401202e-06, -0.00404969409489031, -0.15426876936299344, 0.0, 0.34573123063700656,
                          0.8413447460685429, 2.99595030590511},
                         {-7.146946001803465e-06, 0.023891294408367836, 0.06625243767191856, 1.5, -0.8674951246561629,
                          2.166630941175373, 4.047782588816736});
    }
}

TEST_CASE("reference groupnorm: statistics, forward and backward compose to the gradient", "[reference]") {
    struct Case {
        Dims d;
        int64_t groups;
    };
    const Case k = GENERATE(Case{{2, 6, {3, 5}}, 3}, Case{{3, 6, {1, 1}}, 2}, Case{{1, 4, {4, 3}}, 1},
                            Case{{2, 3, {2, 2}}, 3}, Case{{2, 6, {2, 3, 2}}, 3}, Case{{1, 4, {3, 1, 2}}, 2});
    const Dims d = k.d;
    const int64_t groups = k.groups;
    CAPTURE(d, groups);
    std::mt19937 rng(98);
    const float eps = 1e-5f;
    Tile x(d, rng, -2.0f, 2.0f), y(d, rng), r(d, rng), dx(d, rng);
    const auto stats = static_cast<std::size_t>(d.n * groups);
    std::vector<float> gamma(d.c), beta(d.c), mean(stats), inv_std(stats);
    for (float& g : gamma) g = uniform(rng, 0.5f, 1.5f);
    for (float& b : beta) b = uniform(rng, -0.5f, 0.5f);
    GroupNormKernels& gn = *reference_kernels().groupnorm;
    const int64_t per = d.c / groups;
    const double count = double(per * d.points());

    auto group_statistics = [&] {
        std::vector<double> sum(stats, 0.0), sum_sq(stats, 0.0);
        gn.statistics(x.view, groups, sum.data(), sum_sq.data());
        for (std::size_t s = 0; s < stats; ++s) {
            const double m = sum[s] / count;
            mean[s] = static_cast<float>(m);
            inv_std[s] = static_cast<float>(1.0 / std::sqrt(sum_sq[s] / count - m * m + eps));
        }
    };
    auto objective = [&] {
        group_statistics();
        gn.forward(x.view, groups, mean.data(), inv_std.data(), gamma.data(), beta.data(), y.view);
        return dot(y.view, r.view);
    };
    y.save();
    objective();
    CHECK(y.changed_outside() == 0);

    // Per sample and group, (y - beta) / gamma has mean 0 and variance 1 (less eps).
    for (int64_t n = 0; n < d.n; ++n)
        for (int64_t g = 0; g < groups; ++g) {
            double s = 0.0, s2 = 0.0;
            for_each_element(Dims{1, per, d.space}, [&](int64_t, int64_t cc, const Index& i) {
                const int64_t c = g * per + cc;
                const double z = (y.view.at(n, c, i) - beta[c]) / gamma[c];
                s += z;
                s2 += z * z;
            });
            CHECK(s / count == Approx(0.0).margin(1e-5));
            if (count > 1) CHECK(s2 / count == Approx(1.0).epsilon(1e-3));
        }

    std::vector<double> d_beta(d.c, 0.0), d_gamma(d.c, 0.0), sum_g(stats, 0.0), sum_g_xhat(stats, 0.0);
    gn.backward_statistics(x.view, r.view, groups, mean.data(), inv_std.data(), gamma.data(), d_beta.data(),
                           d_gamma.data(), sum_g.data(), sum_g_xhat.data());
    dx.save();
    gn.backward(x.view, r.view, groups, mean.data(), inv_std.data(), gamma.data(), sum_g.data(), sum_g_xhat.data(),
                count, dx.view);
    CHECK(dx.changed_outside() == 0);
    {
        Dense xs(x.view), rs(r.view), ys(y.view), dxs(dx.view);
        std::vector<double> db2(d.c, 0.0), dg2(d.c, 0.0), sg2(stats, 0.0), sgx2(stats, 0.0);
        gn.forward(xs.view, groups, mean.data(), inv_std.data(), gamma.data(), beta.data(), ys.view);
        gn.backward_statistics(xs.view, rs.view, groups, mean.data(), inv_std.data(), gamma.data(), db2.data(),
                               dg2.data(), sg2.data(), sgx2.data());
        gn.backward(xs.view, rs.view, groups, mean.data(), inv_std.data(), gamma.data(), sg2.data(), sgx2.data(), count,
                    dxs.view);
        CHECK(to_vector(ys.view) == to_vector(y.view));
        CHECK(to_vector(dxs.view) == to_vector(dx.view));
        CHECK(db2 == d_beta);
        CHECK(dg2 == d_gamma);
    }
    if (count > 1) check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
    check_gradient("dgamma", to_vector(d_gamma.data(), d.c), numeric_gradient(vector_view(gamma), objective));
    check_gradient("dbeta", to_vector(d_beta.data(), d.c), numeric_gradient(vector_view(beta), objective));
}

TEST_CASE("reference groupnorm: the local sums add into the caller's and split across tiles of rows", "[reference]") {
    std::mt19937 rng(5);
    const Dims d{2, 4, {6, 3}};
    const int64_t groups = 2;
    Tile x(d, rng, -2.0f, 2.0f), dy(d, rng);
    GroupNormKernels& gn = *reference_kernels().groupnorm;
    std::vector<double> whole(4, 0.0), whole_sq(4, 0.0), parts(4, 0.0), parts_sq(4, 0.0);
    gn.statistics(x.view, groups, whole.data(), whole_sq.data());
    const Dims half{2, 4, {3, 3}};
    gn.statistics(x.view.sub(0, 0, {0, 0}, half), groups, parts.data(), parts_sq.data());
    gn.statistics(x.view.sub(0, 0, {3, 0}, half), groups, parts.data(), parts_sq.data());
    for (std::size_t s = 0; s < 4; ++s) {
        CHECK(parts[s] == Approx(whole[s]).epsilon(1e-12));
        CHECK(parts_sq[s] == Approx(whole_sq[s]).epsilon(1e-12));
    }
    // Sample 1, group 0: channels 0 and 1.
    double expected = 0.0;
    for_each_element(Dims{1, 2, d.space}, [&](int64_t, int64_t c, const Index& i) { expected += x.view.at(1, c, i); });
    CHECK(whole[2] == Approx(expected).epsilon(1e-12));
    // The backward's sums split the same way.
    std::vector<float> mean(4, 0.1f), inv_std(4, 0.9f), gamma{1.0f, 0.5f, 2.0f, -1.0f};
    std::vector<double> a(4, 0.0), b(4, 0.0), sg(4, 0.0), sgx(4, 0.0), a2(4, 0.0), b2(4, 0.0), sg2(4, 0.0),
        sgx2(4, 0.0);
    gn.backward_statistics(x.view, dy.view, groups, mean.data(), inv_std.data(), gamma.data(), a.data(), b.data(),
                           sg.data(), sgx.data());
    for (int64_t y0 : {0, 3})
        gn.backward_statistics(x.view.sub(0, 0, {y0, 0}, half), dy.view.sub(0, 0, {y0, 0}, half), groups, mean.data(),
                               inv_std.data(), gamma.data(), a2.data(), b2.data(), sg2.data(), sgx2.data());
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(a2[i] == Approx(a[i]).epsilon(1e-12).margin(1e-12));
        CHECK(b2[i] == Approx(b[i]).epsilon(1e-12).margin(1e-12));
        CHECK(sg2[i] == Approx(sg[i]).epsilon(1e-12).margin(1e-12));
        CHECK(sgx2[i] == Approx(sgx[i]).epsilon(1e-12).margin(1e-12));
    }
}

TEST_CASE("reference dropout: a mask of global coordinates, scaled by 1 / (1 - p), the same backward", "[reference]") {
    std::mt19937 rng(31);
    const Dims d{3, 4, {10, 12}};
    Tile x(d, rng, 0.5f, 1.5f), y(d, rng), dy(d, rng, 0.5f, 1.5f), dx(d, rng);
    DropoutKernels& k = *reference_kernels().dropout;
    DropoutMask m;
    m.key = 1234;
    m.step = 7;
    m.n0 = 40;
    m.at = {100, 60};
    m.p = 0.25f;
    y.save();
    k.forward(x.view, m, y.view);
    CHECK(y.changed_outside() == 0);
    dx.save();
    k.backward(dy.view, m, dx.view);
    CHECK(dx.changed_outside() == 0);
    int64_t dropped = 0;
    for_each_element(d, [&](int64_t n, int64_t c, const Index& i) {
        const float out = y.view.at(n, c, i);
        const bool kept = out != 0.0f;
        dropped += kept ? 0 : 1;
        if (kept) CHECK(out == x.view.at(n, c, i) * (1.0f / 0.75f));
        // Backward keeps exactly forward's elements.
        CHECK((dx.view.at(n, c, i) != 0.0f) == kept);
        if (kept) CHECK(dx.view.at(n, c, i) == dy.view.at(n, c, i) * (1.0f / 0.75f));
    });
    // Backward is forward's transpose: finite differences of sum(forward(x) * dy) give backward(dy).
    auto objective = [&] {
        k.forward(x.view, m, y.view);
        return dot(y.view, dy.view);
    };
    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
    // About a quarter of 1440 elements: the binomial's standard deviation is about 16.
    CHECK(dropped > 360 - 80);
    CHECK(dropped < 360 + 80);

    // A tile of the same tensor (rows 4.., columns 5.. of samples 1..) draws the same mask where it lies.
    k.forward(x.view, m, y.view);  // of x as it is again, after the finite differences
    const Dims part{2, 4, {6, 7}};
    DropoutMask pm = m;
    pm.n0 += 1, pm.at[0] += 4, pm.at[1] += 5;
    std::vector<float> out(static_cast<std::size_t>(part.elements()));
    k.forward(x.view.sub(1, 0, {4, 5}, part), pm, dense_view(out.data(), part));
    CHECK(to_vector(dense_view(out.data(), part)) == to_vector(y.view.sub(1, 0, {4, 5}, part)));

    // Another step, or another layer's key, draws another mask; p = 0 keeps everything.
    DropoutMask next_step = m, other_layer = m;
    next_step.step += 1;
    other_layer.key += 1;
    for (const DropoutMask& other : {next_step, other_layer}) {
        k.forward(x.view, other, dx.view);
        CHECK(to_vector(dx.view) != to_vector(y.view));
    }
    DropoutMask keep_all = m;
    keep_all.p = 0.0f;
    k.forward(x.view, keep_all, dx.view);
    CHECK(to_vector(dx.view) == to_vector(x.view));
}

namespace {
struct PoolCase {
    int64_t n, c, out_h, out_w, kh, kw, sh, sw, dh, dw;
};
}  // namespace

TEST_CASE("reference pool: backward is the transpose of forward", "[reference]") {
    const PoolKind kind = GENERATE(PoolKind::max, PoolKind::average);
    const PoolCase k = GENERATE(values<PoolCase>({
        {2, 2, 3, 3, 2, 2, 2, 2, 1, 1},  // disjoint windows
        {1, 3, 2, 3, 3, 3, 2, 2, 1, 1},  // overlapping 3x3 stride 2, odd input
        {2, 1, 3, 2, 3, 2, 1, 1, 1, 1},  // non-square window, stride 1
        {1, 2, 2, 2, 2, 2, 1, 1, 2, 2},  // dilation 2
    }));
    const Window win = make_window(k.kh, k.kw, k.sh, k.sw, k.dh, k.dw);
    CAPTURE(kind == PoolKind::max, k.n, k.c, k.out_h, k.out_w, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw);
    check_pool_transposes(kind, Dims{k.n, k.c, {win.input_extent(0, k.out_h), win.input_extent(1, k.out_w)}},
                          Dims{k.n, k.c, {k.out_h, k.out_w}}, win);
}

TEST_CASE("reference pool: hand-computed values", "[reference]") {
    PoolKernels& pool = *reference_kernels().pool;
    std::vector<float> xs{1, 3, 2, 0,  //
                          4, 2, 1, 5,  //
                          0, 1, 7, 6,  //
                          2, 8, 3, 3};
    const ConstView x = dense_view(xs.data(), {1, 1, {4, 4}});
    const Window w2 = make_window(2, 2, 2, 2, 1, 1);
    std::vector<float> ys(4), dy{1, 2, 3, 4}, dx(16, -1.0f);

    SECTION("max") {
        pool.forward(PoolKind::max, x, dense_view(ys.data(), {1, 1, {2, 2}}), w2);
        CHECK(ys == std::vector<float>{4, 5, 8, 7});
        pool.backward(PoolKind::max, x, dense_view(dy.data(), {1, 1, {2, 2}}), dense_view(dx.data(), {1, 1, {4, 4}}),
                      w2);
        CHECK(dx == std::vector<float>{0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 4, 0, 0, 3, 0, 0});
    }
    SECTION("average divides by the window") {
        pool.forward(PoolKind::average, x, dense_view(ys.data(), {1, 1, {2, 2}}), w2);
        CHECK(ys == std::vector<float>{2.5f, 2.0f, 2.75f, 4.75f});
        pool.backward(PoolKind::average, x, dense_view(dy.data(), {1, 1, {2, 2}}),
                      dense_view(dx.data(), {1, 1, {4, 4}}), w2);
        CHECK(dx == std::vector<float>{0.25f, 0.25f, 0.5f, 0.5f, 0.25f, 0.25f, 0.5f, 0.5f,  //
                                       0.75f, 0.75f, 1.0f, 1.0f, 0.75f, 0.75f, 1.0f, 1.0f});
    }
    SECTION("max routes ties to the first maximum in scan order") {
        std::vector<float> ties{5, 5, 1, 6,  //
                                5, 5, 6, 0};
        std::vector<float> y2(2), dy2{1, 2}, dx2(8, -1.0f);
        pool.forward(PoolKind::max, dense_view(ties.data(), {1, 1, {2, 4}}), dense_view(y2.data(), {1, 1, {1, 2}}), w2);
        CHECK(y2 == std::vector<float>{5, 6});
        pool.backward(PoolKind::max, dense_view(ties.data(), {1, 1, {2, 4}}), dense_view(dy2.data(), {1, 1, {1, 2}}),
                      dense_view(dx2.data(), {1, 1, {2, 4}}), w2);
        CHECK(dx2 == std::vector<float>{1, 0, 0, 2, 0, 0, 0, 0});
    }
    SECTION("overlapping windows add their gradients") {
        // 3x1 windows, stride 1, over a column 1, 9, 2, 3: both windows containing 9 send it their gradient.
        std::vector<float> col{1, 9, 2, 3}, dy2{1, 10}, dx2(4, -1.0f);
        const Window w31 = make_window(3, 1, 1, 1, 1, 1);
        pool.backward(PoolKind::max, dense_view(col.data(), {1, 1, {4, 1}}), dense_view(dy2.data(), {1, 1, {2, 1}}),
                      dense_view(dx2.data(), {1, 1, {4, 1}}), w31);
        CHECK(dx2 == std::vector<float>{0, 11, 0, 0});
    }
}

TEST_CASE("reference pool: padding in the margins", "[reference]") {
    PoolKernels& pool = *reference_kernels().pool;
    const Window w3 = make_window(3, 3, 2, 2, 1, 1);
    std::mt19937 rng(3);

    SECTION("max with -infinity margins: 3x3 stride 2 over 5x5 padded by 1") {
        Tensor x({2, 2, {5, 5}}, {{1, 1}, {1, 1}});
        std::vector<float> distinct(100);
        for (std::size_t i = 0; i < distinct.size(); ++i) distinct[i] = 0.05f * float(i) - 2.5f;
        std::shuffle(distinct.begin(), distinct.end(), rng);
        std::size_t next = 0;
        for_each_element(x.dims(), [&](int64_t n, int64_t c, const Index& i) { x.at(n, c, i) = distinct[next++]; });
        x.fill_margins(-std::numeric_limits<float>::infinity());
        Tile y({2, 2, {3, 3}}, rng), r({2, 2, {3, 3}}, rng);
        Tensor dx({2, 2, {5, 5}}, {{1, 1}, {1, 1}});
        dx.fill(-1.0f);

        auto objective = [&] {
            pool.forward(PoolKind::max, x.padded(), y.view, w3);
            return dot(y.view, r.view);
        };
        objective();
        // Against the maximum over the window clipped to the interior, computed independently.
        for_each_element(y.view.dims, [&](int64_t n, int64_t c, const Index& o) {
            const int64_t i = o[0], j = o[1];
            float best = -std::numeric_limits<float>::infinity();
            for (int64_t a = std::max<int64_t>(0, 2 * i - 1); a <= std::min<int64_t>(4, 2 * i + 1); ++a)
                for (int64_t b = std::max<int64_t>(0, 2 * j - 1); b <= std::min<int64_t>(4, 2 * j + 1); ++b)
                    best = std::max(best, x.at(n, c, {a, b}));
            CHECK(y.view.at(n, c, o) == best);
        });
        pool.backward(PoolKind::max, x.padded(), r.view, dx.padded(), w3);
        int64_t nonzero_margin = 0;
        for_each_element(dx.padded_dims(), [&](int64_t n, int64_t c, const Index& i) {
            const bool margin = i[0] == 0 || i[1] == 0 || i[0] == 6 || i[1] == 6;
            if (margin && dx.padded().at(n, c, i) != 0.0f) ++nonzero_margin;
        });
        CHECK(nonzero_margin == 0);
        check_gradient("dx", to_vector(dx.padded()), numeric_gradient(x.padded(), objective));
    }
    SECTION("average with zero margins counts the padding") {
        Tensor x({1, 1, {5, 5}}, {{1, 1}, {1, 1}});
        x.fill(1.0f);
        x.fill_margins(0.0f);
        std::vector<float> ys(9);
        pool.forward(PoolKind::average, x.padded(), dense_view(ys.data(), {1, 1, {3, 3}}), w3);
        const std::vector<float> expected{4, 6, 4, 6, 9, 6, 4, 6, 4};
        for (std::size_t i = 0; i < ys.size(); ++i) CHECK(ys[i] == Approx(expected[i] / 9.0f));
    }
}

TEST_CASE("reference pool: global average pooling by global_sum and broadcast", "[reference]") {
    // Two column tiles give the whole.
    std::mt19937 rng(11);
    check_global_pooling(Dims{2, 3, {3, 4}}, 1, 1, rng);
}

namespace {
// y {n, k} = x times w {k, features}: x is an image {n, c, {h, w}} or a vector {n, c} (fc after fc).
struct FcCase {
    Dims x;
    int64_t k;
};
}  // namespace

TEST_CASE("reference fc: backward is the transpose of forward", "[reference]") {
    const FcCase k = GENERATE(values<FcCase>({{{2, 3, {2, 3}}, 4},
                                              {{3, 5, {1, 1}}, 2},
                                              {{1, 2, {3, 1}}, 3},
                                              {{3, 5, {}}, 2},
                                              {{2, 3, {2, 3, 2}}, 4},  // a volume: c, then depth, rows and columns
                                              {{1, 2, {1, 1, 3}}, 3}}));
    CAPTURE(k.x, k.k);
    std::mt19937 rng(8);
    const Dims xd = k.x, yd{xd.n, k.k, {}}, wd{k.k, xd.c * xd.points(), {}};
    Tile x(xd, rng), w(wd, rng), y(yd, rng), r(yd, rng), dx(xd, rng), dw(wd, rng);
    std::vector<float> bias(static_cast<std::size_t>(k.k));
    for (float& b : bias) b = uniform(rng, -1, 1);
    FcKernels& fc = *reference_kernels().fc;

    auto objective = [&] {
        fc.forward(x.view, w.view, bias.data(), y.view);
        return dot(y.view, r.view);
    };
    y.save();
    objective();
    CHECK(y.changed_outside() == 0);
    dx.save();
    fc.backward_data(r.view, w.view, dx.view);
    CHECK(dx.changed_outside() == 0);
    std::vector<float> db(bias.size() + 2, 7.0f);
    dw.save();
    fc.backward_weights(x.view, r.view, dw.view, db.data() + 1);
    CHECK(dw.changed_outside() == 0);
    CHECK(db.front() == 7.0f);
    CHECK(db.back() == 7.0f);

    {
        Dense xs(x.view), ws(w.view), rs(r.view), ys(y.view), dxs(dx.view), dws(dw.view);
        fc.forward(xs.view, ws.view, bias.data(), ys.view);
        fc.backward_data(rs.view, ws.view, dxs.view);
        fc.backward_weights(xs.view, rs.view, dws.view, nullptr);
        CHECK(to_vector(ys.view) == to_vector(y.view));
        CHECK(to_vector(dxs.view) == to_vector(dx.view));
        CHECK(to_vector(dws.view) == to_vector(dw.view));
    }

    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
    check_gradient("dw", to_vector(dw.view), numeric_gradient(w.view, objective));
    check_gradient("db", to_vector(db.data() + 1, k.k), numeric_gradient(vector_view(bias), objective));
}

TEST_CASE("reference fc: hand-computed outputs", "[reference]") {
    FcKernels& fc = *reference_kernels().fc;
    SECTION("a matrix product with bias") {
        std::vector<float> xs{1, 2, 3}, ws{1, 0, -1, 2, 1, 0}, bias{0.5f, -1.0f}, ys(2);
        fc.forward(dense_view(xs.data(), {1, 3, {}}), dense_view(ws.data(), {2, 3, {}}), bias.data(),
                   dense_view(ys.data(), {1, 2, {}}));
        CHECK(ys == std::vector<float>{-1.5f, 3.0f});
    }
    SECTION("x flattens c, h, w in order") {
        std::vector<float> xs{1, 2, 3, 4, 5, 6, 7, 8}, ws{1, 10, 100, 1000}, ys(2);
        // Two samples of {C=2, H=1, W=2}: features (c0,w0), (c0,w1), (c1,w0), (c1,w1).
        fc.forward(dense_view(xs.data(), {2, 2, {1, 2}}), dense_view(ws.data(), {1, 4, {}}), nullptr,
                   dense_view(ys.data(), {2, 1, {}}));
        CHECK(ys == std::vector<float>{4321.0f, 8765.0f});
        std::vector<float> dy{1, 2}, dx(8), dw(4);
        fc.backward_data(dense_view(dy.data(), {2, 1, {}}), dense_view(ws.data(), {1, 4, {}}),
                         dense_view(dx.data(), {2, 2, {1, 2}}));
        CHECK(dx == std::vector<float>{1, 10, 100, 1000, 2, 20, 200, 2000});
        fc.backward_weights(dense_view(xs.data(), {2, 2, {1, 2}}), dense_view(dy.data(), {2, 1, {}}),
                            dense_view(dw.data(), {1, 4, {}}), nullptr);
        CHECK(dw == std::vector<float>{11, 14, 17, 20});
    }
}

TEST_CASE("reference eltwise: add, copy, accumulate on strided views", "[reference]") {
    std::mt19937 rng(21);
    const Dims d = GENERATE(Dims{2, 3, {4, 5}}, Dims{2, 3, {3, 4, 5}});
    CAPTURE(d);
    const Index origin = Index::filled(d.rank(), 0);
    Tile a(d, rng), b(d, rng), c(d, rng), y(d, rng);
    EltwiseKernels& elt = *reference_kernels().eltwise;
    const std::vector<double> va = to_vector(a.view), vb = to_vector(b.view), vc = to_vector(c.view),
                              vy = to_vector(y.view);
    auto check_all = [&](const std::vector<double>& got, auto expected) {
        int64_t bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
            if (std::abs(got[i] - expected(i)) > 1e-6) ++bad;
        CHECK(bad == 0);
    };

    SECTION("add") {
        y.save();
        elt.add({a.view, b.view, c.view}, y.view);
        CHECK(y.changed_outside() == 0);
        check_all(to_vector(y.view), [&](std::size_t i) { return va[i] + vb[i] + vc[i]; });
    }
    SECTION("add in place") {
        a.save();
        elt.add({a.view, b.view}, a.view);
        CHECK(a.changed_outside() == 0);
        check_all(to_vector(a.view), [&](std::size_t i) { return va[i] + vb[i]; });
    }
    SECTION("copy into a channel range, as concat does") {
        Tile wide({2, 7, d.space}, rng);
        wide.save();
        elt.copy(a.view, wide.view.sub(0, 2, origin, d));
        check_all(to_vector(wide.view.sub(0, 2, origin, d)), [&](std::size_t i) { return va[i]; });
        // Channels 0, 1, 5, 6 of the wide view keep their values.
        int64_t changed = 0;
        for_each_element(wide.view.dims, [&](int64_t n, int64_t ch, const Index& i) {
            const auto offset = static_cast<std::size_t>(&wide.view.at(n, ch, i) - wide.storage.data());
            if ((ch < 2 || ch >= 5) && wide.view.at(n, ch, i) != wide.saved[offset]) ++changed;
        });
        CHECK(changed == 0);
        CHECK(wide.changed_outside() == 0);
    }
    SECTION("accumulate") {
        y.save();
        elt.accumulate(a.view, y.view);
        CHECK(y.changed_outside() == 0);
        check_all(to_vector(y.view), [&](std::size_t i) { return vy[i] + va[i]; });
    }
}

TEST_CASE("reference eltwise: sgd with momentum and weight decay, two steps by hand", "[reference]") {
    EltwiseKernels& elt = *reference_kernels().eltwise;
    std::vector<float> w{1.0f, -2.0f}, m{0.0f, 0.5f};
    const std::vector<float> g{0.5f, 1.0f};
    elt.sgd(w.data(), m.data(), g.data(), 2, 0.1f, 0.9f, 0.01f);
    // w0: g' = 0.5 + 0.01 * 1 = 0.51; m = 0.51; w = 1 - 0.051 = 0.949
    // w1: g' = 1 + 0.01 * -2 = 0.98; m = 0.45 + 0.98 = 1.43; w = -2 - 0.143 = -2.143
    CHECK(m[0] == Approx(0.51));
    CHECK(w[0] == Approx(0.949));
    CHECK(m[1] == Approx(1.43));
    CHECK(w[1] == Approx(-2.143));
    elt.sgd(w.data(), m.data(), g.data(), 2, 0.1f, 0.9f, 0.01f);
    // w0: g' = 0.5 + 0.00949 = 0.50949; m = 0.459 + 0.50949 = 0.96849; w = 0.949 - 0.096849 = 0.852151
    // w1: g' = 1 - 0.02143 = 0.97857; m = 1.287 + 0.97857 = 2.26557; w = -2.143 - 0.226557 = -2.369557
    CHECK(m[0] == Approx(0.96849));
    CHECK(w[0] == Approx(0.852151));
    CHECK(m[1] == Approx(2.26557));
    CHECK(w[1] == Approx(-2.369557));

    // No momentum, no decay: plain gradient descent; count limits the update.
    std::vector<float> w2{1.0f, 1.0f}, m2{0.0f, 0.0f};
    elt.sgd(w2.data(), m2.data(), g.data(), 1, 0.5f, 0.0f, 0.0f);
    CHECK(w2[0] == Approx(0.75));
    CHECK(w2[1] == 1.0f);
    CHECK(m2[1] == 0.0f);
}

TEST_CASE("reference kernels: mismatched views are internal errors", "[reference]") {
    std::vector<float> buffer(64, 1.0f), out(64), ws(9, 1.0f);
    const Kernels k = reference_kernels();
    // A 3x3 convolution to 2x2 reads 4x4; a 5x5 input means the caller sized the views wrongly.
    CHECK_THROWS_AS(k.conv->forward(dense_view(buffer.data(), {1, 1, {5, 5}}), dense_view(ws.data(), {1, 1, {3, 3}}),
                                    nullptr, dense_view(out.data(), {1, 1, {2, 2}}), make_window(3, 3, 1, 1, 1, 1)),
                    dsl::InternalError);
    CHECK_THROWS_AS(k.activation->forward(dsl::frontend::Activation::relu, dense_view(buffer.data(), {1, 2, {2, 2}}),
                                          0.0f, dense_view(out.data(), {1, 2, {2, 3}})),
                    dsl::InternalError);
    const std::vector<std::int32_t> labels{3};
    CHECK_THROWS_AS(
        k.loss->cross_entropy(dense_view(buffer.data(), {1, 3, {}}), label_view(labels, {1, 1, {}}), 1.0f, View{}),
        dsl::InternalError);
    // A volume is never the same as an image of as many elements.
    CHECK_THROWS_AS(k.activation->forward(dsl::frontend::Activation::relu, dense_view(buffer.data(), {1, 2, {2, 2, 2}}),
                                          0.0f, dense_view(out.data(), {1, 2, {4, 2}})),
                    dsl::InternalError);
}
