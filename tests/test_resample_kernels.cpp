// upsample and deconv kernels, of images and volumes: the reference against PyTorch's values (worked out by
// hand from its formulas) and against central finite differences of its own forward, on tiles placed anywhere
// in the tensor; the CPU's against the reference; and the input range rules (window.hpp) that the plan's halos
// follow.
#include "../backend/src/kernels/resample_kernels.hpp"
#include "kernel_layouts.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/scheduler/window.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

namespace {

using namespace dsl::backend;
using dsl::scheduler::deconv_input;
using dsl::scheduler::upsample_input;
using std::int64_t;

// A random tensor whose view is not dense: `d` (an image or a volume) inside margins, so that stride bugs read
// wrong elements.
struct Block {
    Tensor storage;
    View view;
    Block(Dims d, std::mt19937& rng) : storage(around(d), margins(d)) {
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (int64_t i = 0; i < storage.size(); ++i) storage.data()[i] = u(rng);
        view = storage.padded().sub(0, 1, d.rank() == 3 ? Index{1, 2, 1} : Index{2, 1}, d);
    }
    static Dims around(const Dims& d) {
        return d.rank() == 3 ? Dims{d.n, d.c + 1, {d.space[0] + 1, d.space[1] + 2, d.space[2] + 1}}
                             : Dims{d.n, d.c + 1, {d.space[0] + 2, d.space[1] + 1}};
    }
    static Margins margins(const Dims& d) {
        return d.rank() == 3 ? Margins{{2, 1}, {1, 2}, {2, 1}} : Margins{{1, 2}, {2, 1}};
    }
};

double dot(ConstView a, ConstView b) {
    double acc = 0.0;
    for_each_element(a.dims,
                     [&](int64_t n, int64_t c, const Index& i) { acc += double(a.at(n, c, i)) * b.at(n, c, i); });
    return acc;
}

std::vector<double> values(ConstView v) {
    std::vector<double> out;
    for_each_element(v.dims, [&](int64_t n, int64_t c, const Index& i) { out.push_back(v.at(n, c, i)); });
    return out;
}

// Central differences in float with a step of 1e-2 (the kernels are linear: exact but for rounding).
std::vector<double> numeric_gradient(View v, const std::function<double()>& objective) {
    std::vector<double> out;
    for_each_element(v.dims, [&](int64_t n, int64_t c, const Index& i) {
        float& e = v.at(n, c, i);
        const float original = e;
        e = original + 1e-2f;
        const double up = objective();
        const float hi = e;
        e = original - 1e-2f;
        const double down = objective();
        const float lo = e;
        e = original;
        out.push_back((up - down) / (double(hi) - double(lo)));
    });
    return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
    REQUIRE(got.size() == want.size());
    double largest = 0.0;
    for (double w : want) largest = std::max(largest, std::abs(w));
    int64_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (std::abs(got[i] - want[i]) > tolerance * std::max(largest, 1.0)) ++bad;
    CHECK(bad == 0);
    CHECK(largest > 0.0);  // a zero gradient would pass anything
}

// An upsampling of an in_h x in_w input, its output view rows [oy0, oy1) and columns [ox0, ox1): the input
// view is exactly what those outputs read.
struct UpCase {
    int64_t scale;
    bool linear;
    int64_t in_h, in_w, oy0, oy1, ox0, ox1;
};

Upsample placed(const UpCase& c, Dims& x, Dims& y) {
    const auto rows = upsample_input(c.oy0, c.oy1, c.scale, c.linear, c.in_h);
    const auto cols = upsample_input(c.ox0, c.ox1, c.scale, c.linear, c.in_w);
    x = Dims{2, 3, {rows.end - rows.first, cols.end - cols.first}};
    y = Dims{2, 3, {c.oy1 - c.oy0, c.ox1 - c.ox0}};
    return Upsample{c.scale, c.linear, {c.in_h, c.in_w}, Placement{{rows.first, cols.first}, {c.oy0, c.ox0}}};
}

}  // namespace

TEST_CASE("upsample's input ranges: what output rows read", "[resample]") {
    // nearest, scale 2: rows [3, 8) read [1, 4); a tile starting mid-pair reads the pair's input row.
    CHECK(upsample_input(3, 8, 2, false, 10).first == 1);
    CHECK(upsample_input(3, 8, 2, false, 10).end == 4);
    CHECK(upsample_input(4, 8, 2, false, 10).first == 2);
    // bilinear, scale 2: output 4 is src 1.75 (rows 1, 2); output 7 src 3.25 (rows 3, 4): one row more
    // on each side than nearest; the last rows clamp at the border.
    CHECK(upsample_input(4, 8, 2, true, 10).first == 1);
    CHECK(upsample_input(4, 8, 2, true, 10).end == 5);
    CHECK(upsample_input(0, 20, 2, true, 10).first == 0);
    CHECK(upsample_input(0, 20, 2, true, 10).end == 10);
    // deconv, kernel 3, stride 2, pad 1: output o reads the i with o + 1 - 2 <= 2i <= o + 1, so outputs
    // [4, 6) read inputs 2 (o = 4 = 2*2 - 1 + 1, o = 5) and 3 (o = 5 = 3*2 - 1 + 0).
    CHECK(deconv_input(4, 6, 3, 2, 1, 10).first == 2);
    CHECK(deconv_input(4, 6, 3, 2, 1, 10).end == 4);
    CHECK(deconv_input(0, 1, 3, 2, 1, 10).first == 0);
    CHECK(deconv_input(0, 1, 3, 2, 1, 10).end == 1);
    // kernel 1, stride 3: output 1 is reached by no input.
    CHECK(deconv_input(1, 2, 1, 3, 0, 10).end == deconv_input(1, 2, 1, 3, 0, 10).first);
}

TEST_CASE("reference upsample: PyTorch's values", "[resample][reference]") {
    // F.interpolate(x, scale_factor=2, mode=...) of [[1, 2], [3, 4]]; bilinear with align_corners=False.
    std::vector<float> x{1, 2, 3, 4}, y(16);
    const View xv = dense_view(x.data(), Dims{1, 1, {2, 2}}), yv = dense_view(y.data(), Dims{1, 1, {4, 4}});
    const Placement origin{{0, 0}, {0, 0}};
    reference_upsample().forward(Upsample{2, true, {2, 2}, origin}, xv, yv);
    CHECK(y == std::vector<float>{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
    reference_upsample().forward(Upsample{2, false, {2, 2}, origin}, xv, yv);
    CHECK(y == std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
    // The gradient of the sum of the bilinear output: every input collects weights summing to its share.
    std::vector<float> ones(16, 1.0f), dx(4);
    reference_upsample().backward(Upsample{2, true, {2, 2}, origin}, dense_view(ones.data(), Dims{1, 1, {4, 4}}),
                                  dense_view(dx.data(), Dims{1, 1, {2, 2}}));
    CHECK(dx == std::vector<float>{4, 4, 4, 4});
}

TEST_CASE("reference upsample: backward by finite differences, tiles anywhere", "[resample][reference]") {
    const UpCase c = GENERATE(UpCase{2, false, 7, 6, 0, 14, 0, 12}, UpCase{2, true, 7, 6, 0, 14, 0, 12},
                              UpCase{2, true, 7, 6, 5, 11, 3, 12}, UpCase{3, true, 5, 4, 4, 13, 1, 7},
                              UpCase{3, false, 5, 4, 4, 13, 1, 7});
    CAPTURE(c.scale, c.linear, c.oy0, c.oy1, c.ox0, c.ox1);
    std::mt19937 rng(5);
    Dims xd, yd;
    const Upsample u = placed(c, xd, yd);
    Block x(xd, rng), y(yd, rng), r(yd, rng), dx(xd, rng);
    UpsampleKernels& k = reference_upsample();
    auto objective = [&] {
        k.forward(u, x.view, y.view);
        return dot(y.view, r.view);
    };
    objective();
    k.backward(u, r.view, dx.view);
    check_close(values(dx.view), numeric_gradient(x.view, objective), 1e-3);

    // A tile's outputs are the whole tensor's at the same places: the kernels run on any tile alike.
    const UpCase whole{c.scale, c.linear, c.in_h, c.in_w, 0, c.in_h * c.scale, 0, c.in_w * c.scale};
    Dims wxd, wyd;
    const Upsample wu = placed(whole, wxd, wyd);
    Block wx(wxd, rng), wy(wyd, rng);
    const auto rows = upsample_input(c.oy0, c.oy1, c.scale, c.linear, c.in_h);
    const auto cols = upsample_input(c.ox0, c.ox1, c.scale, c.linear, c.in_w);
    for_each_element(xd, [&](int64_t n, int64_t ch, const Index& i) {
        wx.view.at(n, ch, {rows.first + i[0], cols.first + i[1]}) = x.view.at(n, ch, i);
    });
    k.forward(wu, wx.view, wy.view);
    k.forward(u, x.view, y.view);
    int64_t differ = 0;
    for_each_element(yd, [&](int64_t n, int64_t ch, const Index& i) {
        differ += y.view.at(n, ch, i) != wy.view.at(n, ch, {c.oy0 + i[0], c.ox0 + i[1]});
    });
    CHECK(differ == 0);
}

TEST_CASE("cpu upsample matches the reference", "[resample][cpu]") {
    const UpCase c = GENERATE(UpCase{2, false, 9, 6, 0, 18, 0, 12}, UpCase{2, true, 9, 6, 0, 18, 0, 12},
                              UpCase{2, true, 9, 6, 5, 13, 3, 12}, UpCase{4, true, 5, 4, 3, 17, 1, 15},
                              UpCase{3, false, 5, 4, 4, 13, 1, 7});
    CAPTURE(c.scale, c.linear, c.oy0, c.oy1, c.ox0, c.ox1);
    std::mt19937 rng(7);
    Dims xd, yd;
    const Upsample u = placed(c, xd, yd);
    Block x(xd, rng), dy(yd, rng), y(yd, rng), y_ref(yd, rng), dx(xd, rng), dx_ref(xd, rng);
    reference_upsample().forward(u, x.view, y_ref.view);
    cpu_upsample().forward(u, x.view, y.view);
    check_close(values(y.view), values(y_ref.view), 1e-6);
    reference_upsample().backward(u, dy.view, dx_ref.view);
    cpu_upsample().backward(u, dy.view, dx.view);
    check_close(values(dx.view), values(dx_ref.view), 1e-6);
}

namespace {

// A transposed convolution of an in_h x in_w input with `cin` channels into `cout`, its output view rows
// [oy0, oy1) and columns [ox0, ox1); the input view is what those read.
struct DeCase {
    int64_t cin, cout, k, s, p, op, in_h, in_w, oy0, oy1, ox0, ox1;
    int64_t out(int64_t in) const { return (in - 1) * s - 2 * p + k + op; }
};

Deconv placed(const DeCase& c, Dims& x, Dims& y) {
    const auto rows = deconv_input(c.oy0, c.oy1, c.k, c.s, c.p, c.in_h);
    const auto cols = deconv_input(c.ox0, c.ox1, c.k, c.s, c.p, c.in_w);
    x = Dims{2, c.cin, {rows.end - rows.first, cols.end - cols.first}};
    y = Dims{2, c.cout, {c.oy1 - c.oy0, c.ox1 - c.ox0}};
    return Deconv{{c.k, c.k}, {c.s, c.s}, {c.p, c.p}, Placement{{rows.first, cols.first}, {c.oy0, c.ox0}}};
}

}  // namespace

TEST_CASE("reference deconv: PyTorch's values", "[resample][reference]") {
    // ConvTranspose2d(1, 1, 2, bias=False) with weight [[1, 2], [3, 4]] on [[1, 2], [3, 4]]: 3x3.
    std::vector<float> x{1, 2, 3, 4}, w{1, 2, 3, 4}, y(9);
    const View xv = dense_view(x.data(), Dims{1, 1, {2, 2}}), wv = dense_view(w.data(), Dims{1, 1, {2, 2}});
    const Placement origin{{0, 0}, {0, 0}};
    reference_deconv().forward(xv, wv, nullptr, dense_view(y.data(), Dims{1, 1, {3, 3}}),
                               Deconv{{2, 2}, {1, 1}, {0, 0}, origin});
    CHECK(y == std::vector<float>{1, 4, 4, 6, 20, 16, 9, 24, 16});
    // stride 2, pad 1, output_pad 1, bias 0.5: (2-1)*2 - 2 + 2 + 1 = 3 rows; input (i, j) lands at
    // (2i - 1 + a, 2j - 1 + b): rows 0, 1, 2 are (i, a) = (0, 1), (1, 0), (1, 1), and columns likewise.
    const float bias = 0.5f;
    reference_deconv().forward(xv, wv, &bias, dense_view(y.data(), Dims{1, 1, {3, 3}}),
                               Deconv{{2, 2}, {2, 2}, {1, 1}, origin});
    CHECK(y == std::vector<float>{4.5, 6.5, 8.5, 6.5, 4.5, 8.5, 12.5, 12.5, 16.5});
}

TEST_CASE("reference deconv: backward by finite differences, tiles anywhere", "[resample][reference]") {
    const DeCase c = GENERATE(DeCase{2, 3, 3, 2, 1, 1, 5, 4, 0, 10, 0, 8}, DeCase{2, 3, 3, 2, 1, 1, 5, 4, 3, 8, 1, 6},
                              DeCase{3, 2, 2, 2, 0, 0, 4, 3, 1, 6, 0, 6}, DeCase{2, 2, 3, 1, 1, 0, 5, 5, 2, 4, 0, 5},
                              DeCase{1, 2, 1, 3, 0, 2, 3, 3, 0, 9, 0, 9});
    CAPTURE(c.k, c.s, c.p, c.op, c.oy0, c.oy1, c.ox0, c.ox1);
    REQUIRE(c.oy1 <= c.out(c.in_h));
    std::mt19937 rng(9);
    Dims xd, yd;
    const Deconv d = placed(c, xd, yd);
    const Dims wd{c.cin, c.cout, {c.k, c.k}};
    Block x(xd, rng), w(wd, rng), y(yd, rng), r(yd, rng), dx(xd, rng), dw(wd, rng);
    std::vector<float> bias(static_cast<std::size_t>(c.cout), 0.25f), db(bias.size());
    DeconvKernels& k = reference_deconv();
    auto objective = [&] {
        k.forward(x.view, w.view, bias.data(), y.view, d);
        return dot(y.view, r.view);
    };
    objective();
    k.backward_data(r.view, w.view, dx.view, d);
    k.backward_weights(x.view, r.view, dw.view, db.data(), d);
    check_close(values(dx.view), numeric_gradient(x.view, objective), 1e-3);
    check_close(values(dw.view), numeric_gradient(w.view, objective), 1e-3);
    std::vector<double> sums(bias.size(), 0.0);
    for_each_element(
        yd, [&](int64_t n, int64_t f, const Index& i) { sums[static_cast<std::size_t>(f)] += r.view.at(n, f, i); });
    check_close(std::vector<double>(db.begin(), db.end()), sums, 1e-5);
}

TEST_CASE("cpu deconv (oneDNN convolutions) matches the reference", "[resample][cpu]") {
    const DeCase c =
        GENERATE(DeCase{2, 3, 3, 2, 1, 1, 5, 4, 0, 10, 0, 8}, DeCase{2, 3, 3, 2, 1, 1, 5, 4, 3, 8, 1, 6},
                 DeCase{3, 2, 2, 2, 0, 0, 4, 3, 1, 6, 0, 6}, DeCase{2, 2, 3, 1, 1, 0, 5, 5, 2, 4, 0, 5},
                 DeCase{1, 2, 1, 3, 0, 2, 3, 3, 0, 9, 0, 9}, DeCase{8, 4, 4, 2, 1, 0, 16, 12, 0, 32, 0, 24});
    CAPTURE(c.k, c.s, c.p, c.op, c.oy0, c.oy1, c.ox0, c.ox1);
    std::mt19937 rng(11);
    Dims xd, yd;
    const Deconv d = placed(c, xd, yd);
    const Dims wd{c.cin, c.cout, {c.k, c.k}};
    Block x(xd, rng), w(wd, rng), dy(yd, rng), y(yd, rng), y_ref(yd, rng), dx(xd, rng), dx_ref(xd, rng), dw(wd, rng),
        dw_ref(wd, rng);
    std::vector<float> bias(static_cast<std::size_t>(c.cout), -0.75f), db(bias.size()), db_ref(bias.size());
    DeconvKernels& cpu = *cpu_kernels().deconv;
    reference_deconv().forward(x.view, w.view, bias.data(), y_ref.view, d);
    cpu.forward(x.view, w.view, bias.data(), y.view, d);
    check_close(values(y.view), values(y_ref.view), 1e-5);
    reference_deconv().backward_data(dy.view, w.view, dx_ref.view, d);
    cpu.backward_data(dy.view, w.view, dx.view, d);
    check_close(values(dx.view), values(dx_ref.view), 1e-5);
    reference_deconv().backward_weights(x.view, dy.view, dw_ref.view, db_ref.data(), d);
    cpu.backward_weights(x.view, dy.view, dw.view, db.data(), d);
    check_close(values(dw.view), values(dw_ref.view), 1e-5);
    check_close(std::vector<double>(db.begin(), db.end()), std::vector<double>(db_ref.begin(), db_ref.end()), 1e-5);
}

// Volumes: the same, along depth, rows and columns.

namespace {

// An upsampling of an input of `in` extents, its output view [first, end) along each dimension: the input
// view is exactly what those outputs read.
struct UpTile {
    int64_t scale;
    bool linear;
    Index in, first, end;
};

Upsample placed(const UpTile& c, Dims& x, Dims& y) {
    Index x_first = c.in, x_extent = c.in, y_extent = c.in;
    for (int d = 0; d < c.in.rank(); ++d) {
        const auto r = upsample_input(c.first[d], c.end[d], c.scale, c.linear, c.in[d]);
        x_first[d] = r.first, x_extent[d] = r.end - r.first, y_extent[d] = c.end[d] - c.first[d];
    }
    x = Dims{2, 3, x_extent};
    y = Dims{2, 3, y_extent};
    return Upsample{c.scale, c.linear, c.in, Placement{x_first, c.first}};
}

// The whole upsampled tensor, a tile of which `c` is.
UpTile whole(const UpTile& c) {
    Index end = c.in;
    for (int64_t& e : end) e *= c.scale;
    return UpTile{c.scale, c.linear, c.in, Index::filled(c.in.rank(), 0), end};
}

// `v` at global place i of a view whose first element is at global place `at`.
template <typename V>
auto& at_global(const V& v, int64_t n, int64_t c, const Index& at, const Index& i) {
    Index local = i;
    for (int d = 0; d < i.rank(); ++d) local[d] -= at[d];
    return v.at(n, c, local);
}

Index plus(Index a, const Index& b) {
    for (int d = 0; d < a.rank(); ++d) a[d] += b[d];
    return a;
}

}  // namespace

TEST_CASE("reference upsample on volumes: PyTorch's values", "[resample][reference]") {
    // F.interpolate(x, scale_factor=2, mode='trilinear', align_corners=False) of x(z, y, x) = 1 + 4z + 2y + x on
    // 2x2x2: linear along each dimension, [a, b] becomes [a, (3a + b) / 4, (a + 3b) / 4, b], so the output is
    // 1 + 4 t(z) + 2 t(y) + t(x) with t = 0, 1/4, 3/4, 1. Nearest repeats each input in a 2x2x2 block.
    std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8}, y(64);
    const View xv = dense_view(x.data(), Dims{1, 1, {2, 2, 2}}), yv = dense_view(y.data(), Dims{1, 1, {4, 4, 4}});
    const Placement origin{{0, 0, 0}, {0, 0, 0}};
    const float t[4] = {0.0f, 0.25f, 0.75f, 1.0f};
    reference_upsample().forward(Upsample{2, true, {2, 2, 2}, origin}, xv, yv);
    int64_t wrong = 0;
    for_each_element(yv.dims, [&](int64_t, int64_t, const Index& o) {
        wrong += yv.at(0, 0, o) != 1 + 4 * t[o[0]] + 2 * t[o[1]] + t[o[2]];
    });
    CHECK(wrong == 0);
    reference_upsample().forward(Upsample{2, false, {2, 2, 2}, origin}, xv, yv);
    for_each_element(yv.dims, [&](int64_t, int64_t, const Index& o) {
        wrong += yv.at(0, 0, o) != xv.at(0, 0, {o[0] / 2, o[1] / 2, o[2] / 2});
    });
    CHECK(wrong == 0);
    // The gradient of the sum of the trilinear output: every input collects weights summing to its share.
    std::vector<float> ones(64, 1.0f), dx(8);
    reference_upsample().backward(Upsample{2, true, {2, 2, 2}, origin}, dense_view(ones.data(), Dims{1, 1, {4, 4, 4}}),
                                  dense_view(dx.data(), Dims{1, 1, {2, 2, 2}}));
    CHECK(dx == std::vector<float>(8, 8.0f));
}

TEST_CASE("reference upsample on volumes: each output is its 8 corners, weighed by products", "[resample][reference]") {
    // An independent sum over the corners (upsample_source along each dimension), on random inputs.
    const UpTile c =
        GENERATE(UpTile{2, true, {3, 4, 5}, {0, 0, 0}, {6, 8, 10}}, UpTile{3, true, {3, 2, 4}, {1, 2, 4}, {8, 6, 11}},
                 UpTile{3, false, {3, 2, 4}, {1, 2, 4}, {8, 6, 11}});
    CAPTURE(c.scale, c.linear, c.first, c.end);
    std::mt19937 rng(3);
    Dims xd, yd;
    const Upsample u = placed(c, xd, yd);
    Block x(xd, rng), y(yd, rng);
    reference_upsample().forward(u, x.view, y.view);
    int64_t wrong = 0;
    for_each_element(yd, [&](int64_t n, int64_t ch, const Index& o) {
        dsl::scheduler::UpsampleSource s[3];
        for (int d = 0; d < 3; ++d)
            s[d] = dsl::scheduler::upsample_source(c.first[d] + o[d], c.scale, c.linear, c.in[d]);
        double expected = 0.0;
        for (int corner = 0; corner < 8; ++corner) {
            Index i{0, 0, 0};
            double weight = 1.0;
            for (int d = 0; d < 3; ++d) {
                const bool far = (corner >> d) & 1;
                i[d] = far ? s[d].i1 : s[d].i0;
                weight *= far ? s[d].lambda : 1.0 - s[d].lambda;
            }
            expected += weight * at_global(x.view, n, ch, u.at.x, i);
        }
        wrong += std::abs(y.view.at(n, ch, o) - expected) > 1e-6;
    });
    CHECK(wrong == 0);
}

TEST_CASE("reference upsample on volumes: backward by finite differences, tiles anywhere", "[resample][reference]") {
    const UpTile c =
        GENERATE(UpTile{2, false, {3, 4, 3}, {0, 0, 0}, {6, 8, 6}}, UpTile{2, true, {3, 4, 3}, {0, 0, 0}, {6, 8, 6}},
                 UpTile{2, true, {4, 3, 5}, {3, 1, 2}, {7, 5, 9}}, UpTile{3, true, {3, 2, 3}, {2, 1, 4}, {8, 6, 7}},
                 UpTile{3, false, {3, 2, 3}, {1, 0, 2}, {7, 5, 8}});
    CAPTURE(c.scale, c.linear, c.in, c.first, c.end);
    std::mt19937 rng(5);
    Dims xd, yd;
    const Upsample u = placed(c, xd, yd);
    Block x(xd, rng), y(yd, rng), r(yd, rng), dx(xd, rng);
    UpsampleKernels& k = reference_upsample();
    auto objective = [&] {
        k.forward(u, x.view, y.view);
        return dot(y.view, r.view);
    };
    objective();
    k.backward(u, r.view, dx.view);
    check_close(values(dx.view), numeric_gradient(x.view, objective), 1e-3);

    // A tile's outputs are the whole tensor's at the same places: the kernels run on any tile alike.
    Dims wxd, wyd;
    const Upsample wu = placed(whole(c), wxd, wyd);
    Block wx(wxd, rng), wy(wyd, rng);
    for_each_element(
        xd, [&](int64_t n, int64_t ch, const Index& i) { wx.view.at(n, ch, plus(i, u.at.x)) = x.view.at(n, ch, i); });
    k.forward(wu, wx.view, wy.view);
    k.forward(u, x.view, y.view);
    int64_t differ = 0;
    for_each_element(yd, [&](int64_t n, int64_t ch, const Index& i) {
        differ += y.view.at(n, ch, i) != wy.view.at(n, ch, plus(i, c.first));
    });
    CHECK(differ == 0);
}

TEST_CASE("cpu upsample matches the reference on volumes", "[resample][cpu]") {
    const UpTile c =
        GENERATE(UpTile{2, false, {4, 5, 3}, {0, 0, 0}, {8, 10, 6}}, UpTile{2, true, {4, 5, 3}, {0, 0, 0}, {8, 10, 6}},
                 UpTile{2, true, {4, 5, 3}, {3, 5, 1}, {7, 9, 6}}, UpTile{4, true, {3, 2, 5}, {1, 3, 2}, {11, 8, 17}},
                 UpTile{3, false, {3, 2, 5}, {1, 3, 2}, {8, 6, 13}});
    CAPTURE(c.scale, c.linear, c.in, c.first, c.end);
    std::mt19937 rng(7);
    Dims xd, yd;
    const Upsample u = placed(c, xd, yd);
    Block x(xd, rng), dy(yd, rng), y(yd, rng), y_ref(yd, rng), dx(xd, rng), dx_ref(xd, rng);
    reference_upsample().forward(u, x.view, y_ref.view);
    cpu_upsample().forward(u, x.view, y.view);
    check_close(values(y.view), values(y_ref.view), 1e-6);
    reference_upsample().backward(u, dy.view, dx_ref.view);
    cpu_upsample().backward(u, dy.view, dx.view);
    check_close(values(dx.view), values(dx_ref.view), 1e-6);
}

namespace {

// A transposed convolution of an input of `in` extents with `cin` channels into `cout`, its output view
// [first, end) along each dimension; the input view is what those read.
struct DeTile {
    int64_t cin, cout;
    Index k, s, p, op, in, first, end;
    int64_t out(int d) const { return (in[d] - 1) * s[d] - 2 * p[d] + k[d] + op[d]; }
};

Deconv placed(const DeTile& c, Dims& x, Dims& y) {
    Index x_first = c.in, x_extent = c.in, y_extent = c.in;
    for (int d = 0; d < c.in.rank(); ++d) {
        const auto r = deconv_input(c.first[d], c.end[d], c.k[d], c.s[d], c.p[d], c.in[d]);
        x_first[d] = r.first, x_extent[d] = r.end - r.first, y_extent[d] = c.end[d] - c.first[d];
    }
    x = Dims{2, c.cin, x_extent};
    y = Dims{2, c.cout, y_extent};
    return Deconv{c.k, c.s, c.p, Placement{x_first, c.first}};
}

DeTile whole(const DeTile& c) {
    DeTile w = c;
    w.first = Index::filled(c.in.rank(), 0);
    for (int d = 0; d < c.in.rank(); ++d) w.end[d] = c.out(d);
    return w;
}

const std::vector<DeTile>& deconv_volumes() {
    static const std::vector<DeTile> cases = {
        {2, 3, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {3, 4, 3}, {0, 0, 0}, {6, 8, 6}},  // whole
        {2, 2, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 0, 1}, {3, 3, 4}, {1, 2, 3}, {5, 4, 7}},  // a tile, mixed
        {3, 2, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, {3, 2, 3}, {1, 0, 1}, {5, 4, 6}},  // 2x2x2 stride 2
        {1, 2, {1, 1, 1}, {3, 3, 3}, {0, 0, 0}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {6, 6, 6}},  // outputs no input
                                                                                              // reaches
    };
    return cases;
}

}  // namespace

TEST_CASE("reference deconv on volumes: PyTorch's values", "[resample][reference]") {
    // ConvTranspose3d(1, 1, 2, bias=False) with weight 1 on x(z, y, x) = 1 + 4z + 2y + x (2x2x2): each output sums
    // the inputs i with o - 1 <= i <= o, a box of them.
    std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8}, w(8, 1.0f), y(27);
    const View xv = dense_view(x.data(), Dims{1, 1, {2, 2, 2}}), wv = dense_view(w.data(), Dims{1, 1, {2, 2, 2}});
    const View yv = dense_view(y.data(), Dims{1, 1, {3, 3, 3}});
    const Placement origin{{0, 0, 0}, {0, 0, 0}};
    reference_deconv().forward(xv, wv, nullptr, yv, Deconv{{2, 2, 2}, {1, 1, 1}, {0, 0, 0}, origin});
    CHECK(y == std::vector<float>{1,  3,  2,  4,  10, 6,  3, 7,  4,  6,  14, 8,  16, 36,
                                  20, 10, 22, 12, 5,  11, 6, 12, 26, 14, 7,  15, 8});
    // weight 1..8, stride 2, pad 1, output_pad 1, bias 0.5: (2-1)*2 - 2 + 2 + 1 = 3 along each dimension; input
    // i lands at 2i - 1 + a: outputs 0, 1, 2 are (i, a) = (0, 1), (1, 0), (1, 1) along each, so y = x(i) w(a).
    std::iota(w.begin(), w.end(), 1.0f);
    const float bias = 0.5f;
    reference_deconv().forward(xv, wv, &bias, yv, Deconv{{2, 2, 2}, {2, 2, 2}, {1, 1, 1}, origin});
    CHECK(y == std::vector<float>{8.5,  14.5, 16.5, 18.5, 20.5, 24.5, 24.5, 28.5, 32.5, 20.5, 18.5, 24.5, 14.5, 8.5,
                                  16.5, 28.5, 24.5, 32.5, 40.5, 42.5, 48.5, 42.5, 40.5, 48.5, 56.5, 56.5, 64.5});
}

TEST_CASE("reference deconv on volumes: backward by finite differences, tiles anywhere", "[resample][reference]") {
    const DeTile c = GENERATE(from_range(deconv_volumes()));
    CAPTURE(c.k, c.s, c.p, c.op, c.in, c.first, c.end);
    for (int d = 0; d < 3; ++d) REQUIRE(c.end[d] <= c.out(d));
    std::mt19937 rng(9);
    Dims xd, yd;
    const Deconv d = placed(c, xd, yd);
    const Dims wd{c.cin, c.cout, c.k};
    Block x(xd, rng), w(wd, rng), y(yd, rng), r(yd, rng), dx(xd, rng), dw(wd, rng);
    std::vector<float> bias(static_cast<std::size_t>(c.cout), 0.25f), db(bias.size());
    DeconvKernels& k = reference_deconv();
    auto objective = [&] {
        k.forward(x.view, w.view, bias.data(), y.view, d);
        return dot(y.view, r.view);
    };
    objective();
    k.backward_data(r.view, w.view, dx.view, d);
    k.backward_weights(x.view, r.view, dw.view, db.data(), d);
    check_close(values(dx.view), numeric_gradient(x.view, objective), 1e-3);
    check_close(values(dw.view), numeric_gradient(w.view, objective), 1e-3);
    std::vector<double> sums(bias.size(), 0.0);
    for_each_element(
        yd, [&](int64_t n, int64_t f, const Index& i) { sums[static_cast<std::size_t>(f)] += r.view.at(n, f, i); });
    check_close(std::vector<double>(db.begin(), db.end()), sums, 1e-5);

    // A tile's outputs are the whole tensor's at the same places.
    Dims wxd, wyd;
    const Deconv wd_whole = placed(whole(c), wxd, wyd);
    Block wx(wxd, rng), wy(wyd, rng);
    for_each_element(
        xd, [&](int64_t n, int64_t ch, const Index& i) { wx.view.at(n, ch, plus(i, d.at.x)) = x.view.at(n, ch, i); });
    k.forward(wx.view, w.view, bias.data(), wy.view, wd_whole);
    k.forward(x.view, w.view, bias.data(), y.view, d);
    int64_t differ = 0;
    for_each_element(yd, [&](int64_t n, int64_t f, const Index& i) {
        differ += y.view.at(n, f, i) != wy.view.at(n, f, plus(i, c.first));
    });
    CHECK(differ == 0);
}

namespace {

// A kernel set's deconvolution against the reference's, forward and both backwards.
void compare_deconv(DeconvKernels& k, const DeTile& c, std::uint32_t seed, double tolerance) {
    std::mt19937 rng(seed);
    Dims xd, yd;
    const Deconv d = placed(c, xd, yd);
    const Dims wd{c.cin, c.cout, c.k};
    Block x(xd, rng), w(wd, rng), dy(yd, rng), y(yd, rng), y_ref(yd, rng), dx(xd, rng), dx_ref(xd, rng), dw(wd, rng),
        dw_ref(wd, rng);
    std::vector<float> bias(static_cast<std::size_t>(c.cout), -0.75f), db(bias.size()), db_ref(bias.size());
    reference_deconv().forward(x.view, w.view, bias.data(), y_ref.view, d);
    k.forward(x.view, w.view, bias.data(), y.view, d);
    check_close(values(y.view), values(y_ref.view), tolerance);
    reference_deconv().backward_data(dy.view, w.view, dx_ref.view, d);
    k.backward_data(dy.view, w.view, dx.view, d);
    check_close(values(dx.view), values(dx_ref.view), tolerance);
    reference_deconv().backward_weights(x.view, dy.view, dw_ref.view, db_ref.data(), d);
    k.backward_weights(x.view, dy.view, dw.view, db.data(), d);
    check_close(values(dw.view), values(dw_ref.view), tolerance);
    check_close(std::vector<double>(db.begin(), db.end()), std::vector<double>(db_ref.begin(), db_ref.end()),
                tolerance);
}

}  // namespace

TEST_CASE("deconv through the reference's convolutions matches the reference deconv on volumes",
          "[resample][reference]") {
    // deconv_over_conv's spans and overlaps, independent of oneDNN's convolutions.
    const Kernels ref = reference_kernels();
    const std::unique_ptr<DeconvKernels> k = deconv_over_conv(*ref.conv, *ref.pool, *ref.eltwise, host_memory());
    const DeTile c = GENERATE(from_range(deconv_volumes()));
    CAPTURE(c.k, c.s, c.p, c.op, c.in, c.first, c.end);
    compare_deconv(*k, c, 13, 1e-5);
}

TEST_CASE("cpu deconv (oneDNN convolutions) matches the reference on volumes", "[resample][cpu]") {
    const DeTile c = GENERATE(from_range(deconv_volumes()));
    CAPTURE(c.k, c.s, c.p, c.op, c.in, c.first, c.end);
    compare_deconv(*cpu_kernels().deconv, c, 11, 1e-5);
}
