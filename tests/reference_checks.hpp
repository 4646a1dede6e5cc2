// What the reference kernel tests share (test_reference_kernels.cpp on images and vectors,
// test_reference_volumes.cpp on volumes): strided tiles with margins and dense copies of them, central finite
// differences and the comparison of gradients (the step and the tolerance are explained at the top of
// test_reference_kernels.cpp), windows, labels, and the checks of the convolution's and pooling's backwards
// against finite differences of their forwards and of global pooling, on views of any rank.
#pragma once

#include "kernel_layouts.hpp"

#include <dsl/backend/kernels.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace dsl::backend;
using std::int64_t;

constexpr double kStep = 1e-2;
constexpr double kRelative = 1e-2;

inline float uniform(std::mt19937& rng, float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
}

// |v| in [0.1, 1] with a random sign: a finite-difference step never crosses an activation's kink.
inline float off_zero(std::mt19937& rng) {
    const float v = uniform(rng, 0.1f, 1.0f);
    return rng() % 2 ? v : -v;
}

// A view that is not dense: `dims` inside a tensor with margins (an image's or a volume's) and an extra batch
// and channels, filled with random values everywhere, so that a kernel that assumes dense strides reads the
// wrong elements and one that writes outside its view is caught by `changed_outside`.
struct Tile {
    Tensor storage;
    View view;
    std::vector<float> saved;

    Tile(Dims d, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) : storage(around(d), margins(d)) {
        for (int64_t i = 0; i < storage.size(); ++i) storage.data()[i] = uniform(rng, lo, hi);
        view = storage.padded().sub(1, 1, start(d), d);
        REQUIRE_FALSE(view.dense());
    }
    static Dims around(const Dims& d) {
        switch (d.rank()) {
            case 0: return Dims{d.n + 1, d.c + 2, {}};
            case 3: return Dims{d.n + 1, d.c + 2, {d.space[0] + 2, d.space[1] + 1, d.space[2] + 2}};
            default: return Dims{d.n + 1, d.c + 2, {d.space[0] + 1, d.space[1] + 2}};
        }
    }
    static Margins margins(const Dims& d) {
        switch (d.rank()) {
            case 0: return {};
            case 3: return {{1, 2}, {2, 1}, {1, 3}};
            default: return {{2, 1}, {1, 3}};
        }
    }
    static Index start(const Dims& d) {  // of the view, in the padded tile
        switch (d.rank()) {
            case 0: return {};
            case 3: return {2, 1, 2};
            default: return {1, 2};
        }
    }

    template <typename F>
    void fill(F&& value) {
        for_each_element(view.dims, [&](int64_t n, int64_t c, const Index& i) { view.at(n, c, i) = value(); });
    }
    void save() { saved.assign(storage.data(), storage.data() + storage.size()); }

    // How many elements outside the view differ from the last `save`.
    int64_t changed_outside() const {
        std::vector<bool> inside(static_cast<std::size_t>(storage.size()), false);
        for_each_element(view.dims, [&](int64_t n, int64_t c, const Index& i) {
            inside[static_cast<std::size_t>(&view.at(n, c, i) - storage.data())] = true;
        });
        int64_t changed = 0;
        for (std::size_t i = 0; i < inside.size(); ++i)
            if (!inside[i] && storage.data()[i] != saved[i]) ++changed;
        return changed;
    }
};

inline std::vector<double> to_vector(ConstView v) {
    std::vector<double> out;
    for_each_element(v.dims, [&](int64_t n, int64_t c, const Index& i) { out.push_back(v.at(n, c, i)); });
    return out;
}

inline std::vector<double> to_vector(const float* p, int64_t count) { return std::vector<double>(p, p + count); }
inline std::vector<double> to_vector(const double* p, int64_t count) { return std::vector<double>(p, p + count); }

// A dense copy of a view. Finite differences cannot see a stride bug that forward and backward share, so
// each kernel must also give on the strided tiles exactly what it gives on dense copies of them (and the
// hand-computed cases pin down the dense results).
struct Dense {
    std::vector<float> data;
    View view;
    explicit Dense(ConstView v) : data(static_cast<std::size_t>(v.dims.elements())) {
        view = dense_view(data.data(), v.dims);
        for_each_element(v.dims, [&](int64_t n, int64_t c, const Index& i) { view.at(n, c, i) = v.at(n, c, i); });
        REQUIRE(view.dense());
    }
};

inline View vector_view(std::vector<float>& v) {
    return dense_view(v.data(), Dims{1, static_cast<int64_t>(v.size()), {}});
}

inline double dot(ConstView a, ConstView b) {
    double acc = 0.0;
    for_each_element(a.dims,
                     [&](int64_t n, int64_t c, const Index& i) { acc += double(a.at(n, c, i)) * b.at(n, c, i); });
    return acc;
}

// Central differences of `objective` over every element of `v`, in view order. The step actually taken is
// what float rounding leaves of +-kStep; non-finite elements (-infinity padding) have no derivative.
inline std::vector<double> numeric_gradient(View v, const std::function<double()>& objective) {
    std::vector<double> out;
    for_each_element(v.dims, [&](int64_t n, int64_t c, const Index& i) {
        float& e = v.at(n, c, i);
        const float original = e;
        if (!std::isfinite(original)) {
            out.push_back(0.0);
            return;
        }
        e = static_cast<float>(original + kStep);
        const double up = e, loss_up = objective();
        e = static_cast<float>(original - kStep);
        const double down = e, loss_down = objective();
        e = original;
        out.push_back((loss_up - loss_down) / (up - down));
    });
    return out;
}

inline void check_gradient(const char* what, const std::vector<double>& analytic, const std::vector<double>& numeric) {
    REQUIRE(analytic.size() == numeric.size());
    double max_abs = 0.0;
    for (double a : analytic) max_abs = std::max(max_abs, std::abs(a));
    int64_t bad = 0, first_bad = -1;
    for (std::size_t i = 0; i < analytic.size(); ++i) {
        const double tolerance = kRelative * std::max(std::abs(analytic[i]), 0.1 * max_abs) + 1e-5;
        if (std::abs(analytic[i] - numeric[i]) > tolerance) {
            if (first_bad < 0) first_bad = static_cast<int64_t>(i);
            ++bad;
        }
    }
    INFO(what << ": " << bad << " of " << analytic.size() << " elements off; first at " << first_bad
              << (first_bad >= 0 ? ": analytic " + std::to_string(analytic[first_bad]) + ", numeric " +
                                       std::to_string(numeric[first_bad])
                                 : std::string()));
    CHECK(bad == 0);
    // A vanishing gradient passes any comparison; the random cases must exercise the kernel.
    CHECK(max_abs > 1e-3);
}

inline Window make_window(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
    Window w;
    w.kernel = {kh, kw};
    w.stride = {sh, sw};
    w.dilation = {dh, dw};
    return w;
}

// A convolution of x {N, C, extents} into y {N, F, extents} by w {F, C, kernel}: backward_data and
// backward_weights against finite differences of the forward, strided tiles against dense copies, writes
// confined to the views, and the bias.
inline void check_conv_transposes(const Dims& xd, const Dims& wd, const Dims& yd, const Window& win) {
    std::mt19937 rng(1234);
    Tile x(xd, rng), w(wd, rng), y(yd, rng), r(yd, rng), dx(xd, rng), dw(wd, rng);
    std::vector<float> bias(static_cast<std::size_t>(yd.c));
    for (float& b : bias) b = uniform(rng, -1, 1);
    ConvKernels& conv = *reference_kernels().conv;

    auto objective = [&] {
        conv.forward(x.view, w.view, bias.data(), y.view, win);
        return dot(y.view, r.view);
    };
    y.save();
    objective();
    CHECK(y.changed_outside() == 0);

    // dx and dw hold random values before: the backward must overwrite, not accumulate.
    dx.save();
    conv.backward_data(r.view, w.view, dx.view, win);
    CHECK(dx.changed_outside() == 0);
    std::vector<float> db(bias.size() + 2, 7.0f);  // guards on either side
    dw.save();
    conv.backward_weights(x.view, r.view, dw.view, db.data() + 1, win);
    CHECK(dw.changed_outside() == 0);
    CHECK(db.front() == 7.0f);
    CHECK(db.back() == 7.0f);

    {
        Dense xs(x.view), ws(w.view), rs(r.view), ys(y.view), dxs(dx.view), dws(dw.view);
        conv.forward(xs.view, ws.view, bias.data(), ys.view, win);
        conv.backward_data(rs.view, ws.view, dxs.view, win);
        conv.backward_weights(xs.view, rs.view, dws.view, nullptr, win);
        CHECK(to_vector(ys.view) == to_vector(y.view));
        CHECK(to_vector(dxs.view) == to_vector(dx.view));
        CHECK(to_vector(dws.view) == to_vector(dw.view));
    }

    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
    check_gradient("dw", to_vector(dw.view), numeric_gradient(w.view, objective));
    check_gradient("db", to_vector(db.data() + 1, yd.c), numeric_gradient(vector_view(bias), objective));

    // Without bias: the same outputs less the bias, and the same dw. (The last finite difference left y at
    // a perturbed bias, so run the forward again first.)
    objective();
    const std::vector<double> with_bias = to_vector(y.view);
    conv.forward(x.view, w.view, nullptr, y.view, win);
    const std::vector<double> without_bias = to_vector(y.view);
    const int64_t per_map = yd.points();
    for (std::size_t i = 0; i < with_bias.size(); ++i)
        CHECK(without_bias[i] + bias[(i / per_map) % yd.c] == Approx(with_bias[i]).margin(1e-5));
    const std::vector<double> dw_before = to_vector(dw.view);
    conv.backward_weights(x.view, r.view, dw.view, nullptr, win);
    CHECK(to_vector(dw.view) == dw_before);
}
// Pooling of x into y by `win`: the backward against finite differences of the forward (of distinct inputs,
// so that a small step never moves a maximum), strided tiles against dense copies, writes confined to the
// views.
inline void check_pool_transposes(PoolKind kind, const Dims& xd, const Dims& yd, const Window& win) {
    std::mt19937 rng(42);
    Tile x(xd, rng), y(yd, rng), r(yd, rng), dx(xd, rng);
    // Distinct values 0.05 apart: a step of 1e-2 never changes which element is a window's maximum.
    std::vector<float> distinct(static_cast<std::size_t>(xd.elements()));
    for (std::size_t i = 0; i < distinct.size(); ++i) distinct[i] = 0.05f * (float(i) - float(distinct.size()) / 2);
    std::shuffle(distinct.begin(), distinct.end(), rng);
    std::size_t next = 0;
    x.fill([&] { return distinct[next++]; });
    PoolKernels& pool = *reference_kernels().pool;

    auto objective = [&] {
        pool.forward(kind, x.view, y.view, win);
        return dot(y.view, r.view);
    };
    y.save();
    objective();
    CHECK(y.changed_outside() == 0);
    dx.save();
    pool.backward(kind, x.view, r.view, dx.view, win);
    CHECK(dx.changed_outside() == 0);
    {
        Dense xs(x.view), rs(r.view), ys(y.view), dxs(dx.view);
        pool.forward(kind, xs.view, ys.view, win);
        pool.backward(kind, xs.view, rs.view, dxs.view, win);
        CHECK(to_vector(ys.view) == to_vector(y.view));
        CHECK(to_vector(dxs.view) == to_vector(dx.view));
    }
    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
}

// Global average pooling of a tile of `d` (two samples of three channels) by global_sum and broadcast:
// global_sum adds into what the sums hold, two tiles cut along spatial dimension `axis` at `cut` give the whole,
// and broadcast is the transpose of the mean, against finite differences.
inline void check_global_pooling(const Dims& d, int axis, int64_t cut, std::mt19937& rng) {
    Tile x(d, rng), dx(d, rng);
    std::vector<float> r(6);
    for (float& v : r) v = uniform(rng, -1, 1);
    PoolKernels& pool = *reference_kernels().pool;
    const double points = double(d.points());

    std::vector<double> sums(6, 0.5), split(6, 0.0);
    pool.global_sum(x.view, sums.data());
    Index origin = Index::filled(d.space.rank(), 0), first = d.space, rest = d.space;
    first[axis] = cut;
    rest[axis] -= cut;
    Index second = origin;
    second[axis] = cut;
    pool.global_sum(x.view.sub(0, 0, origin, {2, 3, first}), split.data());
    pool.global_sum(x.view.sub(0, 0, second, {2, 3, rest}), split.data());
    for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 3; ++c) {
            double s = 0.0;
            for_each_element(Dims{1, 1, d.space}, [&](int64_t, int64_t, const Index& i) { s += x.view.at(n, c, i); });
            CHECK(sums[n * 3 + c] - 0.5 == Approx(s).margin(1e-9));
            CHECK(split[n * 3 + c] == Approx(s).margin(1e-9));
        }

    auto objective = [&] {
        std::vector<double> s(6, 0.0);
        pool.global_sum(x.view, s.data());
        double loss = 0.0;
        for (std::size_t i = 0; i < s.size(); ++i) loss += float(s[i] / points) * double(r[i]);
        return loss;
    };
    dx.save();
    pool.broadcast(r.data(), static_cast<float>(1.0 / points), dx.view);
    CHECK(dx.changed_outside() == 0);
    Index last = d.space;
    for (int k = 0; k < last.rank(); ++k) last[k] -= 1;
    CHECK(dx.view.at(1, 2, last) == Approx(r[5] / float(points)));
    check_gradient("dx", to_vector(dx.view), numeric_gradient(x.view, objective));
}

inline LabelView label_view(const std::vector<std::int32_t>& labels, Dims d) { return dense_view(labels.data(), d); }

}  // namespace
