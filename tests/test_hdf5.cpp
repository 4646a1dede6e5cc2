// Data from HDF5 data sets (--data NAME=FILE.h5:/path): every tile that any split reads, of an image or a
// volume, is the whole array's region of it (types converted, chunked and compressed sets; .npy files alike);
// a volume file of the wrong shape is refused; several inputs and labels by name, --shuffle and --normalize;
// and training from HDF5 equals training from the same data in .npy files, bitwise, on 1, 2 and 4 processes
// (images) and on 1 and 8 (a volume, whose 2x2x2 grid trains as one process).
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
#include <functional>
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

// tests/dist/vol.net's data layers: x [S, 3, 17, 15, 13] (odd extents) and y [S, 9, 8, 7] (3 classes), as a
// float64 and a uint8 HDF5 data set and the same values as float32 / int32 .npy files.
struct VolumeData {
    static constexpr std::int64_t S = 5, C = 3, D = 17, H = 15, W = 13, LD = 9, LH = 8, LW = 7;
    std::vector<double> x;
    std::vector<std::uint8_t> y;
    std::string h5, x_npy, y_npy;

    VolumeData(const TempDir& dir, bool chunked) {
        x.resize(S * C * D * H * W);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.0131 * static_cast<double>(i)) * 1.3 - 0.2;
        y.resize(S * LD * LH * LW);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::uint8_t>((i * 5 + i / 7 + i / 56) % 3);
        h5 = dir / "vol.h5";
        write_h5(h5, "/x", {S, C, D, H, W}, x, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, chunked);
        write_h5(h5, "/y", {S, LD, LH, LW}, y, H5T_NATIVE_UINT8, H5T_STD_U8LE, chunked);
        std::vector<float> xf(x.begin(), x.end());
        std::vector<std::int32_t> yi(y.begin(), y.end());
        std::string error;
        x_npy = dir / "vx.npy", y_npy = dir / "vy.npy";
        REQUIRE(write_npy(x_npy, {S, C, D, H, W}, xf.data(), error));
        REQUIRE(write_npy(y_npy, {S, LD, LH, LW}, yi.data(), error));
    }
    DataFiles hdf5_files() const { return DataFiles{{{"x", h5 + ":/x"}, {"y", h5 + ":/y"}}, false, ""}; }
    DataFiles npy_files() const { return DataFiles{{{"x", x_npy}, {"y", y_npy}}, false, ""}; }
    std::string hdf5_flags() const { return "--data x=" + h5 + ":/x --data y=" + h5 + ":/y"; }
    std::string npy_flags() const { return "--data x=" + x_npy + " --data y=" + y_npy; }
};

std::string modern_text() { return read(fs::path(source_dir()) / "tests/dist/modern.net"); }
std::string volume_text() { return read(fs::path(source_dir()) / "tests/dist/vol.net"); }

const frontend::Layer& layer(const frontend::Network& net, const std::string& name) {
    return net.layers[static_cast<std::size_t>(net.find(name))];
}

// [begin, end) of part p of `parts` of `size`, grown by `margin` on each side and kept inside [0, size).
std::pair<std::int64_t, std::int64_t> part(std::int64_t size, int parts, int p, std::int64_t margin) {
    return {std::max<std::int64_t>(0, size * p / parts - margin),
            std::min<std::int64_t>(size, size * (p + 1) / parts + margin)};
}

// A whole array in C order, [S, C, spatial...] (C = 1 for class labels [S, spatial...]).
template <typename T>
struct Whole {
    const std::vector<T>& values;
    std::int64_t samples, channels;
    Index extents;
};

// How many elements of `tile` (samples from `first` on, wrapping around S; the block at `at`) differ from
// the same places of `whole`, converted to the tile's type.
template <typename T, typename W>
int differences(const BasicView<T>& tile, const Whole<W>& whole, std::int64_t first, const Index& at) {
    int wrong = 0;
    for_each_row(tile, [&](std::int64_t n, std::int64_t c, const Index& i, T* row) {
        std::int64_t o = ((first + n) % whole.samples) * whole.channels + c;
        for (int d = 0; d < i.rank(); ++d) o = o * whole.extents[d] + at[d] + i[d];
        for (std::int64_t x = 0; x < row_length(tile.dims); ++x)
            wrong += row[x] != static_cast<T>(whole.values[static_cast<std::size_t>(o + x)]);
    });
    return wrong;
}

// Every tile of every split (parts along each spatial dimension), grown by margins of 0 to 2 and kept inside
// the array, read by `src` as the inputs `x` (into a tile with margins of its own) and the labels `y` (the same
// part of their extents) of samples 4, 5, 6 (wrapping): each must be the whole arrays' region.
template <typename X, typename Y>
void check_every_tile(DataSource& src, const frontend::Layer& x, const Whole<X>& wx, const frontend::Layer& y,
                      const Whole<Y>& wy, const std::vector<std::vector<int>>& splits) {
    const std::int64_t first = 4, n = 3;
    const int rank = wx.extents.rank();
    for (const auto& parts : splits)
        for (const std::int64_t margin : {0, 1, 2})
            for (int tile = 0, tiles = std::accumulate(parts.begin(), parts.end(), 1, std::multiplies<>());
                 tile < tiles; ++tile) {
                // Tile `tile` in C order of the grid: its place and extents in both arrays.
                Index at = Index::filled(rank, 0), extents = at, lat = at, lextents = at;
                std::string place, grid;
                for (int d = rank - 1, rest = tile; d >= 0; --d) {
                    const int parts_d = parts[static_cast<std::size_t>(d)], p = rest % parts_d;
                    rest /= parts_d;
                    const auto [b, e] = part(wx.extents[d], parts_d, p, margin);
                    const auto [lb, le] = part(wy.extents[d], parts_d, p, margin);
                    at[d] = b, extents[d] = e - b, lat[d] = lb, lextents[d] = le - lb;
                    place = std::to_string(p) + (place.empty() ? "" : ", ") + place;
                    grid = std::to_string(parts_d) + (grid.empty() ? "" : "x") + grid;
                }
                INFO("tile (" << place << ") of " << grid << ", margin " << margin);
                Tensor t(Dims{n, wx.channels, extents}, Margins::filled(rank, {1, 1}));
                src.inputs(x, first, at, t.interior());
                CHECK(differences(t.interior(), wx, first, at) == 0);
                const Dims ld{n, 1, lextents};
                std::vector<std::int32_t> labels(static_cast<std::size_t>(ld.elements()), -1);
                src.labels(y, first, lat, dense_view(labels.data(), ld));
                CHECK(differences(dense_view(labels.data(), ld), wy, first, lat) == 0);
            }
}

}  // namespace

TEST_CASE("hdf5: every split's tiles, margins included, are the whole array's regions", "[data][hdf5][npy]") {
    TempDir dir;
    for (const bool chunked : {true, false}) {
        INFO("chunked and compressed: " << chunked);
        ModernData d(dir, chunked);
        test::NetworkFromText l(modern_text());
        const DataFiles npy{{{"x", d.x_npy}, {"y", d.y_npy}, {"z", d.z_npy}}, false, ""};
        for (const DataFiles& files : {d.hdf5_files(), npy}) {
            INFO(files.files[0].second);
            std::string error;
            auto src = make_data_source(l.net, 0, files, error);
            INFO(error);
            REQUIRE(src);
            CHECK(src->samples() == ModernData::S);
            // 1, 2 rows, 2 columns, 2x2, 3x3 (uneven at 66x70), 4 rows; the labels at half the resolution.
            check_every_tile(*src, layer(l.net, "x"),
                             Whole<double>{d.x, ModernData::S, ModernData::C, {ModernData::H, ModernData::W}},
                             layer(l.net, "y"),
                             Whole<std::uint8_t>{d.y, ModernData::S, 1, {ModernData::LH, ModernData::LW}},
                             {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 3}, {4, 1}});
            std::vector<std::int32_t> z(4, -1);
            src->labels(layer(l.net, "z"), 3, Index{}, dense_view(z.data(), Dims{4, 1, {}}));
            CHECK(z == std::vector<std::int32_t>{1, 2, 0, 2});
        }
        fs::remove(d.h5);
    }
}

TEST_CASE("hdf5: every split's 3-D tiles of a volume, margins included, are the whole array's regions",
          "[data][hdf5][npy]") {
    TempDir dir;
    for (const bool chunked : {true, false}) {
        INFO("chunked and compressed: " << chunked);
        VolumeData d(dir, chunked);
        test::NetworkFromText l(volume_text());
        for (const DataFiles& files : {d.hdf5_files(), d.npy_files()}) {
            INFO(files.files[0].second);
            std::string error;
            auto src = make_data_source(l.net, 0, files, error);
            INFO(error);
            REQUIRE(src);
            CHECK(src->samples() == VolumeData::S);
            // Whole; slabs of depth; a 2x2 grid of rows and columns; a 2x2x2 grid; 3x1x2 and 3x4x5 (uneven at
            // 17x15x13); the labels at about half the resolution (9x8x7), the same split.
            using V = VolumeData;
            check_every_tile(*src, layer(l.net, "x"), Whole<double>{d.x, V::S, V::C, {V::D, V::H, V::W}},
                             layer(l.net, "y"), Whole<std::uint8_t>{d.y, V::S, 1, {V::LD, V::LH, V::LW}},
                             {{1, 1, 1}, {2, 1, 1}, {1, 2, 2}, {2, 2, 2}, {3, 1, 2}, {3, 4, 5}});
        }
        fs::remove(d.h5);
    }
}

TEST_CASE("data: a volume file of the wrong shape is refused, naming the shape expected", "[data][hdf5][npy]") {
    TempDir dir;
    VolumeData d(dir, false);
    test::NetworkFromText vol(volume_text()), image(modern_text());
    const std::int64_t S = VolumeData::S;
    // Each wrong array both as an HDF5 data set and as a .npy file.
    auto both = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
        const std::vector<float> zeros(static_cast<std::size_t>(
            std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>())));
        write_h5(d.h5, "/" + name, shape, zeros, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
        std::string error;
        REQUIRE(write_npy(dir / (name + ".npy"), shape, zeros.data(), error));
        return std::pair{d.h5 + ":/" + name, dir / (name + ".npy")};
    };
    struct Case {
        std::string layer, name;
        std::vector<std::int64_t> shape;
        std::string message;
    };
    const std::vector<Case> cases{
        // An image for a volume input, a volume one plane short, a volume with its dimensions in another order.
        {"x",
         "image",
         {S, 3, 15, 13},
         "holds [5, 3, 15, 13], but input 'x' is [N, 3, 17, 15, 13]: expected "
         "[S, 3, 17, 15, 13] with S > 0"},
        {"x", "shallow", {S, 3, 16, 15, 13}, "holds [5, 3, 16, 15, 13], but input 'x' is [N, 3, 17, 15, 13]"},
        {"x", "transposed", {S, 3, 13, 15, 17}, "expected [S, 3, 17, 15, 13] with S > 0"},
        {"x", "channels_last", {S, 17, 15, 13, 3}, "expected [S, 3, 17, 15, 13] with S > 0"},
        // An image's labels for a volume's, labels with a channel, labels one plane short.
        {"y", "image_labels", {S, 8, 7}, "holds [5, 8, 7], but label 'y' is [N, 9, 8, 7] and "},
        {"y", "channel_labels", {S, 1, 9, 8, 7}, "expected [5, 9, 8, 7]"},
        {"y", "shallow_labels", {S, 8, 8, 7}, "expected [5, 9, 8, 7]"},
    };
    for (const Case& c : cases) {
        const auto [h5, npy] = both(c.name, c.shape);
        for (const std::string& spec : {h5, npy}) {
            DataFiles files = d.npy_files();
            (c.layer == "x" ? files.files[0] : files.files[1]).second = spec;
            std::string error;
            INFO(spec);
            CHECK_FALSE(make_data_source(vol.net, 0, files, error));
            CHECK_THAT(error, Catch::StartsWith(spec + ": ") && Catch::Contains(c.message));
        }
    }
    // A volume for an image input.
    const auto [h5, npy] = both("volume", {S, 3, 1, 66, 70});
    for (const std::string& spec : {h5, npy}) {
        std::string error;
        const DataFiles files{{{"x", spec}, {"y", spec}, {"z", spec}}, false, ""};
        CHECK_FALSE(make_data_source(image.net, 0, files, error));
        CHECK_THAT(error, Catch::Contains(spec + ": holds [5, 3, 1, 66, 70], but input 'x' is [N, 3, 66, 70]: "
                                                 "expected [S, 3, 66, 70] with S > 0"));
    }
}

TEST_CASE("hdf5: volumes train from HDF5 as from .npy bitwise, and in a 2x2x2 grid as on one process",
          "[distributed][hdf5][mpi]") {
    TempDir dir;
    VolumeData d(dir, true);
    // 3 steps of 2 samples out of 5: the second epoch starts in the third step.
    const Run npy = train("tests/dist/vol.net", "", 2, d.npy_flags());
    const Run h5 = train("tests/dist/vol.net", "", 2, d.hdf5_flags());
    CHECK(h5.losses == npy.losses);
    check_same_state(h5.checkpoint, npy.checkpoint, 0.0);
    // 8 processes, each reading the hyperslab of its tile with its halo.
    const Run grid = train("tests/dist/vol.net", "tests/dist/vol_dhw8.sched", 2, d.hdf5_flags());
    REQUIRE(grid.losses.size() == 3);
    for (std::size_t i = 0; i < npy.losses.size(); ++i) CHECK(grid.losses[i] == Approx(npy.losses[i]).epsilon(1e-4));
    check_same_state(grid.checkpoint, npy.checkpoint, 1e-4);
    CHECK(npy.losses.back() != npy.losses.front());  // it trained
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
