// The reference kernels on volumes (three spatial dimensions: depth, rows, columns), each kind as its images
// are tested in test_reference_kernels.cpp: against central finite differences of their own forwards (with the
// step and the tolerance explained there) and against values worked out by hand, on strided tiles with margins
// along every dimension, uneven extents, strides, dilations and padding in the margins; and views of mismatched
// extents or ranks, which are internal errors.
#include "../backend/src/random/splitmix.hpp"
#include "reference_checks.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/base/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace {

using namespace dsl::backend;
using std::int64_t;

// A volume's window: kernel, stride and dilation per dimension (depth, rows, columns).
Window make_window(Index kernel, Index stride, Index dilation) {
    Window w;
    w.kernel = kernel;
    w.stride = stride;
    w.dilation = dilation;
    return w;
}

// The input extents that a window's outputs of `out` extents read.
Index input_extents(const Window& w, const Index& out) {
    Index in = out;
    for (int d = 0; d < out.rank(); ++d) in[d] = w.input_extent(d, out[d]);
    return in;
}

}  // namespace

namespace {
struct Conv3Case {
    int64_t n, c, f;
    Index out, kernel, stride, dilation;
};
}  // namespace

TEST_CASE("reference conv on volumes: backward_data and backward_weights are the transposes of forward",
          "[reference]") {
    const Conv3Case k = GENERATE(values<Conv3Case>({
        {1, 1, 1, {3, 3, 3}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},  // the plain case
        {2, 2, 3, {5, 4, 3}, {3, 2, 1}, {1, 1, 1}, {1, 1, 1}},  // uneven extents and kernel
        {1, 2, 2, {2, 3, 2}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},  // stride 2
        {1, 2, 2, {2, 2, 3}, {2, 2, 2}, {1, 2, 1}, {2, 1, 2}},  // dilation 2 and stride 2, mixed by dimension
        {2, 2, 1, {3, 2, 2}, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}},  // 1x1x1 stride 2: unread inputs get zero
    }));
    const Window win = make_window(k.kernel, k.stride, k.dilation);
    CAPTURE(k.n, k.c, k.f, k.out, k.kernel, k.stride, k.dilation);
    check_conv_transposes(Dims{k.n, k.c, input_extents(win, k.out)}, Dims{k.f, k.c, k.kernel}, Dims{k.n, k.f, k.out},
                          win);
}

TEST_CASE("reference conv on volumes: hand-computed outputs", "[reference]") {
    ConvKernels& conv = *reference_kernels().conv;
    std::vector<float> xs(64);
    std::iota(xs.begin(), xs.end(), 1.0f);  // x(z, y, x) = 1 + 9z + 3y + x on 3x3x3, 1 + 16z + 4y + x on 4x4x4
    const Window w222 = make_window({2, 2, 2}, {1, 1, 1}, {1, 1, 1});

    SECTION("2x2x2 on 3x3x3, weights 1..8 (catches flipped or transposed kernels)") {
        std::vector<float> ws(8);
        std::iota(ws.begin(), ws.end(), 1.0f);
        std::vector<float> ys(8);
        const float bias = 0.5f;
        conv.forward(dense_view(xs.data(), {1, 1, {3, 3, 3}}), dense_view(ws.data(), {1, 1, {2, 2, 2}}), &bias,
                     dense_view(ys.data(), {1, 1, {2, 2, 2}}), w222);
        // y(0,0,0) = 1*1+2*2+3*4+4*5 + 5*10+6*11+7*13+8*14 = 37 + 319 = 356; each step along the columns adds
        // sum(w) = 36, along the rows 3 * 36, along the depth 9 * 36.
        CHECK(ys == std::vector<float>{356.5f, 392.5f, 464.5f, 500.5f, 680.5f, 716.5f, 788.5f, 824.5f});

        // The transpose of a single output: dx = dy * w placed at its window; dw = dy * x over the window.
        std::vector<float> dy{0, 0, 0, 0, 0, 0, 0, 2}, dx(27, -1.0f), dw(8, -1.0f);
        float db = -1.0f;
        conv.backward_data(dense_view(dy.data(), {1, 1, {2, 2, 2}}), dense_view(ws.data(), {1, 1, {2, 2, 2}}),
                           dense_view(dx.data(), {1, 1, {3, 3, 3}}), w222);
        CHECK(dx == std::vector<float>{0, 0, 0, 0, 0,  0,  0, 0,  0,  //
                                       0, 0, 0, 0, 2,  4,  0, 6,  8,  //
                                       0, 0, 0, 0, 10, 12, 0, 14, 16});
        conv.backward_weights(dense_view(xs.data(), {1, 1, {3, 3, 3}}), dense_view(dy.data(), {1, 1, {2, 2, 2}}),
                              dense_view(dw.data(), {1, 1, {2, 2, 2}}), &db, w222);
        // dw(a) = 2 * x(1 + a) = 2 * (14 + 9a0 + 3a1 + a2)
        CHECK(dw == std::vector<float>{28, 30, 34, 36, 46, 48, 52, 54});
        CHECK(db == 2.0f);
    }
    SECTION("2x2x2 stride 2: block sums") {
        std::vector<float> ws(8, 1.0f), ys(8);
        conv.forward(dense_view(xs.data(), {1, 1, {4, 4, 4}}), dense_view(ws.data(), {1, 1, {2, 2, 2}}), nullptr,
                     dense_view(ys.data(), {1, 1, {2, 2, 2}}), make_window({2, 2, 2}, {2, 2, 2}, {1, 1, 1}));
        // 8 x(2i, 2j, 2k) + 4 (16 + 4 + 1) = 92 + 256i + 64j + 16k
        CHECK(ys == std::vector<float>{92, 108, 156, 172, 348, 364, 412, 428});
    }
    SECTION("2x2x2 dilation 2 on 3x3x3: the corners") {
        std::vector<float> ws(8, 1.0f), ys(1);
        conv.forward(dense_view(xs.data(), {1, 1, {3, 3, 3}}), dense_view(ws.data(), {1, 1, {2, 2, 2}}), nullptr,
                     dense_view(ys.data(), {1, 1, {1, 1, 1}}), make_window({2, 2, 2}, {1, 1, 1}, {2, 2, 2}));
        CHECK(ys[0] == 1 + 3 + 7 + 9 + 19 + 21 + 25 + 27);
    }
    SECTION("two channels in, two filters out, 1x1x1") {
        // x channel 0 = 1..8, channel 1 = 9..16 on 2x2x2; 1x1x1 filters mix the channels.
        std::vector<float> ws{1, 10, -1, 2}, ys(16);
        conv.forward(dense_view(xs.data(), {1, 2, {2, 2, 2}}), dense_view(ws.data(), {2, 2, {1, 1, 1}}), nullptr,
                     dense_view(ys.data(), {1, 2, {2, 2, 2}}), make_window({1, 1, 1}, {1, 1, 1}, {1, 1, 1}));
        for (int i = 0; i < 8; ++i) {
            CHECK(ys[i] == xs[i] + 10 * xs[8 + i]);
            CHECK(ys[8 + i] == -xs[i] + 2 * xs[8 + i]);
        }
    }
    SECTION("same padding lives in zero margins") {
        Tensor x({1, 1, {3, 3, 3}}, {{1, 1}, {1, 1}, {1, 1}});
        x.fill(1.0f);
        x.fill_margins(0.0f);
        std::vector<float> ws(27, 1.0f), ys(27);
        conv.forward(x.padded(), dense_view(ws.data(), {1, 1, {3, 3, 3}}), nullptr,
                     dense_view(ys.data(), {1, 1, {3, 3, 3}}), make_window({3, 3, 3}, {1, 1, 1}, {1, 1, 1}));
        // The window's taps inside the volume: 2 or 3 along each dimension.
        CHECK(ys == std::vector<float>{8,  12, 8,  12, 18, 12, 8,  12, 8,   //
                                       12, 18, 12, 18, 27, 18, 12, 18, 12,  //
                                       8,  12, 8,  12, 18, 12, 8,  12, 8});
    }
}

namespace {
struct Pool3Case {
    int64_t n, c;
    Index out, kernel, stride, dilation;
};
}  // namespace

TEST_CASE("reference pool on volumes: backward is the transpose of forward", "[reference]") {
    const PoolKind kind = GENERATE(PoolKind::max, PoolKind::average);
    const Pool3Case k = GENERATE(values<Pool3Case>({
        {2, 2, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}},  // disjoint windows
        {1, 2, {2, 1, 2}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},  // overlapping 3x3x3 stride 2, odd input
        {1, 1, {3, 2, 2}, {3, 2, 1}, {1, 1, 1}, {1, 1, 1}},  // uneven window, stride 1
        {1, 2, {2, 2, 1}, {2, 2, 2}, {1, 2, 1}, {2, 1, 2}},  // dilation 2, strides mixed by dimension
    }));
    const Window win = make_window(k.kernel, k.stride, k.dilation);
    CAPTURE(kind == PoolKind::max, k.n, k.c, k.out, k.kernel, k.stride, k.dilation);
    check_pool_transposes(kind, Dims{k.n, k.c, input_extents(win, k.out)}, Dims{k.n, k.c, k.out}, win);
}

TEST_CASE("reference pool on volumes: hand-computed values", "[reference]") {
    PoolKernels& pool = *reference_kernels().pool;
    std::vector<float> xs(64);
    std::iota(xs.begin(), xs.end(), 1.0f);  // x(z, y, x) = 1 + 16z + 4y + x on 4x4x4
    const Window w2 = make_window({2, 2, 2}, {2, 2, 2}, {1, 1, 1});
    std::vector<float> ys(8), dy{1, 2, 3, 4, 5, 6, 7, 8}, dx(64, -1.0f);
    const ConstView x = dense_view(xs.data(), {1, 1, {4, 4, 4}});
    const View yv = dense_view(ys.data(), {1, 1, {2, 2, 2}}), dxv = dense_view(dx.data(), {1, 1, {4, 4, 4}});

    SECTION("max: each block's last element") {
        pool.forward(PoolKind::max, x, yv, w2);
        // x(2i + 1, 2j + 1, 2k + 1) = 22 + 32i + 8j + 2k
        CHECK(ys == std::vector<float>{22, 24, 30, 32, 54, 56, 62, 64});
        pool.backward(PoolKind::max, x, dense_view(dy.data(), {1, 1, {2, 2, 2}}), dxv, w2);
        for (int64_t i = 0; i < 64; ++i) {
            const int64_t z = i / 16, r = i / 4 % 4, c = i % 4;
            const bool last = z % 2 == 1 && r % 2 == 1 && c % 2 == 1;
            CHECK(dx[i] == (last ? dy[(z / 2) * 4 + (r / 2) * 2 + c / 2] : 0.0f));
        }
    }
    SECTION("average divides by the window") {
        pool.forward(PoolKind::average, x, yv, w2);
        // x(2i, 2j, 2k) + (16 + 4 + 1) / 2 = 11.5 + 32i + 8j + 2k
        CHECK(ys == std::vector<float>{11.5f, 13.5f, 19.5f, 21.5f, 43.5f, 45.5f, 51.5f, 53.5f});
        pool.backward(PoolKind::average, x, dense_view(dy.data(), {1, 1, {2, 2, 2}}), dxv, w2);
        for (int64_t i = 0; i < 64; ++i) CHECK(dx[i] == dy[(i / 32) * 4 + (i / 8 % 2) * 2 + i % 4 / 2] / 8.0f);
    }
    SECTION("max routes ties to the first maximum in tap order, the last dimension fastest") {
        // Maxima at (0, 1, 1), tap 3, and (1, 0, 0), tap 4: the gradient goes to tap 3.
        std::vector<float> ties{0, 1, 2, 5, 5, 3, 4, 1}, y1(1), g{2}, d(8, -1.0f);
        const Window w = make_window({2, 2, 2}, {1, 1, 1}, {1, 1, 1});
        pool.forward(PoolKind::max, dense_view(ties.data(), {1, 1, {2, 2, 2}}),
                     dense_view(y1.data(), {1, 1, {1, 1, 1}}), w);
        CHECK(y1[0] == 5.0f);
        pool.backward(PoolKind::max, dense_view(ties.data(), {1, 1, {2, 2, 2}}),
                      dense_view(g.data(), {1, 1, {1, 1, 1}}), dense_view(d.data(), {1, 1, {2, 2, 2}}), w);
        CHECK(d == std::vector<float>{0, 0, 0, 2, 0, 0, 0, 0});
    }
    SECTION("overlapping windows add their gradients") {
        // 1x3x1 windows, stride 1, over a column 1, 9, 2, 3 (along the rows): both windows holding 9 send it
        // their gradient.
        std::vector<float> col{1, 9, 2, 3}, g{1, 10}, d(4, -1.0f);
        pool.backward(PoolKind::max, dense_view(col.data(), {1, 1, {1, 4, 1}}), dense_view(g.data(), {1, 1, {1, 2, 1}}),
                      dense_view(d.data(), {1, 1, {1, 4, 1}}), make_window({1, 3, 1}, {1, 1, 1}, {1, 1, 1}));
        CHECK(d == std::vector<float>{0, 11, 0, 0});
    }
}

TEST_CASE("reference pool on volumes: padding in the margins", "[reference]") {
    PoolKernels& pool = *reference_kernels().pool;
    const Window w3 = make_window({3, 3, 3}, {2, 2, 2}, {1, 1, 1});
    std::mt19937 rng(13);
    const Margins one{{1, 1}, {1, 1}, {1, 1}};

    SECTION("max with -infinity margins: 3x3x3 stride 2 over 5x4x5 padded by 1") {
        Tensor x({2, 2, {5, 3, 5}}, one);
        std::vector<float> distinct(static_cast<std::size_t>(x.dims().elements()));
        for (std::size_t i = 0; i < distinct.size(); ++i) distinct[i] = 0.05f * float(i) - 7.5f;
        std::shuffle(distinct.begin(), distinct.end(), rng);
        std::size_t next = 0;
        for_each_element(x.dims(), [&](int64_t n, int64_t c, const Index& i) { x.at(n, c, i) = distinct[next++]; });
        x.fill_margins(-std::numeric_limits<float>::infinity());
        Tile y({2, 2, {3, 2, 3}}, rng), r({2, 2, {3, 2, 3}}, rng);
        Tensor dx({2, 2, {5, 3, 5}}, one);
        dx.fill(-1.0f);

        auto objective = [&] {
            pool.forward(PoolKind::max, x.padded(), y.view, w3);
            return dot(y.view, r.view);
        };
        objective();
        // Against the maximum over the window clipped to the interior, computed independently.
        for_each_element(y.view.dims, [&](int64_t n, int64_t c, const Index& o) {
            float best = -std::numeric_limits<float>::infinity();
            for_each_element(Dims{1, 1, {3, 3, 3}}, [&](int64_t, int64_t, const Index& a) {
                const Index i{2 * o[0] - 1 + a[0], 2 * o[1] - 1 + a[1], 2 * o[2] - 1 + a[2]};
                bool inside = true;
                for (int d = 0; d < 3; ++d) inside = inside && i[d] >= 0 && i[d] < x.dims().space[d];
                if (inside) best = std::max(best, x.at(n, c, i));
            });
            CHECK(y.view.at(n, c, o) == best);
        });
        pool.backward(PoolKind::max, x.padded(), r.view, dx.padded(), w3);
        int64_t nonzero_margin = 0;
        const Dims padded = dx.padded_dims();
        for_each_element(padded, [&](int64_t n, int64_t c, const Index& i) {
            bool margin = false;
            for (int d = 0; d < 3; ++d) margin = margin || i[d] == 0 || i[d] == padded.space[d] - 1;
            if (margin && dx.padded().at(n, c, i) != 0.0f) ++nonzero_margin;
        });
        CHECK(nonzero_margin == 0);
        check_gradient("dx", to_vector(dx.padded()), numeric_gradient(x.padded(), objective));
    }
    SECTION("average with zero margins counts the padding") {
        Tensor x({1, 1, {5, 5, 5}}, one);
        x.fill(1.0f);
        x.fill_margins(0.0f);
        std::vector<float> ys(27);
        pool.forward(PoolKind::average, x.padded(), dense_view(ys.data(), {1, 1, {3, 3, 3}}), w3);
        // Windows at 2o - 1 .. 2o + 1: 2, 3 and 2 of their taps inside along each dimension.
        const int64_t inside[3] = {2, 3, 2};
        for (int64_t i = 0; i < 27; ++i)
            CHECK(ys[i] == Approx(float(inside[i / 9] * inside[i / 3 % 3] * inside[i % 3]) / 27.0f));
    }
}

TEST_CASE("reference pool on volumes: global average pooling by global_sum and broadcast", "[reference]") {
    // Two tiles of depth give the whole.
    std::mt19937 rng(12);
    check_global_pooling(Dims{2, 3, {3, 4, 2}}, 0, 1, rng);
}

TEST_CASE("reference batchnorm and groupnorm on volumes: the local sums split across tiles of depth", "[reference]") {
    std::mt19937 rng(6);
    const Dims d{2, 4, {4, 3, 2}}, half{2, 4, {2, 3, 2}};
    Tile x(d, rng, -2.0f, 2.0f), dy(d, rng);
    const Kernels k = reference_kernels();
    std::vector<float> mean(4, 0.1f), inv_std(4, 0.9f), gamma{1.0f, 0.5f, 2.0f, -1.0f};
    auto close = [](const std::vector<double>& a, const std::vector<double>& b) {
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12).margin(1e-12));
    };
    SECTION("batchnorm") {
        std::vector<double> s(4, 0.0), s2(4, 0.0), g(4, 0.0), gx(4, 0.0), ps(4, 0.0), ps2(4, 0.0), pg(4, 0.0),
            pgx(4, 0.0);
        k.batchnorm->statistics(x.view, s.data(), s2.data());
        k.batchnorm->backward_statistics(x.view, dy.view, mean.data(), inv_std.data(), g.data(), gx.data());
        for (int64_t z0 : {0, 2}) {
            const ConstView xp = x.view.sub(0, 0, {z0, 0, 0}, half), dyp = dy.view.sub(0, 0, {z0, 0, 0}, half);
            k.batchnorm->statistics(xp, ps.data(), ps2.data());
            k.batchnorm->backward_statistics(xp, dyp, mean.data(), inv_std.data(), pg.data(), pgx.data());
        }
        close(ps, s), close(ps2, s2), close(pg, g), close(pgx, gx);
        // Channel 2: the sum of every sample's voxels.
        double expected = 0.0;
        for_each_element(Dims{2, 1, d.space},
                         [&](int64_t n, int64_t, const Index& i) { expected += x.view.at(n, 2, i); });
        CHECK(s[2] == Approx(expected).epsilon(1e-12));
    }
    SECTION("groupnorm") {
        const int64_t groups = 2;
        std::vector<double> s(4, 0.0), s2(4, 0.0), ps(4, 0.0), ps2(4, 0.0);
        std::vector<double> a(4, 0.0), b(4, 0.0), sg(4, 0.0), sgx(4, 0.0), a2(4, 0.0), b2(4, 0.0), sg2(4, 0.0),
            sgx2(4, 0.0);
        k.groupnorm->statistics(x.view, groups, s.data(), s2.data());
        k.groupnorm->backward_statistics(x.view, dy.view, groups, mean.data(), inv_std.data(), gamma.data(), a.data(),
                                         b.data(), sg.data(), sgx.data());
        for (int64_t z0 : {0, 2}) {
            const ConstView xp = x.view.sub(0, 0, {z0, 0, 0}, half), dyp = dy.view.sub(0, 0, {z0, 0, 0}, half);
            k.groupnorm->statistics(xp, groups, ps.data(), ps2.data());
            k.groupnorm->backward_statistics(xp, dyp, groups, mean.data(), inv_std.data(), gamma.data(), a2.data(),
                                             b2.data(), sg2.data(), sgx2.data());
        }
        close(ps, s), close(ps2, s2), close(a2, a), close(b2, b), close(sg2, sg), close(sgx2, sgx);
        // Sample 1, group 0: channels 0 and 1.
        double expected = 0.0;
        for_each_element(Dims{1, 2, d.space},
                         [&](int64_t, int64_t c, const Index& i) { expected += x.view.at(1, c, i); });
        CHECK(s[2] == Approx(expected).epsilon(1e-12));
    }
}

TEST_CASE("reference activation on volumes: every function, element by element", "[reference]") {
    using dsl::frontend::Activation;
    const Activation f =
        GENERATE(Activation::relu, Activation::leaky_relu, Activation::sigmoid, Activation::tanh, Activation::gelu);
    const float slope = f == Activation::leaky_relu ? 0.1f : 0.0f;
    CAPTURE(static_cast<int>(f));
    ActivationKernels& act = *reference_kernels().activation;
    std::mt19937 rng(19);
    const Dims d{2, 3, {3, 2, 4}};
    Tile x(d, rng), y(d, rng), r(d, rng), dx(d, rng);
    x.fill([&] { return 3.0f * off_zero(rng); });
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
    // The same function of each element as on a vector of them.
    Dense xs(x.view), rs(r.view);
    const Dims flat{1, d.elements(), {}};
    std::vector<float> yv(static_cast<std::size_t>(d.elements())), dxv(yv.size());
    act.forward(f, dense_view(xs.data.data(), flat), slope, dense_view(yv.data(), flat));
    act.backward(f, dense_view(xs.data.data(), flat), dense_view(rs.data.data(), flat), slope,
                 dense_view(dxv.data(), flat));
    CHECK(to_vector(y.view) == std::vector<double>(yv.begin(), yv.end()));
    CHECK(to_vector(dx.view) == std::vector<double>(dxv.begin(), dxv.end()));
    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
}

TEST_CASE("reference dropout on volumes: the volume's mask of global places, the same backward", "[reference]") {
    std::mt19937 rng(37);
    const Dims d{2, 3, {4, 5, 6}};
    Tile x(d, rng, 0.5f, 1.5f), y(d, rng), dy(d, rng, 0.5f, 1.5f), dx(d, rng);
    DropoutKernels& k = *reference_kernels().dropout;
    DropoutMask m;
    m.key = 4321;
    m.step = 5;
    m.n0 = 7;
    m.at = {30, 100, 60};
    m.p = 0.25f;
    y.save();
    k.forward(x.view, m, y.view);
    CHECK(y.changed_outside() == 0);
    dx.save();
    k.backward(dy.view, m, dx.view);
    CHECK(dx.changed_outside() == 0);
    // Each element's fate is dropout_keep's of its global sample, channel, depth, row and column.
    const std::uint32_t threshold = dropout_threshold(m.p);
    int64_t dropped = 0, wrong = 0;
    for_each_element(d, [&](int64_t n, int64_t c, const Index& i) {
        const bool kept =
            dropout_keep(m.key, m.step, m.n0 + n, c, m.at[0] + i[0], m.at[1] + i[1], m.at[2] + i[2], threshold);
        dropped += kept ? 0 : 1;
        wrong += y.view.at(n, c, i) != (kept ? x.view.at(n, c, i) * (1.0f / 0.75f) : 0.0f);
        wrong += dx.view.at(n, c, i) != (kept ? dy.view.at(n, c, i) * (1.0f / 0.75f) : 0.0f);
    });
    CHECK(wrong == 0);
    // About a quarter of 720 elements: the binomial's standard deviation is about 12.
    CHECK(dropped > 180 - 60);
    CHECK(dropped < 180 + 60);
    auto objective = [&] {
        k.forward(x.view, m, y.view);
        return dot(y.view, dy.view);
    };
    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));

    // A tile of the same tensor (sample 1, depth 1.., rows 2.., columns 3..) draws the same mask where it lies.
    k.forward(x.view, m, y.view);
    const Dims part{1, 3, {3, 3, 3}};
    DropoutMask pm = m;
    pm.n0 += 1, pm.at[0] += 1, pm.at[1] += 2, pm.at[2] += 3;
    std::vector<float> out(static_cast<std::size_t>(part.elements()));
    k.forward(x.view.sub(1, 0, {1, 2, 3}, part), pm, dense_view(out.data(), part));
    CHECK(to_vector(dense_view(out.data(), part)) == to_vector(y.view.sub(1, 0, {1, 2, 3}, part)));
}

TEST_CASE("reference fc on volumes: x flattens c, then depth, rows and columns", "[reference]") {
    FcKernels& fc = *reference_kernels().fc;
    // Two samples of {C=1, D=2, H=1, W=2} and of {C=2, D=1, H=1, W=2}: four features each, in order.
    const Dims xd = GENERATE(Dims{2, 1, {2, 1, 2}}, Dims{2, 2, {1, 1, 2}});
    CAPTURE(xd);
    std::vector<float> xs{1, 2, 3, 4, 5, 6, 7, 8}, ws{1, 10, 100, 1000}, ys(2);
    fc.forward(dense_view(xs.data(), xd), dense_view(ws.data(), {1, 4, {}}), nullptr,
               dense_view(ys.data(), {2, 1, {}}));
    CHECK(ys == std::vector<float>{4321.0f, 8765.0f});
    std::vector<float> dy{1, 2}, dx(8), dw(4);
    fc.backward_data(dense_view(dy.data(), {2, 1, {}}), dense_view(ws.data(), {1, 4, {}}), dense_view(dx.data(), xd));
    CHECK(dx == std::vector<float>{1, 10, 100, 1000, 2, 20, 200, 2000});
    fc.backward_weights(dense_view(xs.data(), xd), dense_view(dy.data(), {2, 1, {}}), dense_view(dw.data(), {1, 4, {}}),
                        nullptr);
    CHECK(dw == std::vector<float>{11, 14, 17, 20});
}

TEST_CASE("reference loss on volumes: cross-entropy by hand, per voxel", "[reference]") {
    LossKernels& loss = *reference_kernels().loss;
    // Logits {1, 3, {2, 1, 1}}: voxel 0 has logits 1, 2, 3 and label 2; voxel 1 has 0, 0, 0 and label 0.
    std::vector<float> logits{1, 0, 2, 0, 3, 0}, dlogits(6);
    const std::vector<std::int32_t> labels{2, 0};
    const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    const double total =
        loss.cross_entropy(dense_view(logits.data(), {1, 3, {2, 1, 1}}), label_view(labels, {1, 1, {2, 1, 1}}), 0.5f,
                           dense_view(dlogits.data(), {1, 3, {2, 1, 1}}));
    CHECK(total == Approx((lse - 3.0) + std::log(3.0)));
    for (int k = 0; k < 3; ++k) {
        CHECK(dlogits[2 * k] == Approx(0.5 * (std::exp(k + 1.0 - lse) - (k == 2 ? 1.0 : 0.0))));
        CHECK(dlogits[2 * k + 1] == Approx(0.5 * (1.0 / 3.0 - (k == 0 ? 1.0 : 0.0))));
    }
}

TEST_CASE("reference kernels: mismatched volumes are internal errors", "[reference]") {
    std::vector<float> buffer(512, 1.0f), out(512), ws(64, 1.0f);
    const Kernels k = reference_kernels();
    const Window w333 = make_window({3, 3, 3}, {1, 1, 1}, {1, 1, 1});
    auto v = [](std::vector<float>& data, Dims d) { return dense_view(data.data(), d); };
    // A 3x3x3 convolution to 2x2x2 reads 4x4x4: 4x4x5 is sized wrongly, and so are weights of 3x3 or 3x3x2.
    CHECK_NOTHROW(k.conv->forward(v(buffer, {1, 1, {4, 4, 4}}), v(ws, {1, 1, {3, 3, 3}}), nullptr,
                                  v(out, {1, 1, {2, 2, 2}}), w333));
    CHECK_THROWS_AS(k.conv->forward(v(buffer, {1, 1, {4, 4, 5}}), v(ws, {1, 1, {3, 3, 3}}), nullptr,
                                    v(out, {1, 1, {2, 2, 2}}), w333),
                    dsl::InternalError);
    CHECK_THROWS_AS(
        k.conv->forward(v(buffer, {1, 1, {4, 4, 4}}), v(ws, {1, 1, {3, 3}}), nullptr, v(out, {1, 1, {2, 2, 2}}), w333),
        dsl::InternalError);
    CHECK_THROWS_AS(k.conv->forward(v(buffer, {1, 1, {4, 4, 4}}), v(ws, {1, 1, {3, 3, 2}}), nullptr,
                                    v(out, {1, 1, {2, 2, 2}}), w333),
                    dsl::InternalError);
    // A window of an image's rank for volumes, or of a volume's for images.
    CHECK_THROWS_AS(k.pool->forward(PoolKind::max, v(buffer, {1, 1, {4, 4, 4}}), v(out, {1, 1, {2, 2, 2}}),
                                    make_window(3, 3, 1, 1, 1, 1)),
                    dsl::InternalError);
    CHECK_THROWS_AS(k.pool->forward(PoolKind::max, v(buffer, {1, 1, {4, 4}}), v(out, {1, 1, {2, 2}}), w333),
                    dsl::InternalError);
    // An input and an output of different ranks.
    CHECK_THROWS_AS(k.pool->forward(PoolKind::max, v(buffer, {1, 1, {4, 4, 4}}), v(out, {1, 1, {2, 4}}), w333),
                    dsl::InternalError);
    // fc's weights must cover every channel and place of x.
    CHECK_THROWS_AS(k.fc->forward(v(buffer, {1, 2, {2, 2, 2}}), v(ws, {2, 8, {}}), nullptr, v(out, {1, 2, {}})),
                    dsl::InternalError);
    // Labels {n, 1, extents} of the logits' extents.
    const std::vector<std::int32_t> labels(16, 0);
    CHECK_THROWS_AS(
        k.loss->cross_entropy(v(buffer, {1, 3, {2, 2, 2}}), label_view(labels, {1, 1, {2, 4}}), 1.0f, View{}),
        dsl::InternalError);
    CHECK_THROWS_AS(
        k.loss->cross_entropy(v(buffer, {1, 3, {2, 2, 2}}), label_view(labels, {1, 1, {2, 2, 3}}), 1.0f, View{}),
        dsl::InternalError);
    // A dropout mask's place has the view's rank.
    DropoutMask m;
    m.at = {1, 2};
    CHECK_THROWS_AS(k.dropout->forward(v(buffer, {1, 1, {2, 2, 2}}), m, v(out, {1, 1, {2, 2, 2}})), dsl::InternalError);
}
