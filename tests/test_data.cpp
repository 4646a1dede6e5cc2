// The data: synthetic data (pure in its coordinates, so a tile equals its region) and the data sources of a
// network, synthetic or from .npy files.
#include <dsl/backend/data.hpp>
#include <dsl/backend/npy.hpp>
#include <dsl/backend/trainer.hpp>

#include "support.hpp"
#include "temp_files.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace dsl;
using namespace dsl::backend;
using dsl::test::TempDir;

namespace {

using Loaded = test::NetworkFromText;

SyntheticData pixel_spec(std::uint64_t seed) {
    SyntheticData d;
    d.seed = seed;
    d.channels = 3;
    d.height = 32;
    d.width = 24;
    d.classes = 3;
    d.label_h = 8;  // 4 input pixels per label pixel
    d.label_w = 6;
    d.block = 2;
    return d;
}

SyntheticData voxel_spec(std::uint64_t seed) {
    SyntheticData d = pixel_spec(seed);
    d.channels = 2;
    d.depth = 8;
    d.height = 6;
    d.width = 10;
    d.label_d = 4;  // 2 input voxels per label voxel along each dimension
    d.label_h = 3;
    d.label_w = 5;
    return d;
}

SyntheticData sample_spec(std::uint64_t seed, std::int64_t classes, std::int64_t channels) {
    SyntheticData d;
    d.seed = seed;
    d.channels = channels;
    d.height = 12;
    d.width = 10;
    d.classes = classes;
    return d;
}

}  // namespace

TEST_CASE("data: the same arguments give the same values: seeds differ", "[data]") {
    const SyntheticData a = pixel_spec(5), b = pixel_spec(5), c = pixel_spec(6);
    int differ = 0, total = 0;
    for (std::int64_t s = 0; s < 4; ++s)
        for (std::int64_t ch = 0; ch < 3; ++ch)
            for (std::int64_t y = 0; y < 32; y += 3)
                for (std::int64_t x = 0; x < 24; x += 5) {
                    REQUIRE(a.input(s, ch, y, x) == b.input(s, ch, y, x));
                    differ += a.input(s, ch, y, x) != c.input(s, ch, y, x);
                    ++total;
                    const float v = a.input(s, ch, y, x);
                    CHECK(std::isfinite(v));
                    CHECK(std::abs(v) <= 1.0f + 3.0f);  // noise, field and the strongest mark
                }
    CHECK(differ > total * 9 / 10);
    int labels_differ = 0;
    for (std::int64_t s = 0; s < 100; ++s)
        labels_differ += sample_spec(1, 4, 4).label(s) != sample_spec(2, 4, 4).label(s);
    CHECK(labels_differ > 50);
}

TEST_CASE("data: a tile equals the same region of the whole tensor", "[data]") {
    const SyntheticData d = pixel_spec(11);
    Tensor whole(Dims{3, 3, {32, 24}});
    d.fill_inputs(5, 0, Index{0, 0}, whole.interior());
    for (std::int64_t n = 0; n < 3; ++n)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t y = 0; y < 32; ++y)
                for (std::int64_t x = 0; x < 24; ++x) REQUIRE(whole.at(n, c, {y, x}) == d.input(5 + n, c, y, x));

    // Tiles at several offsets, into the interior of tensors with margins.
    struct Cut {
        std::int64_t n0, c0, y0, x0;
        Dims dims;
    };
    for (const Cut& cut : {Cut{0, 0, 0, 0, Dims{3, 3, {16, 12}}}, Cut{1, 1, 7, 5, Dims{2, 2, {13, 17}}},
                           Cut{2, 2, 31, 23, Dims{1, 1, {1, 1}}}, Cut{0, 0, 16, 0, Dims{3, 3, {16, 24}}}}) {
        Tensor t(cut.dims, Margins{{1, 2}, {3, 1}});
        t.fill(99.0f);
        d.fill_inputs(5 + cut.n0, cut.c0, Index{cut.y0, cut.x0}, t.interior());
        for (std::int64_t n = 0; n < cut.dims.n; ++n)
            for (std::int64_t c = 0; c < cut.dims.c; ++c)
                for (std::int64_t y = 0; y < cut.dims.space[0]; ++y)
                    for (std::int64_t x = 0; x < cut.dims.space[1]; ++x)
                        REQUIRE(t.at(n, c, {y, x}) == whole.at(cut.n0 + n, cut.c0 + c, {cut.y0 + y, cut.x0 + x}));
        CHECK(t.at(0, 0, {-1, 0}) == 99.0f);
    }

    // Labels likewise, on the label grid.
    std::vector<std::int32_t> all(3 * 8 * 6), part(2 * 3 * 4);
    d.fill_labels(5, Index{0, 0}, dense_view(all.data(), Dims{3, 1, {8, 6}}));
    d.fill_labels(6, Index{4, 2}, dense_view(part.data(), Dims{2, 1, {3, 4}}));
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t y = 0; y < 3; ++y)
            for (std::int64_t x = 0; x < 4; ++x)
                REQUIRE(part[static_cast<std::size_t>(n * 12 + y * 4 + x)] ==
                        all[static_cast<std::size_t>((1 + n) * 48 + (4 + y) * 6 + 2 + x)]);
    // Squares of `block` label pixels share a class.
    for (std::int64_t y = 0; y < 8; ++y)
        for (std::int64_t x = 0; x < 6; ++x) CHECK(d.label(7, y, x) == d.label(7, y / 2 * 2, x / 2 * 2));
}

TEST_CASE("data: a volume's tile equals the formula, and the same region of the whole volume", "[data]") {
    const SyntheticData d = voxel_spec(13);
    Tensor whole(Dims{2, 2, {8, 6, 10}});
    d.fill_inputs(3, 0, Index{0, 0, 0}, whole.interior());
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 2; ++c)
            for (std::int64_t z = 0; z < 8; ++z)
                for (std::int64_t y = 0; y < 6; ++y)
                    for (std::int64_t x = 0; x < 10; ++x)
                        REQUIRE(whole.at(n, c, {z, y, x}) == d.input(3 + n, c, z, y, x));

    // One sample and channel, three depths from the second, into the interior of a tensor with margins.
    Tensor t(Dims{1, 1, {3, 4, 7}}, Margins{{1, 0}, {0, 2}, {3, 1}});
    t.fill(99.0f);
    d.fill_inputs(4, 1, Index{1, 2, 3}, t.interior());
    for (std::int64_t z = 0; z < 3; ++z)
        for (std::int64_t y = 0; y < 4; ++y)
            for (std::int64_t x = 0; x < 7; ++x)
                REQUIRE(t.at(0, 0, {z, y, x}) == whole.at(1, 1, {1 + z, 2 + y, 3 + x}));
    CHECK(t.at(0, 0, {-1, 0, 0}) == 99.0f);
}

TEST_CASE("data: labels are in range and every class occurs", "[data]") {
    for (std::int64_t classes : {2, 3, 10}) {
        const SyntheticData d = sample_spec(3, classes, 4);
        std::map<std::int32_t, int> count;
        std::vector<std::int32_t> labels(400);
        d.fill_labels(1000, Index{}, dense_view(labels.data(), Dims{400, 1, {}}));
        for (std::int64_t s = 0; s < 400; ++s) {
            const std::int32_t k = labels[static_cast<std::size_t>(s)];
            REQUIRE(k == d.label(1000 + s));
            REQUIRE(k >= 0);
            REQUIRE(k < classes);
            ++count[k];
        }
        CHECK(static_cast<std::int64_t>(count.size()) == classes);
        for (const auto& [k, n] : count) CHECK(n > 400 / classes / 3);  // roughly balanced
    }
    const SyntheticData p = pixel_spec(4);
    std::map<std::int32_t, int> count;
    for (std::int64_t s = 0; s < 10; ++s)
        for (std::int64_t y = 0; y < 8; ++y)
            for (std::int64_t x = 0; x < 6; ++x) {
                const std::int32_t k = p.label(s, y, x);
                REQUIRE((k >= 0 && k < 3));
                ++count[k];
            }
    CHECK(count.size() == 3);
}

TEST_CASE("data: the inputs carry the labels, so the data can be learned", "[data]") {
    // Per sample: the channel with the largest mean (among classes <= channels) names the class.
    const SyntheticData d = sample_spec(9, 4, 4);
    int right = 0;
    const int samples = 200;
    for (std::int64_t s = 0; s < samples; ++s) {
        Tensor t(Dims{1, 4, {12, 10}});
        d.fill_inputs(s, 0, Index{0, 0}, t.interior());
        int best = 0;
        double best_mean = -1e9;
        for (int c = 0; c < 4; ++c) {
            double sum = 0;
            for (std::int64_t y = 0; y < 12; ++y)
                for (std::int64_t x = 0; x < 10; ++x) sum += t.at(0, c, {y, x});
            if (sum / 120 > best_mean) best_mean = sum / 120, best = c;
        }
        right += best == d.label(s);
    }
    CHECK(right >= samples * 95 / 100);

    // More classes than channels: classes sharing a channel differ in strength.
    const SyntheticData two = sample_spec(9, 4, 2);
    int sorted = 0;
    for (std::int64_t s = 0; s < samples; ++s) {
        const std::int32_t k = two.label(s);
        double sum = 0;
        for (std::int64_t y = 0; y < 12; ++y)
            for (std::int64_t x = 0; x < 10; ++x) sum += two.input(s, k % 2, y, x);
        const double mean = sum / 120;
        sorted += (k / 2 == 0) ? (mean > 0.5 && mean < 1.5) : (mean > 1.5);
    }
    CHECK(sorted >= samples * 9 / 10);

    // Per pixel: the mean over each label pixel's input cell names its class.
    const SyntheticData p = pixel_spec(9);
    int cells = 0, cells_right = 0;
    for (std::int64_t s = 0; s < 10; ++s)
        for (std::int64_t ly = 0; ly < 8; ++ly)
            for (std::int64_t lx = 0; lx < 6; ++lx) {
                int best = 0;
                double best_sum = -1e9;
                for (int c = 0; c < 3; ++c) {
                    double sum = 0;
                    for (std::int64_t y = ly * 4; y < ly * 4 + 4; ++y)
                        for (std::int64_t x = lx * 4; x < lx * 4 + 4; ++x) sum += p.input(s, c, y, x);
                    if (sum > best_sum) best_sum = sum, best = c;
                }
                ++cells;
                cells_right += best == p.label(s, ly, lx);
            }
    CHECK(cells_right >= cells * 9 / 10);
}

namespace {

const char* pixel_net = R"(input x [N, 3, 16, 16]
label y [N, 4, 4]
c1 = conv(8, kernel = 3, stride = 2, pad = 1)
c2 = conv(3, kernel = 3, stride = 2, pad = 1) from c1
loss = pixel_cross_entropy from c2, y
)";

const char* sample_net = R"(input x [N, 2, 4, 4]
label y [N]
f = fc(3)
loss = softmax_cross_entropy from f, y
)";

}  // namespace

TEST_CASE("data: the synthetic data of a network and its data source", "[data]") {
    Loaded l(pixel_net);
    const SyntheticData d = synthetic_for(l.net, 42);
    CHECK(d.channels == 3);
    CHECK(d.height == 16);
    CHECK(d.width == 16);
    CHECK(d.classes == 3);
    CHECK(d.label_h == 4);
    CHECK(d.label_w == 4);
    CHECK(d.block == 2);  // 4 input pixels per label pixel: squares of 8 input pixels

    std::string error;
    auto src = make_data_source(l.net, 42, "", "", error);
    REQUIRE(src);
    const auto& x = l.net.layers[static_cast<std::size_t>(l.net.find("x"))];
    const auto& y = l.net.layers[static_cast<std::size_t>(l.net.find("y"))];
    Tensor t(Dims{2, 3, {5, 6}});
    src->inputs(x, 7, Index{3, 4}, t.interior());
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t r = 0; r < 5; ++r)
                for (std::int64_t q = 0; q < 6; ++q) REQUIRE(t.at(n, c, {r, q}) == d.input(7 + n, c, 3 + r, 4 + q));
    std::vector<std::int32_t> lab(2 * 4 * 4);
    src->labels(y, 7, Index{0, 0}, dense_view(lab.data(), Dims{2, 1, {4, 4}}));
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t r = 0; r < 4; ++r)
            for (std::int64_t q = 0; q < 4; ++q)
                CHECK(lab[static_cast<std::size_t>(n * 16 + r * 4 + q)] == d.label(7 + n, r, q));

    Loaded s(sample_net);
    const SyntheticData e = synthetic_for(s.net, 1);
    CHECK(e.classes == 3);
    CHECK_FALSE(e.per_pixel());
}

TEST_CASE("data: samples and labels from .npy files, checked against the network", "[data][npy]") {
    TempDir dir;
    Loaded l(sample_net);
    std::string error;
    const std::int64_t S = 5;
    std::vector<float> xs(S * 2 * 4 * 4);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
    std::vector<std::int32_t> ys{0, 2, 1, 1, 2};
    REQUIRE(write_npy(dir / "x.npy", {S, 2, 4, 4}, xs.data(), error));
    REQUIRE(write_npy(dir / "y.npy", {S}, ys.data(), error));

    auto src = make_data_source(l.net, 0, dir / "x.npy", dir / "y.npy", error);
    INFO(error);
    REQUIRE(src);
    const auto& x = l.net.layers[static_cast<std::size_t>(l.net.find("x"))];
    const auto& y = l.net.layers[static_cast<std::size_t>(l.net.find("y"))];
    // Samples 3, 4, 0, 1: the index wraps around S.
    Tensor t(Dims{4, 2, {4, 4}});
    src->inputs(x, 3, Index{0, 0}, t.interior());
    for (std::int64_t n = 0; n < 4; ++n)
        CHECK(t.at(n, 1, {2, 3}) == xs[static_cast<std::size_t>(((n + 3) % S) * 32 + 16 + 11)]);
    std::vector<std::int32_t> lab(4);
    src->labels(y, 3, Index{}, dense_view(lab.data(), Dims{4, 1, {}}));
    CHECK(lab == std::vector<std::int32_t>{1, 2, 0, 2});

    CHECK_FALSE(make_data_source(l.net, 0, "", dir / "y.npy", error));
    CHECK_THAT(error, Catch::Contains("--labels needs --inputs"));
    CHECK_FALSE(make_data_source(l.net, 0, dir / "x.npy", "", error));
    CHECK_THAT(error, Catch::Contains("--inputs needs --labels"));

    REQUIRE(write_npy(dir / "x3.npy", {S, 3, 4, 4}, xs.data(), error));
    CHECK_FALSE(make_data_source(l.net, 0, dir / "x3.npy", dir / "y.npy", error));
    CHECK_THAT(error, Catch::Contains("[5, 3, 4, 4]"));

    REQUIRE(write_npy(dir / "y4.npy", {4}, ys.data(), error));
    CHECK_FALSE(make_data_source(l.net, 0, dir / "x.npy", dir / "y4.npy", error));
    CHECK_THAT(error, Catch::Contains("expected [5]"));

    std::vector<std::int32_t> bad{0, 1, 3, 0, 0};
    REQUIRE(write_npy(dir / "bad.npy", {S}, bad.data(), error));
    CHECK_FALSE(make_data_source(l.net, 0, dir / "x.npy", dir / "bad.npy", error));
    CHECK_THAT(error, Catch::Contains("label 3 of sample 2 is outside [0, 3)"));

    CHECK_FALSE(make_data_source(l.net, 0, dir / "x.npy", dir / "x.npy", error));
}

namespace {

// A float64 .npy (format 1.0), which write_npy does not write.
void write_f8(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<double>& v) {
    std::string dims;
    for (std::int64_t d : shape) dims += std::to_string(d) + ", ";
    std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + dims + "), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    out.write("\x93NUMPY\x01\x00", 8);
    const auto len = static_cast<std::uint16_t>(header.size());
    out.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
    out << header;
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
}

}  // namespace

TEST_CASE("data: float labels from .npy files (float32 and float64), per pixel and per vector", "[data][npy]") {
    TempDir dir;
    Loaded l(R"(input x [N, 2, 4, 6]
label t [N, 3, 4, 6] float
p = conv(3, kernel = 3, pad = 1)
loss = mse from p, t
)");
    std::string error;
    const std::int64_t S = 3;
    std::vector<float> xs(S * 2 * 4 * 6, 0.5f), ts(S * 3 * 4 * 6);
    for (std::size_t i = 0; i < ts.size(); ++i) ts[i] = 0.25f * static_cast<float>(i);
    REQUIRE(write_npy(dir / "x.npy", {S, 2, 4, 6}, xs.data(), error));
    REQUIRE(write_npy(dir / "t.npy", {S, 3, 4, 6}, ts.data(), error));
    auto src = make_data_source(l.net, 0, dir / "x.npy", dir / "t.npy", error);
    INFO(error);
    REQUIRE(src);
    const auto& t = l.net.layers[static_cast<std::size_t>(l.net.find("t"))];
    CHECK(t.float_label);
    // A tile of samples 2, 0 (wrapping), rows 1..2, columns 3..5, every channel.
    Tensor tile(Dims{2, 3, {2, 3}});
    src->targets(t, 2, Index{1, 3}, tile.interior());
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t r = 0; r < 2; ++r)
                for (std::int64_t q = 0; q < 3; ++q)
                    CHECK(tile.at(n, c, {r, q}) ==
                          ts[static_cast<std::size_t>((((n + 2) % S * 3 + c) * 4 + 1 + r) * 6 + 3 + q)]);
    // float64 gives the same values; an integer file is refused for a float label; the shape is checked.
    std::vector<double> td(ts.begin(), ts.end());
    write_f8(dir / "t8.npy", {S, 3, 4, 6}, td);
    auto src8 = make_data_source(l.net, 0, dir / "x.npy", dir / "t8.npy", error);
    INFO(error);
    REQUIRE(src8);
    Tensor tile8(Dims{2, 3, {2, 3}});
    src8->targets(t, 2, Index{1, 3}, tile8.interior());
    for (std::int64_t i = 0; i < tile8.size(); ++i) CHECK(tile8.data()[i] == tile.data()[i]);
    std::vector<std::int32_t> ints(S * 3 * 4 * 6, 1);
    REQUIRE(write_npy(dir / "ti.npy", {S, 3, 4, 6}, ints.data(), error));
    CHECK_FALSE(make_data_source(l.net, 0, dir / "x.npy", dir / "ti.npy", error));
    CHECK_THAT(error, Catch::Contains("label 't' is float: its file must have a float dtype, not '<i4'"));
    REQUIRE(write_npy(dir / "tw.npy", {S, 3, 4, 5}, ts.data(), error));
    CHECK_FALSE(make_data_source(l.net, 0, dir / "x.npy", dir / "tw.npy", error));
    CHECK_THAT(error, Catch::Contains("expected [3, 3, 4, 6]"));

    // A vector head's label [N, K]: a file [S, K].
    Loaded v(R"(input x [N, 2, 4, 6]
label t [N, 4] float
g = global_avgpool
f = fc(4)
loss = bce_with_logits from f, t
)");
    std::vector<float> tv(S * 4);
    for (std::size_t i = 0; i < tv.size(); ++i) tv[i] = 0.1f * static_cast<float>(i);
    REQUIRE(write_npy(dir / "tv.npy", {S, 4}, tv.data(), error));
    auto srcv = make_data_source(v.net, 0, dir / "x.npy", dir / "tv.npy", error);
    INFO(error);
    REQUIRE(srcv);
    Tensor tilev(Dims{2, 4, {}});
    srcv->targets(v.net.layers[static_cast<std::size_t>(v.net.find("t"))], 1, Index{}, tilev.interior());
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t k = 0; k < 4; ++k) CHECK(tilev.at(n, k, {}) == tv[static_cast<std::size_t>((n + 1) * 4 + k)]);
}

TEST_CASE("data: synthetic float targets are a function of the inputs, the same in any tile", "[data]") {
    Loaded l(R"(input x [N, 3, 12, 10]
label t [N, 2, 6, 5] float
p = conv(2, kernel = 2, stride = 2)
loss = mse from p, t
)");
    std::string error;
    auto src = make_data_source(l.net, 9, "", "", error);
    REQUIRE(src);
    const auto& t = l.net.layers[static_cast<std::size_t>(l.net.find("t"))];
    SyntheticData d = synthetic_for(l.net, 9);
    d.target_c = 2, d.target_h = 6, d.target_w = 5;
    Tensor whole(Dims{3, 2, {6, 5}}), part(Dims{2, 2, {3, 2}});
    src->targets(t, 4, Index{0, 0}, whole.interior());
    src->targets(t, 5, Index{2, 3}, part.interior());
    double lo = 1.0, hi = 0.0;
    for (std::int64_t n = 0; n < 3; ++n)
        for (std::int64_t c = 0; c < 2; ++c)
            for (std::int64_t r = 0; r < 6; ++r)
                for (std::int64_t q = 0; q < 5; ++q) {
                    const float v = whole.at(n, c, {r, q});
                    lo = std::min(lo, double(v)), hi = std::max(hi, double(v));
                    CHECK(v == d.target(4 + n, c, r, q));
                    CHECK(v > 0.0f);
                    CHECK(v < 1.0f);
                    if (n >= 1 && r >= 2 && r < 5 && q >= 3) CHECK(part.at(n - 1, c, {r - 2, q - 3}) == v);
                }
    CHECK(hi - lo > 0.1);  // not a constant: something to learn
    // Targets as fine as the inputs (read as they lie), and four times coarser (an input row for each target
    // row alone), in a tile away from the origin: target() of each.
    for (const std::int64_t scale : {1, 4}) {
        CAPTURE(scale);
        SyntheticData e = d;
        e.height = 16, e.width = 12, e.target_h = 16 / scale, e.target_w = 12 / scale;
        const Dims tile{2, 2, {e.target_h - 1, e.target_w - 1}};
        Tensor got(tile);
        e.fill_targets(3, Index{1, 1}, got.interior());
        for (std::int64_t n = 0; n < tile.n; ++n)
            for (std::int64_t c = 0; c < tile.c; ++c)
                for (std::int64_t r = 0; r < tile.space[0]; ++r)
                    for (std::int64_t q = 0; q < tile.space[1]; ++q)
                        CHECK(got.at(n, c, {r, q}) == e.target(3 + n, c, r + 1, q + 1));
    }
}

TEST_CASE("data: a network learns the synthetic data (the loss falls)", "[data][trainer]") {
    // Per-sample classes found by a convolution and global pooling, and per-pixel classes.
    const char* classify = R"(input x [N, 4, 8, 8]
label y [N]
c = conv(8, kernel = 3, pad = 1)
r = relu
p = global_avgpool
f = fc(4)
loss = softmax_cross_entropy from f, y
)";
    for (const char* text : {classify, pixel_net}) {
        Loaded l(text);
        TrainConfig cfg;
        cfg.batch = 8;
        cfg.lr = 0.05;
        cfg.momentum = 0.9;
        cfg.seed = 3;
        Trainer trainer(l.net, reference_kernels(), cfg, test::one_process(l.net, cfg.batch));
        std::string error;
        auto data = make_data_source(l.net, 17, "", "", error);
        REQUIRE(data);
        std::vector<double> losses;
        for (std::int64_t step = 0; step < 60; ++step) losses.push_back(trainer.step(*data, step * cfg.batch));
        const double first = (losses[0] + losses[1] + losses[2] + losses[3] + losses[4]) / 5;
        double last = 0;
        for (std::size_t i = losses.size() - 5; i < losses.size(); ++i) last += losses[i] / 5;
        INFO("first steps " << first << ", last steps " << last);
        CHECK(std::isfinite(last));
        CHECK(last < 0.5 * first);
        // And on samples it has not seen.
        CHECK(trainer.evaluate(*data, 100000) < 0.6 * first);
    }
}
