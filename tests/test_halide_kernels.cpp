// The Halide kernels (and the CPU loss, group norm and dropout) against the reference kernels, on odd shapes
// of images, volumes and vectors, and non-dense views of tiles with margins.
#include "../backend/src/kernels/halide_kernels.hpp"
#include "kernel_layouts.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/tensor.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace dsl::backend;

// The margins `m` of an image for a tensor of `d`: none for a vector; a volume's have a depth reach before
// the image's, uneven, so that its depth slices do not follow one another.
Margins margins_for(const Dims& d, const Margins& m) {
    if (d.rank() == 0 || m.rank() == 0) return {};
    if (d.rank() == 3 && m.rank() == 2) return Margins{{1, 2}, m[0], m[1]};
    return m;
}

// A tile with margins filled with random values, margins included, so that a kernel that read or wrote
// outside its view would be caught (`m` is for images: margins_for). `levels` > 0 draws from that many
// integers instead, to make ties.
Tensor random_tensor(Dims d, Margins m, std::mt19937& rng, int levels = 0) {
    Tensor t(d, margins_for(d, m));
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    std::uniform_int_distribution<int> level(0, std::max(levels - 1, 0));
    for (std::int64_t i = 0; i < t.size(); ++i) t.data()[i] = levels > 0 ? float(level(rng)) : uniform(rng);
    return t;
}

constexpr Margins some_margins{{2, 1}, {3, 2}};
constexpr dsl::frontend::Activation leaky = dsl::frontend::Activation::leaky_relu;

// Every element of `a` and `b` (same dims) within `rel` of each other (relative, with a floor of 1e-6 for
// values near zero); rel = 0 asks for bit-exact equality. Returns the number of elements that differ.
std::int64_t mismatches(ConstView a, ConstView b, double rel) {
    REQUIRE(a.dims == b.dims);
    std::int64_t bad = 0;
    for_each_element(a.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
        const double u = a.at(n, c, i), v = b.at(n, c, i);
        const bool same = rel == 0 ? u == v : std::abs(u - v) <= rel * std::max(std::abs(v), 1e-6 / rel);
        if (!same) ++bad;
    });
    return bad;
}

// The whole storage of two tensors (margins included) is equal: what a kernel must not touch stayed as it was.
bool same_storage(const Tensor& a, const Tensor& b) {
    if (a.size() != b.size()) return false;
    for (std::int64_t i = 0; i < a.size(); ++i)
        if (a.data()[i] != b.data()[i]) return false;
    return true;
}

// Outside the interior, `a` and `b` hold the same values: a kernel wrote only into its view.
bool same_margins(const Tensor& a, const Tensor& b) {
    Tensor t = a;
    const ConstView from = b.interior();
    const View to = t.interior();
    for_each_element(from.dims,
                     [&](std::int64_t n, std::int64_t c, const Index& i) { to.at(n, c, i) = from.at(n, c, i); });
    return same_storage(t, b);
}

// Images, volumes, and a vector (the output of an fc layer).
const std::vector<Dims> shapes = {{1, 1, {1, 1}},     {2, 3, {5, 7}},     {1, 4, {9, 17}},   {3, 2, {16, 8}},
                                  {2, 5, {1, 33}},    {3, 10, {}},        {1, 1, {1, 1, 1}}, {2, 3, {4, 5, 7}},
                                  {1, 4, {3, 9, 17}}, {2, 2, {5, 1, 33}}, {1, 3, {1, 6, 5}}};

}  // namespace

TEST_CASE("halide activation matches the reference bit for bit", "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    const float slope = GENERATE(0.0f, 0.1f);
    std::mt19937 rng(7);
    const Tensor x = random_tensor(d, some_margins, rng), dy = random_tensor(d, {{1, 0}, {0, 1}}, rng);
    Tensor expected = random_tensor(d, some_margins, rng), got = expected;

    reference_kernels().activation->forward(leaky, x.interior(), slope, expected.interior());
    halide_activation().forward(leaky, x.interior(), slope, got.interior());
    CHECK(same_storage(got, expected));

    reference_kernels().activation->backward(leaky, x.interior(), dy.interior(), slope, expected.interior());
    halide_activation().backward(leaky, x.interior(), dy.interior(), slope, got.interior());
    CHECK(same_storage(got, expected));
}

TEST_CASE("halide sigmoid matches the reference", "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    const auto f = dsl::frontend::Activation::sigmoid;
    std::mt19937 rng(13);
    const Tensor x = random_tensor(d, some_margins, rng), dy = random_tensor(d, {{1, 0}, {0, 1}}, rng);
    Tensor expected = random_tensor(d, some_margins, rng), got = expected;

    // Halide's exp and the C library's round differently: within a few float ulps.
    reference_kernels().activation->forward(f, x.interior(), 0.0f, expected.interior());
    halide_activation().forward(f, x.interior(), 0.0f, got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(same_margins(got, expected));

    reference_kernels().activation->backward(f, x.interior(), dy.interior(), 0.0f, expected.interior());
    halide_activation().backward(f, x.interior(), dy.interior(), 0.0f, got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-5) == 0);
    CHECK(same_margins(got, expected));
}

TEST_CASE("halide batch norm matches the reference", "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    std::mt19937 rng(11);
    const Tensor x = random_tensor(d, some_margins, rng), dy = random_tensor(d, {{0, 2}, {1, 0}}, rng);
    const auto c = static_cast<std::size_t>(d.c);

    // Statistics add into what the caller holds.
    std::vector<double> sum_ref(c, 1.5), sq_ref(c, -0.5), sum(c, 1.5), sq(c, -0.5);
    reference_kernels().batchnorm->statistics(x.interior(), sum_ref.data(), sq_ref.data());
    halide_batchnorm().statistics(x.interior(), sum.data(), sq.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(sum[k] == Approx(sum_ref[k]).epsilon(1e-12));
        CHECK(sq[k] == Approx(sq_ref[k]).epsilon(1e-12));
    }

    std::vector<float> mean(c), inv_std(c), gamma(c), beta(c);
    const double count = double(d.n * d.points());
    for (std::size_t k = 0; k < c; ++k) {
        const double m = (sum_ref[k] - 1.5) / count;
        mean[k] = float(m);
        inv_std[k] = float(1.0 / std::sqrt((sq_ref[k] + 0.5) / count - m * m + 1e-5));
        gamma[k] = 0.5f + 0.25f * float(k);
        beta[k] = 0.1f * float(k) - 0.2f;
    }

    Tensor expected = random_tensor(d, some_margins, rng), got = expected;
    reference_kernels().batchnorm->forward(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(),
                                           expected.interior());
    halide_batchnorm().forward(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(), got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(same_margins(got, expected));

    std::vector<double> sdy_ref(c, 0.25), sdx_ref(c, 0.0), sdy(c, 0.25), sdx(c, 0.0);
    reference_kernels().batchnorm->backward_statistics(x.interior(), dy.interior(), mean.data(), inv_std.data(),
                                                       sdy_ref.data(), sdx_ref.data());
    halide_batchnorm().backward_statistics(x.interior(), dy.interior(), mean.data(), inv_std.data(), sdy.data(),
                                           sdx.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(sdy[k] == Approx(sdy_ref[k]).epsilon(1e-12).margin(1e-12));
        CHECK(sdx[k] == Approx(sdx_ref[k]).epsilon(1e-12).margin(1e-12));
    }

    reference_kernels().batchnorm->backward(x.interior(), dy.interior(), mean.data(), inv_std.data(), gamma.data(),
                                            sdy_ref.data(), sdx_ref.data(), count, expected.interior());
    halide_batchnorm().backward(x.interior(), dy.interior(), mean.data(), inv_std.data(), gamma.data(), sdy_ref.data(),
                                sdx_ref.data(), count, got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(same_margins(got, expected));
}

TEST_CASE("halide batch norm and add with their ReLU are the two kernels one after the other, bit for bit",
          "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    const float slope = GENERATE(0.0f, 0.1f);
    std::mt19937 rng(29);
    const Tensor x = random_tensor(d, some_margins, rng), other = random_tensor(d, {{1, 0}, {0, 2}}, rng);
    const auto c = static_cast<std::size_t>(d.c);
    std::vector<float> mean(c), inv_std(c), gamma(c), beta(c);
    for (std::size_t k = 0; k < c; ++k) {
        mean[k] = 0.3f - 0.1f * float(k), inv_std[k] = 1.7f + 0.2f * float(k);
        gamma[k] = 0.5f + 0.25f * float(k), beta[k] = 0.1f * float(k) - 0.2f;  // some channels mostly negative
    }

    Tensor expected = random_tensor(d, some_margins, rng), got = expected, untouched = expected;
    halide_batchnorm().forward(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(),
                               expected.interior());
    halide_activation().forward(leaky, expected.interior(), slope, expected.interior());
    CHECK(halide_batchnorm().forward_relu(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(), slope,
                                          got.interior()));
    CHECK(same_storage(got, expected));

    const std::vector<ConstView> two{x.interior(), other.interior()};
    halide_eltwise().add(two, expected.interior());
    halide_activation().forward(leaky, expected.interior(), slope, expected.interior());
    CHECK(halide_eltwise().add_relu(two, slope, got.interior()));
    CHECK(same_storage(got, expected));

    // Kernels that do not fuse say so and write nothing: three inputs here (their fold rounds between sums),
    // and the reference's.
    got = untouched;
    CHECK_FALSE(halide_eltwise().add_relu({x.interior(), other.interior(), x.interior()}, slope, got.interior()));
    CHECK_FALSE(reference_kernels().eltwise->add_relu(two, slope, got.interior()));
    CHECK_FALSE(reference_kernels().batchnorm->forward_relu(x.interior(), mean.data(), inv_std.data(), gamma.data(),
                                                            beta.data(), slope, got.interior()));
    CHECK(same_storage(got, untouched));
}

TEST_CASE("halide tanh and gelu match the reference", "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    const auto f = GENERATE(dsl::frontend::Activation::tanh, dsl::frontend::Activation::gelu);
    std::mt19937 rng(14);
    const Tensor x = random_tensor(d, some_margins, rng), dy = random_tensor(d, {{1, 0}, {0, 1}}, rng);
    Tensor expected = random_tensor(d, some_margins, rng), got = expected;

    // Halide's tanh, erf and exp and the C library's round differently: within a few float ulps (gelu's
    // values near zero by an absolute 1e-6 at most, which `mismatches` allows).
    reference_kernels().activation->forward(f, x.interior(), 0.0f, expected.interior());
    halide_activation().forward(f, x.interior(), 0.0f, got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-5) == 0);
    CHECK(same_margins(got, expected));

    reference_kernels().activation->backward(f, x.interior(), dy.interior(), 0.0f, expected.interior());
    halide_activation().backward(f, x.interior(), dy.interior(), 0.0f, got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-5) == 0);
    CHECK(same_margins(got, expected));
}

TEST_CASE("cpu group norm matches the reference", "[halide]") {
    const Dims d = GENERATE(Dims{1, 1, {1, 1}}, Dims{2, 4, {5, 7}}, Dims{1, 6, {9, 17}}, Dims{3, 8, {16, 8}},
                            Dims{2, 6, {1, 33}}, Dims{2, 4, {3, 5, 7}}, Dims{1, 6, {2, 1, 9}});
    const std::int64_t groups = GENERATE(1, 2);
    if (d.c % groups != 0) return;
    CAPTURE(d, groups);
    std::mt19937 rng(12);
    const Tensor x = random_tensor(d, some_margins, rng), dy = random_tensor(d, {{0, 2}, {1, 0}}, rng);
    GroupNormKernels& ref = *reference_kernels().groupnorm;
    GroupNormKernels& cpu = *cpu_kernels().groupnorm;
    const auto stats = static_cast<std::size_t>(d.n * groups), c = static_cast<std::size_t>(d.c);

    std::vector<double> sum_ref(stats, 1.5), sq_ref(stats, -0.5), sum(stats, 1.5), sq(stats, -0.5);
    ref.statistics(x.interior(), groups, sum_ref.data(), sq_ref.data());
    cpu.statistics(x.interior(), groups, sum.data(), sq.data());
    for (std::size_t k = 0; k < stats; ++k) {
        CHECK(sum[k] == Approx(sum_ref[k]).epsilon(1e-12));
        CHECK(sq[k] == Approx(sq_ref[k]).epsilon(1e-12));
    }
    std::vector<float> mean(stats), inv_std(stats), gamma(c), beta(c);
    const double count = double(d.c / groups * d.points());
    for (std::size_t k = 0; k < stats; ++k) {
        const double m = (sum_ref[k] - 1.5) / count;
        mean[k] = float(m);
        inv_std[k] = float(1.0 / std::sqrt((sq_ref[k] + 0.5) / count - m * m + 1e-5));
    }
    for (std::size_t k = 0; k < c; ++k) gamma[k] = 0.5f + 0.25f * float(k), beta[k] = 0.1f * float(k) - 0.2f;

    Tensor expected = random_tensor(d, some_margins, rng), got = expected;
    ref.forward(x.interior(), groups, mean.data(), inv_std.data(), gamma.data(), beta.data(), expected.interior());
    cpu.forward(x.interior(), groups, mean.data(), inv_std.data(), gamma.data(), beta.data(), got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(same_margins(got, expected));

    std::vector<double> db_ref(c, 0.25), dg_ref(c, 0.0), sg_ref(stats, 0.0), sgx_ref(stats, 1.0);
    std::vector<double> db(c, 0.25), dg(c, 0.0), sg(stats, 0.0), sgx(stats, 1.0);
    ref.backward_statistics(x.interior(), dy.interior(), groups, mean.data(), inv_std.data(), gamma.data(),
                            db_ref.data(), dg_ref.data(), sg_ref.data(), sgx_ref.data());
    cpu.backward_statistics(x.interior(), dy.interior(), groups, mean.data(), inv_std.data(), gamma.data(), db.data(),
                            dg.data(), sg.data(), sgx.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(db[k] == Approx(db_ref[k]).epsilon(1e-12).margin(1e-12));
        CHECK(dg[k] == Approx(dg_ref[k]).epsilon(1e-12).margin(1e-12));
    }
    for (std::size_t k = 0; k < stats; ++k) {
        CHECK(sg[k] == Approx(sg_ref[k]).epsilon(1e-12).margin(1e-12));
        CHECK(sgx[k] == Approx(sgx_ref[k]).epsilon(1e-12).margin(1e-12));
    }
    ref.backward(x.interior(), dy.interior(), groups, mean.data(), inv_std.data(), gamma.data(), sg_ref.data(),
                 sgx_ref.data(), count, expected.interior());
    cpu.backward(x.interior(), dy.interior(), groups, mean.data(), inv_std.data(), gamma.data(), sg_ref.data(),
                 sgx_ref.data(), count, got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-5) == 0);
    CHECK(same_margins(got, expected));
}

TEST_CASE("cpu dropout matches the reference bit for bit", "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    std::mt19937 rng(15);
    const Tensor x = random_tensor(d, some_margins, rng);
    DropoutMask m;
    m.key = 99;
    m.step = 3;
    m.n0 = 8;
    m.at = d.rank() == 3 ? Index{2, 5, 11} : d.rank() == 2 ? Index{5, 11} : Index{};
    m.p = 0.3f;
    Tensor expected = random_tensor(d, some_margins, rng), got = expected;
    reference_kernels().dropout->forward(x.interior(), m, expected.interior());
    cpu_kernels().dropout->forward(x.interior(), m, got.interior());
    CHECK(same_storage(got, expected));
    reference_kernels().dropout->backward(x.interior(), m, expected.interior());
    cpu_kernels().dropout->backward(x.interior(), m, got.interior());
    CHECK(same_storage(got, expected));
}

namespace {

struct PoolCase {
    Window window;
    Dims out;
};

}  // namespace

TEST_CASE("halide pooling matches the reference bit for bit", "[halide]") {
    // Disjoint windows, overlapping ones (3x3 stride 2 and stride 1), gaps (stride > kernel), non-square.
    const PoolCase pc =
        GENERATE(PoolCase{window(2, 2, 2, 2), {2, 3, {4, 5}}}, PoolCase{window(3, 3, 2, 2), {2, 3, {5, 7}}},
                 PoolCase{window(3, 3, 1, 1), {1, 4, {6, 9}}}, PoolCase{window(2, 2, 3, 3), {2, 2, {3, 4}}},
                 PoolCase{window(3, 2, 2, 1), {3, 2, {4, 11}}}, PoolCase{window(1, 1, 1, 1), {1, 2, {3, 3}}},
                 PoolCase{window(5, 5, 1, 1), {1, 1, {1, 1}}});
    const PoolKind kind = GENERATE(PoolKind::max, PoolKind::average);
    // Few levels make ties, so that routing to the first maximum is tested.
    const int levels = GENERATE(0, 3);
    const Window& w = pc.window;
    const Dims in{pc.out.n, pc.out.c, {w.input_extent(0, pc.out.space[0]), w.input_extent(1, pc.out.space[1])}};
    CAPTURE(w.kernel[0], w.kernel[1], w.stride[0], w.stride[1], pc.out, kind == PoolKind::max, levels);

    std::mt19937 rng(13);
    // The input view spans the top/left margins as padding would: a non-dense window of a bigger tile.
    const Tensor xt = random_tensor({in.n, in.c, {in.space[0], in.space[1] + 1}}, some_margins, rng, levels);
    const ConstView x = xt.padded().sub(0, 0, {1, 2}, in);
    const Tensor dyt = random_tensor(pc.out, {{1, 1}, {1, 1}}, rng);

    Tensor expected = random_tensor(pc.out, some_margins, rng), got = expected;
    reference_kernels().pool->forward(kind, x, expected.interior(), w);
    halide_pool().forward(kind, x, got.interior(), w);
    CHECK(mismatches(got.interior(), expected.interior(), 0) == 0);
    CHECK(same_storage(got, expected));

    Tensor dx_expected = random_tensor(in, some_margins, rng), dx_got = dx_expected;
    reference_kernels().pool->backward(kind, x, dyt.interior(), dx_expected.interior(), w);
    halide_pool().backward(kind, x, dyt.interior(), dx_got.interior(), w);
    CHECK(mismatches(dx_got.interior(), dx_expected.interior(), 0) == 0);
    CHECK(same_storage(dx_got, dx_expected));
}

namespace {

Window volume_window(std::int64_t k0, std::int64_t k1, std::int64_t k2, std::int64_t s0, std::int64_t s1,
                     std::int64_t s2) {
    Window w;
    w.kernel = {k0, k1, k2};
    w.stride = {s0, s1, s2};
    w.dilation = {1, 1, 1};
    return w;
}

}  // namespace

TEST_CASE("halide pooling of volumes matches the reference bit for bit", "[halide]") {
    // Disjoint windows (the common 2x2x2), overlapping ones, gaps, mixed kernels and strides, a 1x1x1.
    const PoolCase pc = GENERATE(PoolCase{volume_window(2, 2, 2, 2, 2, 2), {2, 3, {3, 4, 5}}},
                                 PoolCase{volume_window(3, 3, 3, 2, 2, 2), {1, 2, {3, 3, 4}}},
                                 PoolCase{volume_window(3, 3, 3, 1, 1, 1), {1, 3, {2, 4, 5}}},
                                 PoolCase{volume_window(2, 2, 2, 3, 3, 3), {2, 2, {2, 3, 2}}},
                                 PoolCase{volume_window(3, 1, 2, 1, 2, 2), {1, 2, {3, 4, 6}}},
                                 PoolCase{volume_window(1, 1, 1, 1, 1, 1), {1, 2, {2, 3, 3}}},
                                 PoolCase{volume_window(2, 2, 2, 2, 2, 2), {1, 16, {8, 8, 9}}});
    const PoolKind kind = GENERATE(PoolKind::max, PoolKind::average);
    const int levels = GENERATE(0, 3);  // ties, to route to the first maximum
    const Window& w = pc.window;
    Dims in = pc.out;
    for (int d = 0; d < 3; ++d) in.space[d] = w.input_extent(d, pc.out.space[d]);
    CAPTURE(w.kernel[0], w.kernel[1], w.kernel[2], w.stride[0], w.stride[1], w.stride[2], pc.out, kind == PoolKind::max,
            levels);

    std::mt19937 rng(13);
    // The input view spans margins as padding would: a non-dense window of a bigger tile.
    const Tensor xt =
        random_tensor({in.n, in.c, {in.space[0], in.space[1], in.space[2] + 1}}, some_margins, rng, levels);
    const ConstView x = xt.padded().sub(0, 0, {1, 1, 2}, in);
    const Tensor dyt = random_tensor(pc.out, {{1, 1}, {1, 1}}, rng);

    Tensor expected = random_tensor(pc.out, some_margins, rng), got = expected;
    reference_kernels().pool->forward(kind, x, expected.interior(), w);
    halide_pool().forward(kind, x, got.interior(), w);
    CHECK(mismatches(got.interior(), expected.interior(), 0) == 0);
    CHECK(same_storage(got, expected));

    Tensor dx_expected = random_tensor(in, some_margins, rng), dx_got = dx_expected;
    reference_kernels().pool->backward(kind, x, dyt.interior(), dx_expected.interior(), w);
    halide_pool().backward(kind, x, dyt.interior(), dx_got.interior(), w);
    CHECK(mismatches(dx_got.interior(), dx_expected.interior(), 0) == 0);
    CHECK(same_storage(dx_got, dx_expected));
}

TEST_CASE("halide kernels run a volume whose depth slices follow one another as one plane", "[halide]") {
    // Margins along depth only: each slice's rows end where the next slice's begin (the pipelines of images
    // then take the volume in one call), against the same values with margins everywhere (a call per slice).
    const Dims d = GENERATE(Dims{2, 3, {4, 5, 7}}, Dims{1, 8, {6, 16, 16}});
    CAPTURE(d);
    std::mt19937 rng(43);
    const Margins depth_only{{1, 2}, {0, 0}, {0, 0}};
    const Tensor x = random_tensor(d, depth_only, rng), dy = random_tensor(d, depth_only, rng);
    const auto c = static_cast<std::size_t>(d.c);

    Tensor expected = random_tensor(d, depth_only, rng), got = expected;
    reference_kernels().activation->forward(leaky, x.interior(), 0.1f, expected.interior());
    halide_activation().forward(leaky, x.interior(), 0.1f, got.interior());
    CHECK(same_storage(got, expected));
    reference_kernels().activation->backward(leaky, x.interior(), dy.interior(), 0.1f, expected.interior());
    halide_activation().backward(leaky, x.interior(), dy.interior(), 0.1f, got.interior());
    CHECK(same_storage(got, expected));
    reference_kernels().eltwise->add({x.interior(), dy.interior()}, expected.interior());
    halide_eltwise().add({x.interior(), dy.interior()}, got.interior());
    CHECK(same_storage(got, expected));
    reference_kernels().eltwise->accumulate(x.interior(), expected.interior());
    halide_eltwise().accumulate(x.interior(), got.interior());
    CHECK(same_storage(got, expected));

    std::vector<double> sum_ref(c, 0.5), sq_ref(c, 0.5), sum(c, 0.5), sq(c, 0.5);
    reference_kernels().batchnorm->statistics(x.interior(), sum_ref.data(), sq_ref.data());
    halide_batchnorm().statistics(x.interior(), sum.data(), sq.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(sum[k] == Approx(sum_ref[k]).epsilon(1e-12));
        CHECK(sq[k] == Approx(sq_ref[k]).epsilon(1e-12));
    }
    std::vector<float> mean(c, 0.25f), inv_std(c, 1.5f), gamma(c, 1.25f), beta(c, -0.5f);
    reference_kernels().batchnorm->forward(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(),
                                           expected.interior());
    halide_batchnorm().forward(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(), got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(same_margins(got, expected));

    const auto planes = static_cast<std::size_t>(d.n * d.c);
    std::vector<double> plane_ref(planes, 1.0), plane(planes, 1.0);
    reference_kernels().pool->global_sum(x.interior(), plane_ref.data());
    halide_pool().global_sum(x.interior(), plane.data());
    for (std::size_t i = 0; i < planes; ++i) CHECK(plane[i] == Approx(plane_ref[i]).epsilon(1e-12));

    // The same volume with margins everywhere gives the same values bit for bit.
    const Tensor x_sliced = [&] {
        Tensor t = random_tensor(d, some_margins, rng);
        const View to = t.interior();
        const ConstView from = x.interior();
        for_each_element(d,
                         [&](std::int64_t n, std::int64_t ch, const Index& i) { to.at(n, ch, i) = from.at(n, ch, i); });
        return t;
    }();
    Tensor merged = random_tensor(d, depth_only, rng), sliced = random_tensor(d, some_margins, rng);
    halide_activation().forward(dsl::frontend::Activation::gelu, x.interior(), 0.0f, merged.interior());
    halide_activation().forward(dsl::frontend::Activation::gelu, x_sliced.interior(), 0.0f, sliced.interior());
    CHECK(mismatches(merged.interior(), sliced.interior(), 0) == 0);
}

TEST_CASE("halide global pooling sums and broadcasts as the reference", "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    std::mt19937 rng(17);
    const Tensor x = random_tensor(d, some_margins, rng);
    const auto planes = static_cast<std::size_t>(d.n * d.c);
    std::vector<double> expected(planes, 2.0), got(planes, 2.0);
    reference_kernels().pool->global_sum(x.interior(), expected.data());
    halide_pool().global_sum(x.interior(), got.data());
    for (std::size_t i = 0; i < planes; ++i) CHECK(got[i] == Approx(expected[i]).epsilon(1e-12));

    std::vector<float> values(planes);
    for (std::size_t i = 0; i < planes; ++i) values[i] = float(i) - 1.5f;
    Tensor dx_expected = random_tensor(d, some_margins, rng), dx_got = dx_expected;
    reference_kernels().pool->broadcast(values.data(), 0.125f, dx_expected.interior());
    halide_pool().broadcast(values.data(), 0.125f, dx_got.interior());
    CHECK(same_storage(dx_got, dx_expected));
}

TEST_CASE("halide element-wise kernels match the reference", "[halide]") {
    const Dims d = GENERATE(from_range(shapes));
    const int inputs = GENERATE(1, 2, 3, 4);
    std::mt19937 rng(19);
    std::vector<Tensor> xs;
    std::vector<ConstView> views;
    for (int k = 0; k < inputs; ++k) xs.push_back(random_tensor(d, {{k, 1}, {0, k + 1}}, rng));
    for (const Tensor& t : xs) views.push_back(t.interior());

    Tensor expected = random_tensor(d, some_margins, rng), got = expected;
    reference_kernels().eltwise->add(views, expected.interior());
    halide_eltwise().add(views, got.interior());
    // Up to two inputs round once, as the reference; more fold with a rounding per input.
    CHECK(mismatches(got.interior(), expected.interior(), inputs <= 2 ? 0.0 : 1e-5) == 0);

    // Copy into a channel range of a bigger tensor, as concat does.
    Tensor wide = random_tensor({d.n, d.c + 2, d.space}, some_margins, rng), wide_got = wide;
    const Index origin = Index::filled(d.rank(), 0);
    reference_kernels().eltwise->copy(xs[0].interior(), wide.interior().sub(0, 1, origin, d));
    halide_eltwise().copy(xs[0].interior(), wide_got.interior().sub(0, 1, origin, d));
    CHECK(same_storage(wide_got, wide));

    // Accumulate in place into a non-dense view.
    reference_kernels().eltwise->accumulate(xs.back().interior(), expected.interior());
    halide_eltwise().accumulate(xs.back().interior(), got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), inputs <= 2 ? 0.0 : 1e-5) == 0);
    CHECK(same_margins(got, expected));
}

TEST_CASE("halide add and accumulate may write into an input", "[halide]") {
    std::mt19937 rng(23);
    const Dims d{2, 3, {5, 9}};
    Tensor a = random_tensor(d, some_margins, rng);
    const Tensor b = random_tensor(d, {}, rng);
    Tensor expected = a;
    reference_kernels().eltwise->add({a.interior(), b.interior()}, expected.interior());
    halide_eltwise().add({a.interior(), b.interior()}, a.interior());
    CHECK(same_storage(a, expected));

    reference_kernels().eltwise->accumulate(b.interior(), expected.interior());
    halide_eltwise().accumulate(b.interior(), a.interior());
    CHECK(same_storage(a, expected));
}

TEST_CASE("halide sgd matches the reference", "[halide]") {
    const std::int64_t count = GENERATE(1, 7, 100, 40009);
    std::mt19937 rng(29);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> w(static_cast<std::size_t>(count)), m(w.size()), g(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
        w[i] = uniform(rng);
        m[i] = uniform(rng);
        g[i] = uniform(rng);
    }
    std::vector<float> w_ref = w, m_ref = m;
    for (int step = 0; step < 3; ++step) {
        reference_kernels().eltwise->sgd(w_ref.data(), m_ref.data(), g.data(), count, 0.05f, 0.9f, 1e-4f);
        halide_eltwise().sgd(w.data(), m.data(), g.data(), count, 0.05f, 0.9f, 1e-4f);
    }
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
        if (std::abs(w[i] - w_ref[i]) > 1e-6f * std::max(std::abs(w_ref[i]), 1.0f)) ++bad;
        if (std::abs(m[i] - m_ref[i]) > 1e-6f * std::max(std::abs(m_ref[i]), 1.0f)) ++bad;
    }
    CHECK(bad == 0);
    CHECK(w != std::vector<float>(w.size(), 0.0f));
}

TEST_CASE("cpu cross-entropy matches the reference", "[halide]") {
    const Dims d = GENERATE(Dims{4, 10, {}}, Dims{2, 3, {5, 6}}, Dims{2, 4, {3, 5, 6}});
    std::mt19937 rng(31);
    const Tensor logits = random_tensor(d, {{1, 1}, {2, 2}}, rng);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(d.n * d.points()));
    std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(d.c - 1));
    for (auto& l : labels) l = label(rng);
    const LabelView lv = dense_view(labels.data(), Dims{d.n, 1, d.space});

    Tensor expected(d), got(d);
    const double loss_ref = reference_kernels().loss->cross_entropy(logits.interior(), lv, 0.25f, expected.interior());
    const double loss = cpu_loss().cross_entropy(logits.interior(), lv, 0.25f, got.interior());
    CHECK(loss == Approx(loss_ref).epsilon(1e-12));
    CHECK(loss > 0.0);
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(cpu_loss().cross_entropy(logits.interior(), lv, 0.25f, View{}) == Approx(loss_ref).epsilon(1e-12));
}

TEST_CASE("cpu regression losses match the reference", "[halide]") {
    using dsl::frontend::Regression;
    const Regression r = GENERATE(Regression::mse, Regression::l1, Regression::bce_with_logits);
    const Dims d = GENERATE(Dims{4, 10, {}}, Dims{2, 3, {5, 6}}, Dims{2, 3, {4, 5, 6}});
    CAPTURE(static_cast<int>(r), d);
    std::mt19937 rng(41);
    const Tensor x = random_tensor(d, {{1, 1}, {2, 2}}, rng), t = random_tensor(d, {{0, 2}, {1, 0}}, rng);
    Tensor expected(d), got(d);
    const double loss_ref =
        reference_kernels().loss->regression(r, x.interior(), t.interior(), 0.25f, expected.interior());
    const double loss = cpu_loss().regression(r, x.interior(), t.interior(), 0.25f, got.interior());
    CHECK(loss == Approx(loss_ref).epsilon(1e-6));
    CHECK(loss > 0.0);
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(cpu_loss().regression(r, x.interior(), t.interior(), 0.25f, View{}) == Approx(loss_ref).epsilon(1e-6));
}

TEST_CASE("the cpu kernel set uses the halide kernels", "[halide]") {
    const Kernels k = cpu_kernels();
    CHECK(k.conv != nullptr);
    CHECK(k.fc != nullptr);
    CHECK(k.activation == &halide_activation());
    CHECK(k.batchnorm == &halide_batchnorm());
    CHECK(k.pool == &halide_pool());
    CHECK(k.eltwise == &halide_eltwise());
    CHECK(k.loss == &cpu_loss());
}

TEST_CASE("halide kernels split big tensors into parallel tasks as the reference", "[halide]") {
    // Planes bigger than a task (runs of rows, the last one short) and many small planes per task (the last
    // task short): the shapes above fit in one task.
    const Dims d = GENERATE(Dims{1, 2, {150, 130}}, Dims{1, 1, {300, 70}}, Dims{2, 70, {16, 16}}, Dims{3, 200, {5, 7}},
                            Dims{1, 3, {20, 40, 50}}, Dims{2, 40, {4, 8, 8}});
    CAPTURE(d);
    std::mt19937 rng(37);
    const Tensor x = random_tensor(d, some_margins, rng), dy = random_tensor(d, {{1, 0}, {2, 1}}, rng);
    const auto c = static_cast<std::size_t>(d.c);

    Tensor expected = random_tensor(d, some_margins, rng), got = expected;
    reference_kernels().activation->backward(leaky, x.interior(), dy.interior(), 0.1f, expected.interior());
    halide_activation().backward(leaky, x.interior(), dy.interior(), 0.1f, got.interior());
    CHECK(same_storage(got, expected));
    reference_kernels().eltwise->add({x.interior(), dy.interior()}, expected.interior());
    halide_eltwise().add({x.interior(), dy.interior()}, got.interior());
    CHECK(same_storage(got, expected));

    std::vector<double> sum_ref(c, 0.5), sq_ref(c, 0.5), sum(c, 0.5), sq(c, 0.5);
    reference_kernels().batchnorm->statistics(x.interior(), sum_ref.data(), sq_ref.data());
    halide_batchnorm().statistics(x.interior(), sum.data(), sq.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(sum[k] == Approx(sum_ref[k]).epsilon(1e-12));
        CHECK(sq[k] == Approx(sq_ref[k]).epsilon(1e-12));
    }
    std::vector<float> mean(c), inv_std(c), gamma(c, 1.25f), beta(c, -0.5f);
    const double count = double(d.n * d.points());
    for (std::size_t k = 0; k < c; ++k) {
        mean[k] = float((sum_ref[k] - 0.5) / count);
        inv_std[k] = 0.75f + 0.01f * float(k);
    }
    reference_kernels().batchnorm->forward(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(),
                                           expected.interior());
    halide_batchnorm().forward(x.interior(), mean.data(), inv_std.data(), gamma.data(), beta.data(), got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(same_margins(got, expected));

    std::vector<double> sdy_ref(c, 0.0), sdx_ref(c, 0.0), sdy(c, 0.0), sdx(c, 0.0);
    reference_kernels().batchnorm->backward_statistics(x.interior(), dy.interior(), mean.data(), inv_std.data(),
                                                       sdy_ref.data(), sdx_ref.data());
    halide_batchnorm().backward_statistics(x.interior(), dy.interior(), mean.data(), inv_std.data(), sdy.data(),
                                           sdx.data());
    for (std::size_t k = 0; k < c; ++k) {
        CHECK(sdy[k] == Approx(sdy_ref[k]).epsilon(1e-12).margin(1e-12));
        CHECK(sdx[k] == Approx(sdx_ref[k]).epsilon(1e-12).margin(1e-12));
    }
    reference_kernels().batchnorm->backward(x.interior(), dy.interior(), mean.data(), inv_std.data(), gamma.data(),
                                            sdy_ref.data(), sdx_ref.data(), count, expected.interior());
    halide_batchnorm().backward(x.interior(), dy.interior(), mean.data(), inv_std.data(), gamma.data(), sdy_ref.data(),
                                sdx_ref.data(), count, got.interior());
    CHECK(mismatches(got.interior(), expected.interior(), 1e-6) == 0);
    CHECK(same_margins(got, expected));

    const auto planes = static_cast<std::size_t>(d.n * d.c);
    std::vector<double> plane_ref(planes, 1.0), plane(planes, 1.0);
    reference_kernels().pool->global_sum(x.interior(), plane_ref.data());
    halide_pool().global_sum(x.interior(), plane.data());
    for (std::size_t i = 0; i < planes; ++i) CHECK(plane[i] == Approx(plane_ref[i]).epsilon(1e-12));
}
