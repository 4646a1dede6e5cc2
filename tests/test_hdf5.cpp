// Data from HDF5 data sets (--data NAME=FILE.h5:/path): every tile that any split reads is the whole
// array's region of it (types converted, chunked and compressed sets), several inputs and labels by name,
// --shuffle and --normalize; and training from HDF5 equals training from the same data in .npy files, bitwise,
// on 1, 2 and 4 processes.
#include <dsl/backend/data.hpp>
#include <dsl/backend/npy.hpp>
#include <dsl/backend/trainer.hpp>

#include "hdf5_files.hpp"
#include "support.hpp"
#include "temp_files.hpp"
#include "train_runs.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

using namespace dsl;
using namespace dsl::backend;
using dsl::test::TempDir;
using dsl::test::write_h5;

namespace {

// tests/dist/modern.net's data layers: x [S, 3, 66, 70] (odd sizes), y [S, 33, 35] (3 classes) and z [S]
// (3 classes), as float64 / uint8 / int16 HDF5 data sets and the same values as float32 / int32 .npy files.
struct ModernData {
    static constexpr std::int64_t S = 6, C = 3, H = 66, W = 70, LH = 33, LW = 35;
    std::vector<double> x;
    std::vector<std::uint8_t> y;
    std::vector<std::int16_t> z;
    std::string h5, x_npy, y_npy, z_npy;

    ModernData(const TempDir& dir, bool chunked) {
        x.resize(S * C * H * W);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.0173 * static_cast<double>(i)) * 1.7 + 0.1;
        y.resize(S * LH * LW);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::uint8_t>((i * 7 + i / 35) % 3);
        z = {2, 0, 1, 1, 2, 0};
        h5 = dir / "modern.h5";
        write_h5(h5, "/train/x", {S, C, H, W}, x, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, chunked,
                 {{"mean", {0.1, 0.2, -0.1}}, {"std", {1.5, 2.0, 0.5}}});
        write_h5(h5, "/train/y", {S, LH, LW}, y, H5T_NATIVE_UINT8, H5T_STD_U8LE, chunked);
        write_h5(h5, "/train/z", {S}, z, H5T_NATIVE_INT16, H5T_STD_I16LE, false);
        std::vector<float> xf(x.begin(), x.end());
        std::vector<std::int32_t> yi(y.begin(), y.end()), zi(z.begin(), z.end());
        std::string error;
        x_npy = dir / "x.npy", y_npy = dir / "y.npy", z_npy = dir / "z.npy";
        REQUIRE(write_npy(x_npy, {S, C, H, W}, xf.data(), error));
        REQUIRE(write_npy(y_npy, {S, LH, LW}, yi.data(), error));
        REQUIRE(write_npy(z_npy, {S}, zi.data(), error));
    }
    DataFiles hdf5_files() const {
        return DataFiles{{{"x", h5 + ":/train/x"}, {"y", h5 + ":/train/y"}, {"z", h5 + ":/train/z"}}, false, ""};
    }
    std::string hdf5_flags() const {
        return "--data x=" + h5 + ":/train/x --data y=" + h5 + ":/train/y --data z=" + h5 + ":/train/z";
    }
    std::string npy_flags() const { return "--data x=" + x_npy + " --data y=" + y_npy + " --data z=" + z_npy; }
};

std::string modern_text() { return read(fs::path(source_dir()) / "tests/dist/modern.net"); }

const frontend::Layer& layer(const frontend::Network& net, const std::string& name) {
    return net.layers[static_cast<std::size_t>(net.find(name))];
}

// [begin, end) of part p of `parts` of `size`, grown by `margin` on each side and kept inside [0, size).
std::pair<std::int64_t, std::int64_t> part(std::int64_t size, int parts, int p, std::int64_t margin) {
    return {std::max<std::int64_t>(0, size * p / parts - margin),
            std::min<std::int64_t>(size, size * (p + 1) / parts + margin)};
}

}  // namespace

TEST_CASE("hdf5: every split's tiles, margins included, are the whole array's regions", "[data][hdf5]") {
    TempDir dir;
    for (const bool chunked : {true, false}) {
        INFO("chunked and compressed: " << chunked);
        ModernData d(dir, chunked);
        test::NetworkFromText l(modern_text());
        std::string error;
        auto src = make_data_source(l.net, 0, d.hdf5_files(), error);
        INFO(error);
        REQUIRE(src);
        CHECK(src->samples() == ModernData::S);
        // 1, 2 rows, 2 columns, 2x2, 3x3 (uneven at 66x70), with margins of 0 to 2; samples from 4 on wrap.
        for (const auto& [rows, cols] : {std::pair{1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 3}, {4, 1}})
            for (const std::int64_t margin : {0, 1, 2})
                for (int r = 0; r < rows; ++r)
                    for (int c = 0; c < cols; ++c) {
                        const auto [y0, y1] = part(ModernData::H, rows, r, margin);
                        const auto [x0, x1] = part(ModernData::W, cols, c, margin);
                        const Dims td{3, ModernData::C, {y1 - y0, x1 - x0}};
                        Tensor t(td, Margins{{1, 1}, {1, 1}});
                        src->inputs(layer(l.net, "x"), 4, Index{y0, x0}, t.interior());
                        int wrong = 0;
                        for (std::int64_t n = 0; n < td.n; ++n)
                            for (std::int64_t ch = 0; ch < td.c; ++ch)
                                for (std::int64_t y = 0; y < td.space[0]; ++y)
                                    for (std::int64_t x = 0; x < td.space[1]; ++x) {
                                        const std::int64_t s = (4 + n) % ModernData::S;
                                        const double v = d.x[static_cast<std::size_t>(
                                            ((s * ModernData::C + ch) * ModernData::H + y0 + y) * ModernData::W + x0 +
                                            x)];
                                        wrong += t.at(n, ch, {y, x}) != static_cast<float>(v);
                                    }
                        INFO(rows << "x" << cols << " tile " << r << "," << c << " margin " << margin);
                        CHECK(wrong == 0);
                        // The labels at half the resolution, the same split.
                        const auto [ly0, ly1] = part(ModernData::LH, rows, r, margin);
                        const auto [lx0, lx1] = part(ModernData::LW, cols, c, margin);
                        const Dims ld{3, 1, {ly1 - ly0, lx1 - lx0}};
                        std::vector<std::int32_t> labels(static_cast<std::size_t>(ld.elements()), -1);
                        src->labels(layer(l.net, "y"), 4, Index{ly0, lx0}, dense_view(labels.data(), ld));
                        wrong = 0;
                        for (std::int64_t n = 0; n < ld.n; ++n)
                            for (std::int64_t y = 0; y < ld.space[0]; ++y)
                                for (std::int64_t x = 0; x < ld.space[1]; ++x) {
                                    const std::int64_t s = (4 + n) % ModernData::S;
                                    wrong +=
                                        labels[static_cast<std::size_t>((n * ld.space[0] + y) * ld.space[1] + x)] !=
                                        d.y[static_cast<std::size_t>((s * ModernData::LH + ly0 + y) * ModernData::LW +
                                                                     lx0 + x)];
                                }
                        CHECK(wrong == 0);
                    }
        std::vector<std::int32_t> z(4, -1);
        src->labels(layer(l.net, "z"), 3, Index{}, dense_view(z.data(), Dims{4, 1, {}}));
        CHECK(z == std::vector<std::int32_t>{1, 2, 0, 2});
        fs::remove(d.h5);
    }
}

TEST_CASE("hdf5: float labels (targets) of any shape, as integers or floats, by tile", "[data][hdf5]") {
    TempDir dir;
    test::NetworkFromText l(read(fs::path(source_dir()) / "tests/dist/weighted.net"));
    const std::int64_t S = 3;
    std::vector<float> x(S * 4 * 30 * 22);
    std::iota(x.begin(), x.end(), 0.5f);
    std::vector<std::int32_t> t(S * 2 * 15 * 11);  // integer targets, converted to float
    std::iota(t.begin(), t.end(), -40);
    std::vector<double> v{0.25, 0.5, 0.75, 1.0, 0.0, 0.125, 0.3, 0.6, 0.9};
    std::vector<std::int64_t> y(S * 15 * 11);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 3);
    const std::string f = dir / "w.h5";
    write_h5(f, "x", {S, 4, 30, 22}, x, H5T_NATIVE_FLOAT, H5T_IEEE_F32BE);  // big-endian in the file
    write_h5(f, "t", {S, 2, 15, 11}, t, H5T_NATIVE_INT32, H5T_STD_I32LE);
    write_h5(f, "v", {S, 3}, v, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE);
    write_h5(f, "y", {S, 15, 11}, y, H5T_NATIVE_INT64, H5T_STD_I64LE);
    DataFiles files{{{"x", f + ":/x"}, {"t", f + ":/t"}, {"v", f + ":/v"}, {"y", f + ":/y"}}, false, ""};
    std::string error;
    auto src = make_data_source(l.net, 0, files, error);
    INFO(error);
    REQUIRE(src);
    Tensor tt(Dims{2, 2, {5, 4}});
    src->targets(layer(l.net, "t"), 1, Index{7, 3}, tt.interior());
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 2; ++c)
            for (std::int64_t yy = 0; yy < 5; ++yy)
                for (std::int64_t xx = 0; xx < 4; ++xx)
                    REQUIRE(tt.at(n, c, {yy, xx}) ==
                            static_cast<float>(
                                t[static_cast<std::size_t>((((1 + n) * 2 + c) * 15 + 7 + yy) * 11 + 3 + xx)]));
    Tensor tv(Dims{2, 3, {}});
    src->targets(layer(l.net, "v"), 2, Index{}, tv.interior());  // samples 2 and 0
    CHECK(tv.at(0, 1, {}) == 0.6f);
    CHECK(tv.at(1, 2, {}) == 0.75f);
    Tensor tx(Dims{1, 4, {30, 22}});
    src->inputs(layer(l.net, "x"), 2, Index{0, 0}, tx.interior());
    CHECK(tx.at(0, 3, {29, 21}) == x.back());
}

TEST_CASE("hdf5: --normalize from numbers or from the data set's attributes", "[data][hdf5]") {
    TempDir dir;
    ModernData d(dir, true);
    test::NetworkFromText l(modern_text());
    const std::vector<float> mean{0.1f, 0.2f, -0.1f}, stddev{1.5f, 2.0f, 0.5f};
    for (const std::string how : {"file", "0.1,0.2,-0.1:1.5,2,0.5"}) {
        DataFiles files = d.hdf5_files();
        files.normalize = how;
        std::string error;
        auto src = make_data_source(l.net, 0, files, error);
        INFO(how << ": " << error);
        REQUIRE(src);
        Tensor t(Dims{1, 3, {4, 5}});
        src->inputs(layer(l.net, "x"), 1, Index{10, 20}, t.interior());
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t y = 0; y < 4; ++y)
                for (std::int64_t x = 0; x < 5; ++x) {
                    const float raw =
                        static_cast<float>(d.x[static_cast<std::size_t>(((1 * 3 + c) * 66 + 10 + y) * 70 + 20 + x)]);
                    REQUIRE(t.at(0, c, {y, x}) ==
                            (raw - mean[static_cast<std::size_t>(c)]) / stddev[static_cast<std::size_t>(c)]);
                }
    }
    // One mean and one deviation for every channel.
    DataFiles files = d.hdf5_files();
    files.normalize = "0.5,2";
    std::string error;
    auto src = make_data_source(l.net, 0, files, error);
    REQUIRE(src);
    Tensor t(Dims{1, 3, {1, 1}});
    src->inputs(layer(l.net, "x"), 0, Index{0, 0}, t.interior());
    CHECK(t.at(0, 2, {0, 0}) == (static_cast<float>(d.x[2 * 66 * 70]) - 0.5f) / 2.0f);
    for (const auto& [bad, message] :
         {std::pair{"1,2,3", "give MEAN,STD"}, {"1,2:1", "2 values of the mean, but input 'x' has 3 channels"},
          {"0:0", "must be positive"}, {"a:b", "give MEAN,STD"}}) {
        files.normalize = bad;
        CHECK_FALSE(make_data_source(l.net, 0, files, error));
        CHECK_THAT(error, Catch::Contains(message));
    }
    // Attributes only HDF5 has.
    files = DataFiles{{{"x", d.x_npy}, {"y", d.y_npy}, {"z", d.z_npy}}, false, "file"};
    CHECK_FALSE(make_data_source(l.net, 0, files, error));
    CHECK_THAT(error, Catch::Contains("x.npy: a .npy file has no attribute 'mean'"));
}

TEST_CASE("hdf5: --shuffle orders every epoch anew, as a function of the seed and the epoch", "[data]") {
    const auto a = shuffle_order(10, 3, 0), b = shuffle_order(10, 3, 1), again = shuffle_order(10, 3, 0);
    CHECK(a == again);
    CHECK(a != b);
    CHECK(a != shuffle_order(10, 4, 0));
    for (const auto& order : {a, b}) CHECK(std::set<std::int64_t>(order.begin(), order.end()).size() == 10);
    std::vector<std::int64_t> identity(10);
    std::iota(identity.begin(), identity.end(), 0);
    CHECK(a != identity);

    TempDir dir;
    ModernData d(dir, true);
    test::NetworkFromText l(modern_text());
    DataFiles files = d.hdf5_files();
    files.shuffle = true;
    std::string error;
    auto src = make_data_source(l.net, 5, files, error);
    REQUIRE(src);
    // Index i reads sample order(i / S)[i mod S], whichever tile asks for it.
    std::vector<std::int32_t> z(9, -1);
    src->labels(layer(l.net, "z"), 4, Index{}, dense_view(z.data(), Dims{9, 1, {}}));
    for (std::int64_t i = 4; i < 13; ++i) {
        const auto order = shuffle_order(ModernData::S, 5, i / ModernData::S);
        CHECK(z[static_cast<std::size_t>(i - 4)] == d.z[static_cast<std::size_t>(order[static_cast<std::size_t>(i % ModernData::S)])]);
    }
}

TEST_CASE("hdf5: training from HDF5 equals training from .npy bitwise, on 1, 2 and 4 processes",
          "[distributed][hdf5][mpi]") {
    TempDir dir;
    ModernData d(dir, true);
    for (const std::string sched : {"", "tests/dist/modern_h2.sched", "tests/dist/modern_w2.sched",
                                    "tests/dist/modern_hybrid_4.sched"}) {
        INFO(sched);
        const Run npy = train("tests/dist/modern.net", sched, 4, d.npy_flags());
        const Run h5 = train("tests/dist/modern.net", sched, 4, d.hdf5_flags());
        CHECK(h5.losses == npy.losses);
        check_same_state(h5.checkpoint, npy.checkpoint, 0.0);
    }
}

TEST_CASE("hdf5: --shuffle trains the same on 1 and 4 processes, and differs from the file's order",
          "[distributed][hdf5][mpi]") {
    TempDir dir;
    ModernData d(dir, true);
    // 3 steps of 4 samples out of 6: the second epoch starts in the second step.
    const Run one = train("tests/dist/modern.net", "", 4, d.hdf5_flags() + " --shuffle");
    const Run four = train("tests/dist/modern.net", "tests/dist/modern_hybrid_4.sched", 4, d.hdf5_flags() + " --shuffle");
    const Run plain = train("tests/dist/modern.net", "", 4, d.hdf5_flags());
    REQUIRE(one.losses.size() == 3);
    REQUIRE(four.losses.size() == 3);
    for (std::size_t i = 0; i < one.losses.size(); ++i) CHECK(four.losses[i] == Approx(one.losses[i]).epsilon(1e-5));
    check_same_state(four.checkpoint, one.checkpoint, 1e-4);
    CHECK(plain.losses != one.losses);
}

TEST_CASE("data: several inputs, each from its own file by name, .npy and HDF5 mixed", "[data][hdf5]") {
    TempDir dir;
    test::NetworkFromText l(
        "input a [N, 2, 8, 6]\ninput b [N, 1, 8, 6]\nlabel y [N, 8, 6]\n"
        "cat = concat from a, b\nc = conv(3, kernel = 3, pad = 1)\nloss = pixel_cross_entropy from c, y\n");
    const std::int64_t S = 3;
    std::vector<std::uint16_t> a(S * 2 * 8 * 6);
    std::iota(a.begin(), a.end(), std::uint16_t{100});
    std::vector<float> b(S * 8 * 6);
    std::iota(b.begin(), b.end(), -7.5f);
    std::vector<std::int8_t> y(S * 8 * 6, 2);
    const std::string f = dir / "ab.h5";
    write_h5(f, "/a", {S, 2, 8, 6}, a, H5T_NATIVE_UINT16, H5T_STD_U16LE);
    write_h5(f, "/y", {S, 8, 6}, y, H5T_NATIVE_INT8, H5T_STD_I8LE);
    std::string error;
    REQUIRE(write_npy(dir / "b.npy", {S, 1, 8, 6}, b.data(), error));
    DataFiles files{{{"y", f + ":/y"}, {"b", dir / "b.npy"}, {"a", f + ":/a"}}, false, ""};
    auto src = make_data_source(l.net, 0, files, error);
    INFO(error);
    REQUIRE(src);
    Tensor ta(Dims{2, 2, {3, 4}}), tb(Dims{2, 1, {3, 4}});
    src->inputs(layer(l.net, "a"), 2, Index{4, 1}, ta.interior());  // samples 2 and 0
    src->inputs(layer(l.net, "b"), 2, Index{4, 1}, tb.interior());
    CHECK(ta.at(0, 1, {2, 3}) == static_cast<float>(a[static_cast<std::size_t>(((2 * 2 + 1) * 8 + 6) * 6 + 4)]));
    CHECK(ta.at(1, 0, {0, 0}) == static_cast<float>(a[static_cast<std::size_t>(4 * 6 + 1)]));
    CHECK(tb.at(0, 0, {1, 2}) == b[static_cast<std::size_t>((2 * 8 + 5) * 6 + 3)]);
    // Each input and label is named once; a missing one, or a name that is none of them, says which exist.
    files.files.pop_back();
    CHECK_FALSE(make_data_source(l.net, 0, files, error));
    CHECK_THAT(error, Catch::Contains("input 'a' has no data: give --data a=FILE for each of input 'a', input 'b', "
                                      "label 'y'"));
    files.files.emplace_back("cat", f + ":/a");
    CHECK_FALSE(make_data_source(l.net, 0, files, error));
    CHECK_THAT(error, Catch::Contains("the network has no input or label 'cat'"));
}
