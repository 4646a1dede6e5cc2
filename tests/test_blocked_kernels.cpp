// The CPU kernel set over blocked views (channels in blocks of 16: view.hpp, blocked_kernels.hpp) against the
// same kernels over planar ones: batch norm, the leaky ReLU, add, copy, accumulate and pooling bit for bit
// (the statistics' sums within double rounding), on tiles with margins and without, of images and volumes; and
// oneDNN's convolutions of blocked tiles without margins, which pad them themselves (Window::zeros_outside),
// against the planar tiles whose margins hold the padding.
#include "../backend/src/kernels/halide_kernels.hpp"
#include "../backend/src/kernels/onednn_kernels.hpp"
#include "kernel_layouts.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/tensor.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace dsl::backend;

namespace {

// A planar tile and a blocked one of the same values in their interiors; their margins (`m`) hold NaN, so
// that a kernel that read them shows in its result, or the sentinel where `output`, so that one that wrote
// them shows in `margins_kept`.
struct Pair {
    Tensor planar, blocked;
};

Pair random_pair(const Dims& d, const Margins& m, std::mt19937& rng, bool output = false) {
    Pair p{Tensor(d, m, host_memory()), Tensor(d, m, host_memory(), blocked_lanes)};
    p.planar.fill(output ? sentinel : std::nanf(""));
    p.blocked.fill(output ? sentinel : std::nanf(""));
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    const View a = p.planar.interior(), b = p.blocked.interior();
    for_each_element(
        d, [&](std::int64_t n, std::int64_t c, const Index& i) { a.at(n, c, i) = b.at(n, c, i) = uniform(rng); });
    return p;
}

// The interiors hold the same values, bit for bit.
bool same_values(const Pair& p) {
    bool same = true;
    const ConstView a = p.planar.interior(), b = p.blocked.interior();
    for_each_element(
        a.dims, [&](std::int64_t n, std::int64_t c, const Index& i) { same = same && a.at(n, c, i) == b.at(n, c, i); });
    return same;
}

// A blocked output's margins still hold the sentinel: every element but the interior's.
bool margins_kept(const Tensor& t) {
    std::int64_t kept = 0;
    for (std::int64_t i = 0; i < t.size(); ++i) kept += t.data()[i] == sentinel;
    return kept == t.size() - t.dims().elements();
}

// Images and volumes of one and of several blocks of channels.
const std::vector<Dims> shapes = {{2, 16, {5, 7}}, {1, 32, {9, 17}}, {3, 16, {1, 1}}, {2, 16, {3, 4, 5}}};

Margins margins_of(const Dims& d, bool with) {
    if (!with) return {};
    return d.rank() == 3 ? Margins{{1, 2}, {2, 1}, {0, 3}} : Margins{{2, 1}, {0, 3}};
}

}  // namespace

TEST_CASE("blocked: the leaky ReLU, batch norm, add and copy compute what they compute on planar views", "[blocked]") {
    const Dims d = GENERATE(from_range(shapes));
    const bool with_margins = GENERATE(false, true);
    const Margins m = margins_of(d, with_margins);
    INFO("dims " << d.n << "x" << d.c << " rank " << d.rank() << (with_margins ? ", margins" : ""));
    std::mt19937 rng(17);
    const Pair x = random_pair(d, m, rng), dy = random_pair(d, m, rng), z = random_pair(d, m, rng);
    const auto activation = dsl::frontend::Activation::leaky_relu;
    const auto c = static_cast<std::size_t>(d.c);

    for (const float slope : {0.0f, 0.1f}) {
        Pair y = random_pair(d, m, rng, true);
        halide_activation().forward(activation, x.planar.interior(), slope, y.planar.interior());
        halide_activation().forward(activation, x.blocked.interior(), slope, y.blocked.interior());
        CHECK(same_values(y));
        CHECK(margins_kept(y.blocked));
        halide_activation().backward(activation, x.planar.interior(), dy.planar.interior(), slope, y.planar.interior());
        halide_activation().backward(activation, x.blocked.interior(), dy.blocked.interior(), slope,
                                     y.blocked.interior());
        CHECK(same_values(y));
    }

    // Statistics add into what the caller holds.
    std::vector<double> sum(c, 1.5), sq(c, -0.5), bsum(c, 1.5), bsq(c, -0.5);
    halide_batchnorm().statistics(x.planar.interior(), sum.data(), sq.data());
    halide_batchnorm().statistics(x.blocked.interior(), bsum.data(), bsq.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(bsum[k] == Approx(sum[k]).epsilon(1e-12));
        CHECK(bsq[k] == Approx(sq[k]).epsilon(1e-12));
    }
    std::vector<float> mean(c), inv_std(c), gamma(c), beta(c);
    std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
    for (std::size_t k = 0; k < c; ++k) mean[k] = uniform(rng) - 1.0f, inv_std[k] = uniform(rng);
    for (std::size_t k = 0; k < c; ++k) gamma[k] = uniform(rng), beta[k] = uniform(rng) - 1.0f;
    for (const bool relu : {false, true}) {
        Pair y = random_pair(d, m, rng, true);
        for (Tensor* t : {&y.planar, &y.blocked}) {
            const ConstView in = t == &y.planar ? x.planar.interior() : x.blocked.interior();
            if (relu)
                CHECK(halide_batchnorm().forward_relu(in, mean.data(), inv_std.data(), gamma.data(), beta.data(), 0.0f,
                                                      t->interior()));
            else
                halide_batchnorm().forward(in, mean.data(), inv_std.data(), gamma.data(), beta.data(), t->interior());
        }
        CHECK(same_values(y));
        CHECK(margins_kept(y.blocked));
    }
    std::vector<double> sdy(c, 0.25), sdx(c, -1.0), bsdy(c, 0.25), bsdx(c, -1.0);
    halide_batchnorm().backward_statistics(x.planar.interior(), dy.planar.interior(), mean.data(), inv_std.data(),
                                           sdy.data(), sdx.data());
    halide_batchnorm().backward_statistics(x.blocked.interior(), dy.blocked.interior(), mean.data(), inv_std.data(),
                                           bsdy.data(), bsdx.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(bsdy[k] == Approx(sdy[k]).epsilon(1e-12));
        CHECK(bsdx[k] == Approx(sdx[k]).epsilon(1e-12));
    }
    {
        Pair dx = random_pair(d, m, rng, true);
        halide_batchnorm().backward(x.planar.interior(), dy.planar.interior(), mean.data(), inv_std.data(),
                                    gamma.data(), sdy.data(), sdx.data(), 7.0, dx.planar.interior());
        halide_batchnorm().backward(x.blocked.interior(), dy.blocked.interior(), mean.data(), inv_std.data(),
                                    gamma.data(), sdy.data(), sdx.data(), 7.0, dx.blocked.interior());
        CHECK(same_values(dx));
        CHECK(margins_kept(dx.blocked));
    }

    EltwiseKernels& e = halide_eltwise();
    Pair y = random_pair(d, m, rng, true);
    e.add({x.planar.interior(), dy.planar.interior()}, y.planar.interior());
    e.add({x.blocked.interior(), dy.blocked.interior()}, y.blocked.interior());
    CHECK(same_values(y));
    CHECK(margins_kept(y.blocked));
    CHECK(e.add_relu({x.planar.interior(), dy.planar.interior()}, 0.1f, y.planar.interior()));
    CHECK(e.add_relu({x.blocked.interior(), dy.blocked.interior()}, 0.1f, y.blocked.interior()));
    CHECK(same_values(y));
    e.add({x.planar.interior(), dy.planar.interior(), z.planar.interior()}, y.planar.interior());
    e.add({x.blocked.interior(), dy.blocked.interior(), z.blocked.interior()}, y.blocked.interior());
    CHECK(same_values(y));
    e.accumulate(z.planar.interior(), y.planar.interior());
    e.accumulate(z.blocked.interior(), y.blocked.interior());
    CHECK(same_values(y));
    e.copy(x.planar.interior(), y.planar.interior());
    e.copy(x.blocked.interior(), y.blocked.interior());
    CHECK(same_values(y));
    CHECK(margins_kept(y.blocked));
}

TEST_CASE("blocked: a view's elements, runs and density", "[blocked]") {
    Tensor t(Dims{2, 32, {3, 4}}, Margins{{1, 0}, {0, 2}}, host_memory(), blocked_lanes);
    const View p = t.padded(), v = t.interior();
    CHECK(p.dense());
    CHECK_FALSE(v.dense());
    // Element (n, c, y, x) of the padded tile {2, 32, {4, 6}}: sample, block, row, column, then c % 16.
    CHECK(&p.at(1, 19, Index{2, 5}) - t.data() == ((1 * 2 + 1) * 4 * 6 + 2 * 6 + 5) * 16 + 3);
    CHECK(&v.at(0, 0, Index{0, 0}) == &p.at(0, 0, Index{1, 0}));
    std::int64_t runs = 0, elements = 0;
    for_each_run(v, [&](float*, std::int64_t w) { ++runs, elements += w; });
    CHECK(runs == 2 * 2 * 3);
    CHECK(elements == v.dims.elements());
    CHECK_THROWS(v.channels(8, 16));  // a block cut in two
}

TEST_CASE("blocked: oneDNN's convolutions of blocked tiles without margins equal planar ones with them",
          "[blocked][onednn]") {
    struct Case {
        Dims x;
        std::int64_t filters, kernel, stride;
    };
    const Case k = GENERATE(Case{{2, 16, {9, 7}}, 32, 3, 1}, Case{{1, 32, {8, 10}}, 16, 3, 2},
                            Case{{2, 16, {6, 6}}, 16, 1, 1}, Case{{1, 16, {4, 5, 6}}, 16, 3, 1});
    const int rank = k.x.rank();
    const std::int64_t pad = k.kernel / 2;
    INFO("x " << k.x.n << "x" << k.x.c << " rank " << rank << ", kernel " << k.kernel << " stride " << k.stride);
    Dims yd{k.x.n, k.filters, k.x.space};
    for (int d = 0; d < rank; ++d) yd.space[d] = (k.x.space[d] + 2 * pad - k.kernel) / k.stride + 1;
    // The window reads [-pad, ...) of x: the places before 0 and after the extent are padding.
    Window planar{Index::filled(rank, k.kernel), Index::filled(rank, k.stride), Index::filled(rank, 1),
                  Margins::filled(rank, {})};
    Margins halo = Margins::filled(rank, {});
    for (int d = 0; d < rank; ++d) {
        const std::int64_t after = (yd.space[d] - 1) * k.stride + k.kernel - pad - k.x.space[d];
        planar.zeros[d] = {pad, std::max<std::int64_t>(after, 0)};
        halo[d] = planar.zeros[d];
        REQUIRE(after >= -pad);  // never reads short of the end by more than its padding
    }
    Window blocked = planar;
    blocked.zeros_outside = true;

    // The blocked tiles without margins, as the trainer's (their views dense), or with (a reorder's).
    const bool margins = GENERATE(false, true);
    INFO((margins ? "blocked tiles with margins" : "blocked tiles without margins"));
    const auto without_margins = [&](Pair& p) {
        if (margins) return;
        Tensor t(p.blocked.dims(), {}, host_memory(), blocked_lanes);
        const View to = t.interior();
        const ConstView from = p.blocked.interior();
        for_each_element(to.dims,
                         [&](std::int64_t n, std::int64_t c, const Index& i) { to.at(n, c, i) = from.at(n, c, i); });
        p.blocked = std::move(t);
    };

    std::mt19937 rng(23);
    Pair x = random_pair(k.x, halo, rng);
    x.planar.fill_margins(0.0f);  // planar: the margins hold the padding
    without_margins(x);
    const Pair dy = random_pair(yd, {}, rng);
    Tensor w(Dims{k.filters, k.x.c, Index::filled(rank, k.kernel)});
    std::normal_distribution<float> normal(0.0f, 0.2f);
    for (std::int64_t i = 0; i < w.size(); ++i) w.data()[i] = normal(rng);
    std::vector<float> bias(static_cast<std::size_t>(k.filters), 0.5f);

    // What the window reads of x: the planar tile's whole padded view (less any places past the end that no
    // output reads), the blocked one's interior.
    Index origin = Index::filled(rank, 0);
    Dims read = k.x;
    for (int d = 0; d < rank; ++d) read.space[d] = planar.input_extent(d, yd.space[d]);
    const View xp = x.planar.padded().sub(0, 0, origin, read);
    Dims inside = read;
    for (int d = 0; d < rank; ++d) inside.space[d] -= planar.zeros[d].before + planar.zeros[d].after;
    const View xb = x.blocked.interior().sub(0, 0, origin, inside);

    ConvKernels& conv = onednn_conv();
    Pair y = random_pair(yd, {}, rng, true);
    conv.forward(xp, w.interior(), bias.data(), y.planar.interior(), planar);
    conv.forward(xb, w.interior(), bias.data(), y.blocked.interior(), blocked);
    const auto close = [](const Pair& p, double tolerance) {
        double scale = 0.0, error = 0.0;
        const ConstView a = p.planar.interior(), b = p.blocked.interior();
        for_each_element(a.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            scale = std::max(scale, std::abs(double(a.at(n, c, i))));
            error = std::max(error, std::abs(double(a.at(n, c, i)) - double(b.at(n, c, i))));
        });
        INFO("largest difference " << error << " of values up to " << scale);
        return scale > 0.0 && error <= tolerance * scale;
    };
    CHECK(close(y, 1e-5));

    // The blocked dx holds the places inside the tensor; the planar one the margins' too (which it zeroes).
    Pair dx = random_pair(k.x, halo, rng, true);
    without_margins(dx);
    const View dxp = dx.planar.padded().sub(0, 0, origin, read);
    const View dxb = dx.blocked.interior().sub(0, 0, origin, inside);
    conv.backward_data(dy.planar.interior(), w.interior(), dxp, planar);
    conv.backward_data(dy.blocked.interior(), w.interior(), dxb, blocked);
    CHECK(close(dx, 1e-5));
    CHECK(margins_kept(dx.blocked));

    Tensor dwp(w.dims()), dwb(w.dims());
    std::vector<float> dbp(bias.size()), dbb(bias.size());
    conv.backward_weights(xp, dy.planar.interior(), dwp.interior(), dbp.data(), planar);
    conv.backward_weights(xb, dy.blocked.interior(), dwb.interior(), dbb.data(), blocked);
    double scale = 0.0, error = 0.0;
    for (std::int64_t i = 0; i < dwp.size(); ++i) {
        scale = std::max(scale, std::abs(double(dwp.data()[i])));
        error = std::max(error, std::abs(double(dwp.data()[i]) - double(dwb.data()[i])));
    }
    CHECK(error <= 1e-5 * scale);
    for (std::size_t f = 0; f < bias.size(); ++f) CHECK(dbb[f] == Approx(dbp[f]).epsilon(1e-5));
}

TEST_CASE("blocked: pooling of blocked tiles, padded by the kernel or by margins, equals planar pooling bit for bit",
          "[blocked]") {
    struct Case {
        Dims x;
        std::int64_t kernel, stride, pad;
    };
    // ResNet's max pooling, windows that tile, CosmoFlow's, windows with gaps between them (stride > kernel),
    // and a last window short of the end.
    const Case k =
        GENERATE(Case{{2, 16, {9, 7}}, 3, 2, 1}, Case{{1, 32, {8, 10}}, 2, 2, 0}, Case{{1, 16, {5, 6, 7}}, 3, 2, 1},
                 Case{{2, 16, {4, 6, 5}}, 2, 2, 0}, Case{{1, 16, {7, 9}}, 2, 3, 0});
    const PoolKind kind = GENERATE(PoolKind::max, PoolKind::average);
    const bool margins = GENERATE(false, true);
    const int rank = k.x.rank();
    INFO("x " << k.x.n << "x" << k.x.c << " rank " << rank << ", kernel " << k.kernel << " stride " << k.stride
              << " pad " << k.pad << (kind == PoolKind::max ? ", max" : ", average")
              << (margins ? ", blocked tiles with margins" : ", blocked tiles without margins"));
    Dims yd{k.x.n, k.x.c, k.x.space};
    Window planar{Index::filled(rank, k.kernel), Index::filled(rank, k.stride), Index::filled(rank, 1),
                  Margins::filled(rank, {})};
    for (int d = 0; d < rank; ++d) {
        yd.space[d] = (k.x.space[d] + 2 * k.pad - k.kernel) / k.stride + 1;
        const std::int64_t after = (yd.space[d] - 1) * k.stride + k.kernel - k.pad - k.x.space[d];
        planar.zeros[d] = {k.pad, std::max<std::int64_t>(after, 0)};
    }
    const Margins halo = planar.zeros;
    // Where the margins are left out, the kernel pads; else the margins hold the padding, as planar ones do.
    Window blocked = planar;
    blocked.zeros_outside = !margins;
    const float padding = kind == PoolKind::max ? -std::numeric_limits<float>::infinity() : 0.0f;

    std::mt19937 rng(29);
    Pair x = random_pair(k.x, halo, rng);
    // Values on a grid of halves, so that windows hold ties (max sends dy to the first of them).
    for (Tensor* t : {&x.planar, &x.blocked}) {
        const View v = t->interior();
        for_each_element(v.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            v.at(n, c, i) = std::round(v.at(n, c, i) * 2.0f) / 2.0f;
        });
    }
    x.planar.fill_margins(padding);
    if (margins) {
        x.blocked.fill_margins(padding);
    } else {
        Tensor t(k.x, {}, host_memory(), blocked_lanes);
        const View to = t.interior();
        const ConstView from = x.blocked.interior();
        for_each_element(to.dims,
                         [&](std::int64_t n, std::int64_t c, const Index& i) { to.at(n, c, i) = from.at(n, c, i); });
        x.blocked = std::move(t);
    }
    const Pair dy = random_pair(yd, {}, rng);

    // What the windows read of x: the planar tile's padded view (less any places past the end that no window
    // reads), the blocked one's too where it has margins, else its interior.
    const Index origin = Index::filled(rank, 0);
    Dims read = k.x, inside = k.x;
    for (int d = 0; d < rank; ++d) {
        read.space[d] = planar.input_extent(d, yd.space[d]);
        inside.space[d] = read.space[d] - planar.zeros[d].before - planar.zeros[d].after;
    }
    const auto window_of = [&](Tensor& t, bool blocked_tile) {
        return blocked_tile && !margins ? t.interior().sub(0, 0, origin, inside) : t.padded().sub(0, 0, origin, read);
    };
    PoolKernels& pool = halide_pool();
    Pair y = random_pair(yd, {}, rng, true);
    pool.forward(kind, window_of(x.planar, false), y.planar.interior(), planar);
    pool.forward(kind, window_of(x.blocked, true), y.blocked.interior(), blocked);
    CHECK(same_values(y));
    CHECK(margins_kept(y.blocked));

    // dx over what the windows read, as x; what no window reads keeps the sentinel in both.
    Pair dx{Tensor(k.x, halo, host_memory()), Tensor(k.x, margins ? halo : Margins{}, host_memory(), blocked_lanes)};
    dx.planar.fill(sentinel);
    dx.blocked.fill(sentinel);
    pool.backward(kind, window_of(x.planar, false), dy.planar.interior(), window_of(dx.planar, false), planar);
    pool.backward(kind, window_of(x.blocked, true), dy.blocked.interior(), window_of(dx.blocked, true), blocked);
    CHECK(same_values(dx));
}
