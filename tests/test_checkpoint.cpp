// .npy files (round trips, hand-written headers, errors, tiles), checkpoint folders (round trip, atomic
// replacement, refusals) and the synthetic data (pure in its coordinates, so a tile equals its region).
#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/npy.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>

#include "support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

using namespace dsl;
using namespace dsl::backend;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system's temporary directory, removed with everything in it at the end.
struct TempDir {
    fs::path path;
    TempDir() {
        static std::atomic<int> counter{0};
        const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        path = fs::temp_directory_path() /
               ("dsl-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(now));
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A .npy file as NumPy would lay it out, with the dict given verbatim (no padding unless the dict has it).
std::string npy_bytes(int major, const std::string& dict, const std::string& data) {
    std::string out = "\x93NUMPY";
    out += static_cast<char>(major);
    out += '\0';
    const auto len = static_cast<std::uint32_t>(dict.size());
    for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
    return out + dict + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::optional<NpyFile> open_ok(const std::string& path) {
    std::string error;
    auto f = NpyFile::open(path, error);
    INFO(error);
    REQUIRE(f);
    return f;
}

std::string open_error(const std::string& path) {
    std::string error;
    auto f = NpyFile::open(path, error);
    CHECK_FALSE(f);
    return error;
}

using Loaded = test::NetworkFromText;

}  // namespace

// ---------------------------------------------------------------------------------------------------- npy

TEST_CASE("npy: float arrays round-trip with a 64-byte aligned header", "[npy]") {
    TempDir dir;
    const std::vector<std::int64_t> shape{2, 3, 4, 5};
    std::vector<float> v(120);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 3.25f;
    std::string error;
    REQUIRE(write_npy(dir / "a.npy", shape, v.data(), error));

    const std::string bytes = read_bytes(dir / "a.npy");
    REQUIRE(bytes.size() > 10);
    CHECK(bytes.substr(0, 6) == "\x93NUMPY");
    CHECK(bytes[6] == 1);
    const std::size_t len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    CHECK((10 + len) % 64 == 0);
    CHECK(bytes[10 + len - 1] == '\n');
    CHECK(bytes.substr(10, len).find("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, 5), }") !=
          std::string::npos);
    CHECK(bytes.size() == 10 + len + 120 * 4);

    auto f = open_ok(dir / "a.npy");
    CHECK(f->dtype() == NpyType::f4);
    CHECK(f->shape() == shape);
    CHECK(f->elements() == 120);
    CHECK(f->header().data_offset % 64 == 0);
    for (std::int64_t i = 0; i < 120; ++i) REQUIRE(f->at(i) == v[static_cast<std::size_t>(i)]);
}

TEST_CASE("npy: int32 arrays round-trip; one-dimensional and empty shapes", "[npy]") {
    TempDir dir;
    const std::vector<std::int32_t> v{0, -1, 7, 2147483647, -2147483647 - 1, 42, 3};
    std::string error;
    REQUIRE(write_npy(dir / "i.npy", {7}, v.data(), error));
    CHECK(read_bytes(dir / "i.npy").find("'shape': (7,)") != std::string::npos);
    auto f = open_ok(dir / "i.npy");
    CHECK(f->dtype() == NpyType::i4);
    CHECK(f->shape() == std::vector<std::int64_t>{7});
    for (std::int64_t i = 0; i < 7; ++i) CHECK(f->integer_at(i) == v[static_cast<std::size_t>(i)]);

    REQUIRE(write_npy(dir / "e.npy", {0, 3}, static_cast<const float*>(nullptr), error));
    auto e = open_ok(dir / "e.npy");
    CHECK(e->shape() == std::vector<std::int64_t>{0, 3});
    CHECK(e->elements() == 0);

    const float scalar = 2.5f;
    REQUIRE(write_npy(dir / "s.npy", {}, &scalar, error));
    CHECK(read_bytes(dir / "s.npy").find("'shape': ()") != std::string::npos);
    auto s = open_ok(dir / "s.npy");
    CHECK(s->shape().empty());
    CHECK(s->at(0) == 2.5);
}

TEST_CASE("npy: hand-written headers of versions 1, 2 and 3", "[npy]") {
    TempDir dir;
    // Version 1, f8, no padding at all (so the data is not aligned), spaces in odd places.
    const std::vector<double> d{1.5, -2.0, 3.25, 4.0, 5.5, -6.75};
    write_bytes(dir / "v1.npy", npy_bytes(1, "{'descr':'<f8','fortran_order':False,'shape':( 2 , 3 )}\n", raw(d)));
    auto a = open_ok(dir / "v1.npy");
    CHECK(a->header().major_version == 1);
    CHECK(a->dtype() == NpyType::f8);
    CHECK(a->shape() == std::vector<std::int64_t>{2, 3});
    for (std::int64_t i = 0; i < 6; ++i) CHECK(a->at(i) == d[static_cast<std::size_t>(i)]);

    // Version 2, i8, double quotes, keys in another order, a Python 2 long.
    const std::vector<std::int64_t> l{10, -20, 30, 1LL << 40};
    const std::string dict2 = "{\"shape\": (4L,), \"fortran_order\": False, \"descr\": \"<i8\"}        \n";
    write_bytes(dir / "v2.npy", npy_bytes(2, dict2, raw(l)));
    auto b = open_ok(dir / "v2.npy");
    CHECK(b->header().major_version == 2);
    CHECK(b->header().data_offset == static_cast<std::int64_t>(12 + dict2.size()));
    CHECK(b->dtype() == NpyType::i8);
    CHECK(b->shape() == std::vector<std::int64_t>{4});
    for (std::int64_t i = 0; i < 4; ++i) CHECK(b->integer_at(i) == l[static_cast<std::size_t>(i)]);

    // Version 3 (utf-8 header), u1 with the '|' byte order.
    write_bytes(dir / "v3.npy", npy_bytes(3, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }\n",
                                          std::string("\x01\xff\x07", 3)));
    auto c = open_ok(dir / "v3.npy");
    CHECK(c->dtype() == NpyType::u1);
    CHECK(c->integer_at(0) == 1);
    CHECK(c->integer_at(1) == 255);
    CHECK(c->integer_at(2) == 7);

    // The parser alone, on bytes in memory.
    const std::string hdr = npy_bytes(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (5, 1), }\n", "");
    std::string error;
    auto h = parse_npy_header(reinterpret_cast<const unsigned char*>(hdr.data()), static_cast<std::int64_t>(hdr.size()),
                              "m.npy", error);
    REQUIRE(h);
    CHECK(h->dtype == NpyType::i4);
    CHECK(h->elements() == 5);
    CHECK(h->data_offset == static_cast<std::int64_t>(hdr.size()));
}

TEST_CASE("npy: errors are messages, not crashes", "[npy]") {
    TempDir dir;
    const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }\n";

    write_bytes(dir / "trunc.npy", npy_bytes(1, ok_dict, std::string(40, '\0')));
    CHECK(open_error(dir / "trunc.npy") ==
          dir / "trunc.npy" + ": file is truncated: header says 1000 elements, data holds 10");

    write_bytes(dir / "x.npy", "PK\x03\x04 this is a zip file, not an array");
    CHECK(open_error(dir / "x.npy") == dir / "x.npy" + ": not a .npy file");

    write_bytes(dir / "empty.npy", "");
    CHECK(open_error(dir / "empty.npy") == dir / "empty.npy" + ": not a .npy file");

    write_bytes(dir / "fortran.npy",
                npy_bytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }\n", std::string(16, '\0')));
    CHECK_THAT(open_error(dir / "fortran.npy"), Catch::Contains("fortran_order is True"));

    write_bytes(dir / "big.npy",
                npy_bytes(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", std::string(8, '\0')));
    CHECK_THAT(open_error(dir / "big.npy"), Catch::Contains("unsupported dtype '>f4'"));

    write_bytes(dir / "c8.npy",
                npy_bytes(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }\n", std::string(16, '\0')));
    CHECK_THAT(open_error(dir / "c8.npy"), Catch::Contains("unsupported dtype '<c8'"));

    write_bytes(dir / "struct.npy",
                npy_bytes(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", ""));
    CHECK_THAT(open_error(dir / "struct.npy"), Catch::Contains("bad .npy header"));

    write_bytes(dir / "noshape.npy", npy_bytes(1, "{'descr': '<f4', 'fortran_order': False}\n", ""));
    CHECK_THAT(open_error(dir / "noshape.npy"), Catch::Contains("no 'shape'"));

    write_bytes(dir / "neg.npy", npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}\n", ""));
    CHECK_THAT(open_error(dir / "neg.npy"), Catch::Contains("bad .npy header"));

    // The header length points past the end of the file.
    std::string cut = npy_bytes(1, ok_dict, "");
    cut.resize(30);
    write_bytes(dir / "cut.npy", cut);
    CHECK_THAT(open_error(dir / "cut.npy"), Catch::Contains("truncated"));

    write_bytes(dir / "v9.npy", npy_bytes(1, ok_dict, "").replace(6, 1, "\x09"));
    CHECK_THAT(open_error(dir / "v9.npy"), Catch::Contains("version 9"));

    CHECK_THAT(open_error(dir / "missing.npy"), Catch::Contains("cannot open"));
    CHECK_THAT(open_error(dir.path.string()), Catch::Contains("not a regular file"));
}

TEST_CASE("npy: a tile of samples is copied out with offsets, converted to float", "[npy]") {
    TempDir dir;
    const std::int64_t S = 3, C = 2, H = 5, W = 6;
    auto value = [](std::int64_t s, std::int64_t c, std::int64_t y, std::int64_t x) {
        return static_cast<float>(s * 1000 + c * 100 + y * 10 + x);
    };
    std::vector<float> all;
    for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t y = 0; y < H; ++y)
                for (std::int64_t x = 0; x < W; ++x) all.push_back(value(s, c, y, x));
    std::string error;
    REQUIRE(write_npy(dir / "x.npy", {S, C, H, W}, all.data(), error));
    auto f = open_ok(dir / "x.npy");

    // Into the interior of a tile with margins, so the view is strided; the margins stay as they were.
    Tensor t(Dims{2, 1, 3, 2}, Margins{1, 1, 2, 2});
    t.fill(-7.0f);
    REQUIRE(copy_sample_tile(*f, 1, 1, 2, 3, t.interior(), error));
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t y = 0; y < 3; ++y)
            for (std::int64_t x = 0; x < 2; ++x) CHECK(t.at(n, 0, y, x) == value(1 + n, 1, 2 + y, 3 + x));
    CHECK(t.at(0, 0, -1, 0) == -7.0f);
    CHECK(t.at(1, 0, 3, 1) == -7.0f);
    CHECK(t.padded().at(0, 0, 1, 0) == -7.0f);
    CHECK(t.padded().at(0, 0, 1, 5) == -7.0f);

    // The whole array, and a region that reaches past the end.
    Tensor whole(Dims{S, C, H, W});
    REQUIRE(copy_sample_tile(*f, 0, 0, 0, 0, whole.interior(), error));
    CHECK(std::equal(all.begin(), all.end(), whole.data()));
    Tensor past(Dims{1, 1, 3, 2});
    CHECK_FALSE(copy_sample_tile(*f, 0, 0, 3, 0, past.interior(), error));
    CHECK_THAT(error, Catch::Contains("outside the array [3, 2, 5, 6]"));
    CHECK_FALSE(copy_sample_tile(*f, 3, 0, 0, 0, past.interior(), error));
    CHECK_FALSE(copy_sample_tile(*f, -1, 0, 0, 0, past.interior(), error));

    // Bytes and doubles are converted.
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>(i * 30);
    write_bytes(dir / "u8.npy",
                npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1, 2, 2), }\n", bytes));
    auto u = open_ok(dir / "u8.npy");
    Tensor ut(Dims{1, 1, 2, 1});
    REQUIRE(copy_sample_tile(*u, 1, 0, 0, 1, ut.interior(), error));
    CHECK(ut.at(0, 0, 0, 0) == 150.0f);
    CHECK(ut.at(0, 0, 1, 0) == 210.0f);

    const std::vector<double> d{0.25, 1e10, -3.5, 4};
    write_bytes(dir / "f8.npy",
                npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 4)}\n", raw(d)));
    auto g = open_ok(dir / "f8.npy");
    Tensor gt(Dims{1, 1, 1, 3});
    REQUIRE(copy_sample_tile(*g, 0, 0, 0, 1, gt.interior(), error));
    CHECK(gt.at(0, 0, 0, 0) == 1e10f);
    CHECK(gt.at(0, 0, 0, 1) == -3.5f);
    CHECK(gt.at(0, 0, 0, 2) == 4.0f);

    // Not 4-D.
    REQUIRE(write_npy(dir / "v.npy", {4}, all.data(), error));
    auto one = open_ok(dir / "v.npy");
    CHECK_FALSE(copy_sample_tile(*one, 0, 0, 0, 0, gt.interior(), error));
    CHECK_THAT(error, Catch::Contains("[S, C, H, W]"));
}

TEST_CASE("npy: labels [S] and [S, H, W] of integer types into int32", "[npy]") {
    TempDir dir;
    std::string error;
    const std::vector<std::int64_t> per_sample{3, 1, 4, 1, 5};
    write_bytes(dir / "l.npy",
                npy_bytes(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }\n", raw(per_sample)));
    auto l = open_ok(dir / "l.npy");
    std::vector<std::int32_t> out(3, -1);
    REQUIRE(copy_label_tile(*l, 2, 0, 0, BasicView<std::int32_t>{out.data(), Dims{3, 1, 1, 1}, 1, 1, 1}, error));
    CHECK(out == std::vector<std::int32_t>{4, 1, 5});
    CHECK_FALSE(copy_label_tile(*l, 3, 0, 0, BasicView<std::int32_t>{out.data(), Dims{3, 1, 1, 1}, 1, 1, 1}, error));

    // [2, 3, 4] bytes: value = s * 12 + y * 4 + x.
    std::string px;
    for (int i = 0; i < 24; ++i) px += static_cast<char>(i);
    write_bytes(dir / "p.npy", npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4), }\n", px));
    auto p = open_ok(dir / "p.npy");
    std::vector<std::int32_t> tile(2 * 2 * 3, -1);
    const BasicView<std::int32_t> tv{tile.data(), Dims{2, 1, 2, 3}, 6, 6, 3};
    REQUIRE(copy_label_tile(*p, 0, 1, 1, tv, error));
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t y = 0; y < 2; ++y)
            for (std::int64_t x = 0; x < 3; ++x) CHECK(tv.at(n, 0, y, x) == n * 12 + (1 + y) * 4 + (1 + x));
    CHECK_FALSE(copy_label_tile(*p, 0, 2, 0, tv, error));

    // Floats are not labels; values beyond int32 are refused.
    const float fl[2] = {0, 1};
    REQUIRE(write_npy(dir / "f.npy", {2}, fl, error));
    CHECK_FALSE(copy_label_tile(*open_ok(dir / "f.npy"), 0, 0, 0,
                                BasicView<std::int32_t>{out.data(), Dims{1, 1, 1, 1}, 1, 1, 1}, error));
    CHECK_THAT(error, Catch::Contains("integer dtype"));
    const std::vector<std::int64_t> huge{1LL << 33};
    write_bytes(dir / "h.npy", npy_bytes(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }\n", raw(huge)));
    CHECK_FALSE(copy_label_tile(*open_ok(dir / "h.npy"), 0, 0, 0,
                                BasicView<std::int32_t>{out.data(), Dims{1, 1, 1, 1}, 1, 1, 1}, error));
    CHECK_THAT(error, Catch::Contains("does not fit in int32"));
}

// ---------------------------------------------------------------------------------------------- checkpoint

namespace {

std::vector<CheckpointTensor> sample_tensors(float base) {
    std::vector<CheckpointTensor> ts{
        {"layer1.0.conv1.weight", {4, 3, 3, 3}, {}},
        {"bn1.running_mean", {4}, {}},
        {"conv1.weight.momentum", {4, 3, 3, 3}, {}},
        {"fc.bias", {10}, {}},
    };
    float v = base;
    for (auto& t : ts) {
        std::int64_t n = 1;
        for (auto d : t.shape) n *= d;
        for (std::int64_t i = 0; i < n; ++i) t.data.push_back(v += 0.125f);
    }
    return ts;
}

std::vector<std::string> siblings(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("checkpoint: save and load round-trip tensors and meta", "[checkpoint]") {
    TempDir dir;
    const auto ts = sample_tensors(1.0f);
    const nlohmann::json meta{{"step", 12}, {"seed", 7}, {"network", "samples/mesh_tiny.net"}};
    std::string error;
    REQUIRE(save_checkpoint(dir / "ckpt", ts, meta, error));
    CHECK(is_checkpoint(dir / "ckpt"));
    CHECK(siblings(dir.path) == std::vector<std::string>{"ckpt"});  // no temporary folder left

    const auto manifest = nlohmann::json::parse(read_bytes(dir / "ckpt/manifest.json"));
    CHECK(manifest["format"] == "dsl-checkpoint");
    CHECK(manifest["version"] == 1);
    CHECK(manifest["meta"] == meta);
    REQUIRE(manifest["tensors"].size() == 4);
    CHECK(manifest["tensors"][0]["name"] == "layer1.0.conv1.weight");
    CHECK(manifest["tensors"][0]["file"] == "layer1.0.conv1.weight.npy");
    CHECK(manifest["tensors"][0]["shape"] == nlohmann::json::array({4, 3, 3, 3}));
    CHECK(manifest["tensors"][0]["dtype"] == "float32");
    CHECK(fs::is_regular_file(dir.path / "ckpt" / "bn1.running_mean.npy"));

    auto loaded = load_checkpoint(dir / "ckpt", error);
    INFO(error);
    REQUIRE(loaded);
    CHECK(loaded->meta == meta);
    REQUIRE(loaded->tensors.size() == ts.size());
    for (std::size_t i = 0; i < ts.size(); ++i) {
        CHECK(loaded->tensors[i].name == ts[i].name);
        CHECK(loaded->tensors[i].shape == ts[i].shape);
        CHECK(loaded->tensors[i].data == ts[i].data);
    }
    REQUIRE(loaded->find("fc.bias"));
    CHECK(loaded->find("fc.bias")->data.back() == ts[3].data.back());
    CHECK(loaded->find("nope") == nullptr);

    // A trailing slash names the same folder.
    REQUIRE(save_checkpoint(dir / "ckpt/", ts, meta, error));
    CHECK(siblings(dir.path) == std::vector<std::string>{"ckpt"});
}

TEST_CASE("checkpoint: saving over a checkpoint replaces it whole", "[checkpoint]") {
    TempDir dir;
    std::string error;
    REQUIRE(save_checkpoint(dir / "ckpt", sample_tensors(1.0f), {{"step", 1}}, error));
    std::vector<CheckpointTensor> second{{"only.weight", {2, 2}, {1, 2, 3, 4}}};
    REQUIRE(save_checkpoint(dir / "ckpt", second, {{"step", 2}}, error));
    CHECK(siblings(dir.path) == std::vector<std::string>{"ckpt"});
    CHECK(siblings(dir.path / "ckpt") == std::vector<std::string>{"manifest.json", "only.weight.npy"});
    auto loaded = load_checkpoint(dir / "ckpt", error);
    REQUIRE(loaded);
    CHECK(loaded->meta["step"] == 2);
    REQUIRE(loaded->tensors.size() == 1);
    CHECK(loaded->tensors[0].data == std::vector<float>{1, 2, 3, 4});

    // An empty folder may be filled.
    fs::create_directory(dir.path / "empty");
    REQUIRE(save_checkpoint(dir / "empty", second, {}, error));
    CHECK(is_checkpoint(dir / "empty"));
}

TEST_CASE("checkpoint: what is not a checkpoint is never overwritten", "[checkpoint]") {
    TempDir dir;
    std::string error;
    const auto ts = sample_tensors(0.0f);

    fs::create_directory(dir.path / "mine");
    write_bytes(dir / "mine/notes.txt", "my notes");
    CHECK_FALSE(save_checkpoint(dir / "mine", ts, {}, error));
    CHECK_THAT(error, Catch::Contains("not a dsl checkpoint"));
    CHECK(siblings(dir.path / "mine") == std::vector<std::string>{"notes.txt"});
    CHECK(read_bytes(dir / "mine/notes.txt") == "my notes");

    write_bytes(dir / "file", "a file of the user's");
    CHECK_FALSE(save_checkpoint(dir / "file", ts, {}, error));
    CHECK_THAT(error, Catch::Contains("not a folder"));
    CHECK(read_bytes(dir / "file") == "a file of the user's");

    // A checkpoint into which the user put a file of their own.
    REQUIRE(save_checkpoint(dir / "ckpt", ts, {}, error));
    write_bytes(dir / "ckpt/README", "results of run 3");
    CHECK_FALSE(save_checkpoint(dir / "ckpt", ts, {}, error));
    CHECK_THAT(error, Catch::Contains("README"));
    CHECK(read_bytes(dir / "ckpt/README") == "results of run 3");

    // A manifest of another program.
    fs::create_directory(dir.path / "other");
    write_bytes(dir / "other/manifest.json", R"({"format": "something-else"})");
    CHECK_FALSE(save_checkpoint(dir / "other", ts, {}, error));
    CHECK(read_bytes(dir / "other/manifest.json") == R"({"format": "something-else"})");

    // Nothing was left behind by the refusals.
    CHECK(siblings(dir.path) == std::vector<std::string>{"ckpt", "file", "mine", "other"});

    // Names that would leave the folder are refused.
    std::vector<CheckpointTensor> evil{{"../evil", {1}, {1.0f}}};
    CHECK_FALSE(save_checkpoint(dir / "x", evil, {}, error));
    CHECK_FALSE(fs::exists(dir.path / "evil.npy"));
    std::vector<CheckpointTensor> twice{{"a", {1}, {1.0f}}, {"a", {1}, {2.0f}}};
    CHECK_FALSE(save_checkpoint(dir / "x", twice, {}, error));
    std::vector<CheckpointTensor> wrong_size{{"a", {2, 2}, {1.0f}}};
    CHECK_FALSE(save_checkpoint(dir / "x", wrong_size, {}, error));
    CHECK_FALSE(fs::exists(dir.path / "x"));
}

namespace {

// What a save killed while writing leaves: its temporary folder, marked with the process's number first.
void killed_save(const fs::path& folder, const std::string& pid) {
    fs::create_directory(folder);
    write_bytes((folder / ".dsl-partial").string(), "a dsl checkpoint being written by process " + pid + "\n");
    write_bytes((folder / "half.npy").string(), "\x93NUMPY partial");
}

}  // namespace

TEST_CASE("checkpoint: temporary folders of a killed run do not break a later save", "[checkpoint]") {
    TempDir dir;
    std::string error;
    // One of this process (a run killed with the same pid), one of a process that no longer exists, and the
    // old checkpoint a killed save had moved aside.
    const std::string pid = std::to_string(::getpid());
    killed_save(dir.path / (".ckpt.tmp-" + pid), pid);
    killed_save(dir.path / ".ckpt.tmp-999999999", "999999999");
    killed_save(dir.path / ".ckpt.old-999999999", "999999999");
    REQUIRE(save_checkpoint(dir / "ckpt", sample_tensors(2.0f), {{"step", 3}}, error));
    CHECK(siblings(dir.path) == std::vector<std::string>{"ckpt"});
    auto loaded = load_checkpoint(dir / "ckpt", error);
    REQUIRE(loaded);
    CHECK(loaded->tensors.size() == 4);
    CHECK(siblings(dir.path / "ckpt").size() == 5);  // no mark left in the checkpoint
}

TEST_CASE("checkpoint: a folder named like a temporary one is removed only if dsl marked it", "[checkpoint]") {
    TempDir dir;
    std::string error;
    // The user's folders: no mark, another process's mark, dsl's mark but a file of the user's in it, and a
    // link to a folder of the user's.
    fs::create_directory(dir.path / ".ckpt.tmp-999999");
    write_bytes(dir / ".ckpt.tmp-999999/mine.txt", "mine");
    fs::create_directory(dir.path / ".ckpt.old-999999998");
    write_bytes(dir / ".ckpt.old-999999998/w.npy", "mine too");
    killed_save(dir.path / ".ckpt.tmp-999999997", "999999996");
    killed_save(dir.path / ".ckpt.tmp-999999995", "999999995");
    write_bytes(dir / ".ckpt.tmp-999999995/notes.txt", "mine as well");
    killed_save(dir.path / "target", "999999994");
    fs::create_directory_symlink(dir.path / "target", dir.path / ".ckpt.old-999999994");
    REQUIRE(save_checkpoint(dir / "ckpt", sample_tensors(2.0f), {{"step", 3}}, error));
    CHECK(siblings(dir.path) == std::vector<std::string>{".ckpt.old-999999994", ".ckpt.old-999999998",
                                                         ".ckpt.tmp-999999", ".ckpt.tmp-999999995",
                                                         ".ckpt.tmp-999999997", "ckpt", "target"});
    CHECK(read_bytes(dir / ".ckpt.tmp-999999/mine.txt") == "mine");
    CHECK(read_bytes(dir / ".ckpt.old-999999998/w.npy") == "mine too");
    CHECK(read_bytes(dir / ".ckpt.tmp-999999995/notes.txt") == "mine as well");
    CHECK(siblings(dir.path / "target").size() == 2);

    // A folder of this process's name that is not its own is in the way: the save says so before it starts.
    const fs::path mine = dir.path / (".ckpt.tmp-" + std::to_string(::getpid()));
    fs::create_directory(mine);
    write_bytes((mine / "mine.txt").string(), "mine");
    CHECK_FALSE(can_save_checkpoint(dir / "ckpt", error));
    CHECK_THAT(error, Catch::Contains("in the way"));
    CHECK_FALSE(save_checkpoint(dir / "ckpt", sample_tensors(3.0f), {{"step", 4}}, error));
    CHECK(read_bytes((mine / "mine.txt").string()) == "mine");
    CHECK(load_checkpoint(dir / "ckpt", error)->meta["step"] == 3);
}

TEST_CASE("checkpoint: a folder is replaced only if it passes the test of a load", "[checkpoint]") {
    TempDir dir;
    std::string error;
    const auto ts = sample_tensors(0.0f);
    const std::string manifest =
        R"({"format": "dsl-checkpoint", "version": 1, "tensors": [{"name": "x", "file": "FILE", "shape": [SHAPE]}]})";
    auto forged = [&](const std::string& name, const std::string& file, const std::string& shape) {
        fs::create_directory(dir.path / name);
        std::string m = manifest;
        m.replace(m.find("FILE"), 4, file);
        m.replace(m.find("SHAPE"), 5, shape);
        write_bytes(dir / (name + "/manifest.json"), m);
    };
    const float four[4] = {1, 2, 3, 4};
    // A forged manifest listing a file of the user's.
    forged("csv", "data.csv", "1");
    write_bytes(dir / "csv/data.csv", "a,b\n1,2\n");
    // Listing a .npy file that is not one, one of another shape, one of another type, one that is missing.
    forged("text", "data.npy", "1");
    write_bytes(dir / "text/data.npy", "not numpy");
    forged("shape", "w.npy", "2");
    REQUIRE(write_npy(dir / "shape/w.npy", {4}, four, error));
    forged("type", "i.npy", "4");
    const std::int32_t ints[4] = {1, 2, 3, 4};
    REQUIRE(write_npy(dir / "type/i.npy", {4}, ints, error));
    forged("missing", "gone.npy", "4");
    write_bytes(dir / "missing/keep.txt", "mine");
    for (const std::string name : {"csv", "text", "shape", "type", "missing"}) {
        INFO(name);
        const auto before = siblings(dir.path / name);
        CHECK_FALSE(can_save_checkpoint(dir / name, error));
        CHECK_FALSE(save_checkpoint(dir / name, ts, {}, error));
        CHECK_THAT(error, Catch::Contains("not a dsl checkpoint"));
        CHECK(siblings(dir.path / name) == before);
        // load_checkpoint refuses it too, for the same reason.
        std::string load_error;
        CHECK_FALSE(load_checkpoint(dir / name, load_error));
        CHECK_THAT(error, Catch::Contains(load_error));
    }
    CHECK(read_bytes(dir / "csv/data.csv") == "a,b\n1,2\n");
    // The same folder with a true .npy of the listed shape is a checkpoint and may be replaced.
    forged("good", "w.npy", "4");
    REQUIRE(write_npy(dir / "good/w.npy", {4}, four, error));
    CHECK(can_save_checkpoint(dir / "good", error));
    CHECK(save_checkpoint(dir / "good", ts, {}, error));
}

TEST_CASE("checkpoint: a save that cannot be made is known before the work", "[checkpoint]") {
    TempDir dir;
    std::string error;
    write_bytes(dir / "file", "a file of the user's");
    CHECK_FALSE(can_save_checkpoint(dir / "file/ckpt", error));
    CHECK_THAT(error, Catch::Contains("is not a folder"));
    CHECK_FALSE(can_save_checkpoint(dir / "file", error));
    CHECK_THAT(error, Catch::Contains("exists and is not a folder"));
    CHECK_FALSE(can_save_checkpoint(dir / "file/a/b/ckpt", error));
    // Folders yet to be made are fine, and the check makes none.
    CHECK(can_save_checkpoint(dir / "a/b/ckpt", error));
    CHECK(siblings(dir.path) == std::vector<std::string>{"file"});
    if (::geteuid() != 0) {  // root writes anywhere
        fs::create_directory(dir.path / "locked");
        fs::permissions(dir.path / "locked", fs::perms::owner_read | fs::perms::owner_exec);
        CHECK_FALSE(can_save_checkpoint(dir / "locked/ckpt", error));
        CHECK_THAT(error, Catch::Contains("cannot write in"));
        fs::permissions(dir.path / "locked", fs::perms::owner_all);
    }
}

TEST_CASE("checkpoint: loading reports what is wrong", "[checkpoint]") {
    TempDir dir;
    std::string error;
    const auto ts = sample_tensors(0.0f);
    REQUIRE(save_checkpoint(dir / "ckpt", ts, {{"step", 1}}, error));

    SECTION("missing file") {
        fs::remove(dir.path / "ckpt" / "bn1.running_mean.npy");
        CHECK_FALSE(load_checkpoint(dir / "ckpt", error));
        CHECK_THAT(error, Catch::Contains("bn1.running_mean.npy: missing"));
    }
    SECTION("shape mismatch") {
        const float four[4] = {1, 2, 3, 4};
        REQUIRE(write_npy(dir / "ckpt/bn1.running_mean.npy", {2, 2}, four, error));
        CHECK_FALSE(load_checkpoint(dir / "ckpt", error));
        CHECK_THAT(error, Catch::Contains("shape mismatch: the manifest says [4], the file holds [2, 2]"));
    }
    SECTION("truncated file") {
        const std::string bytes = read_bytes(dir / "ckpt/fc.bias.npy");
        write_bytes(dir / "ckpt/fc.bias.npy", bytes.substr(0, bytes.size() - 8));
        CHECK_FALSE(load_checkpoint(dir / "ckpt", error));
        CHECK_THAT(error, Catch::Contains("header says 10 elements, data holds 8"));
    }
    SECTION("bad manifest") {
        write_bytes(dir / "ckpt/manifest.json", "{\"format\": \"dsl-checkpoint\", ");
        CHECK_FALSE(load_checkpoint(dir / "ckpt", error));
        CHECK_THAT(error, Catch::Contains("bad manifest"));
    }
    SECTION("a manifest pointing outside the folder") {
        auto m = nlohmann::json::parse(read_bytes(dir / "ckpt/manifest.json"));
        m["tensors"][0]["file"] = "../../etc/passwd.npy";
        write_bytes(dir / "ckpt/manifest.json", m.dump());
        CHECK_FALSE(load_checkpoint(dir / "ckpt", error));
        CHECK_THAT(error, Catch::Contains("bad manifest"));
    }
    SECTION("a newer version") {
        auto m = nlohmann::json::parse(read_bytes(dir / "ckpt/manifest.json"));
        m["version"] = 2;
        write_bytes(dir / "ckpt/manifest.json", m.dump());
        CHECK_FALSE(load_checkpoint(dir / "ckpt", error));
        CHECK_THAT(error, Catch::Contains("version 2"));
    }
    SECTION("not a checkpoint") {
        fs::create_directory(dir.path / "plain");
        CHECK_FALSE(load_checkpoint(dir / "plain", error));
        CHECK_THAT(error, Catch::Contains("no manifest.json"));
        CHECK_FALSE(load_checkpoint(dir / "nowhere", error));
        CHECK_THAT(error, Catch::Contains("is not a folder"));
    }
}

// ---------------------------------------------------------------------------------------------------- data

namespace {

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

TEST_CASE("data: the same arguments give the same values; seeds differ", "[data]") {
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
    Tensor whole(Dims{3, 3, 32, 24});
    d.fill_inputs(5, 0, 0, 0, whole.interior());
    for (std::int64_t n = 0; n < 3; ++n)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t y = 0; y < 32; ++y)
                for (std::int64_t x = 0; x < 24; ++x) REQUIRE(whole.at(n, c, y, x) == d.input(5 + n, c, y, x));

    // Tiles at several offsets, into the interior of tensors with margins.
    struct Cut {
        std::int64_t n0, c0, y0, x0;
        Dims dims;
    };
    for (const Cut& cut : {Cut{0, 0, 0, 0, Dims{3, 3, 16, 12}}, Cut{1, 1, 7, 5, Dims{2, 2, 13, 17}},
                           Cut{2, 2, 31, 23, Dims{1, 1, 1, 1}}, Cut{0, 0, 16, 0, Dims{3, 3, 16, 24}}}) {
        Tensor t(cut.dims, Margins{1, 2, 3, 1});
        t.fill(99.0f);
        d.fill_inputs(5 + cut.n0, cut.c0, cut.y0, cut.x0, t.interior());
        for (std::int64_t n = 0; n < cut.dims.n; ++n)
            for (std::int64_t c = 0; c < cut.dims.c; ++c)
                for (std::int64_t y = 0; y < cut.dims.h; ++y)
                    for (std::int64_t x = 0; x < cut.dims.w; ++x)
                        REQUIRE(t.at(n, c, y, x) == whole.at(cut.n0 + n, cut.c0 + c, cut.y0 + y, cut.x0 + x));
        CHECK(t.at(0, 0, -1, 0) == 99.0f);
    }

    // Labels likewise, on the label grid.
    std::vector<std::int32_t> all(3 * 8 * 6), part(2 * 3 * 4);
    d.fill_labels(5, 0, 0, BasicView<std::int32_t>{all.data(), Dims{3, 1, 8, 6}, 48, 48, 6});
    d.fill_labels(6, 4, 2, BasicView<std::int32_t>{part.data(), Dims{2, 1, 3, 4}, 12, 12, 4});
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t y = 0; y < 3; ++y)
            for (std::int64_t x = 0; x < 4; ++x)
                REQUIRE(part[static_cast<std::size_t>(n * 12 + y * 4 + x)] ==
                        all[static_cast<std::size_t>((1 + n) * 48 + (4 + y) * 6 + 2 + x)]);
    // Squares of `block` label pixels share a class.
    for (std::int64_t y = 0; y < 8; ++y)
        for (std::int64_t x = 0; x < 6; ++x) CHECK(d.label(7, y, x) == d.label(7, y / 2 * 2, x / 2 * 2));
}

TEST_CASE("data: labels are in range and every class occurs", "[data]") {
    for (std::int64_t classes : {2, 3, 10}) {
        const SyntheticData d = sample_spec(3, classes, 4);
        std::map<std::int32_t, int> count;
        std::vector<std::int32_t> labels(400);
        d.fill_labels(1000, 0, 0, BasicView<std::int32_t>{labels.data(), Dims{400, 1, 1, 1}, 1, 1, 1});
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
        Tensor t(Dims{1, 4, 12, 10});
        d.fill_inputs(s, 0, 0, 0, t.interior());
        int best = 0;
        double best_mean = -1e9;
        for (int c = 0; c < 4; ++c) {
            double sum = 0;
            for (std::int64_t y = 0; y < 12; ++y)
                for (std::int64_t x = 0; x < 10; ++x) sum += t.at(0, c, y, x);
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
    Tensor t(Dims{2, 3, 5, 6});
    src->inputs(x, 7, 3, 4, t.interior());
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 3; ++c)
            for (std::int64_t r = 0; r < 5; ++r)
                for (std::int64_t q = 0; q < 6; ++q) REQUIRE(t.at(n, c, r, q) == d.input(7 + n, c, 3 + r, 4 + q));
    std::vector<std::int32_t> lab(2 * 4 * 4);
    src->labels(y, 7, 0, 0, BasicView<std::int32_t>{lab.data(), Dims{2, 1, 4, 4}, 16, 16, 4});
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
    Tensor t(Dims{4, 2, 4, 4});
    src->inputs(x, 3, 0, 0, t.interior());
    for (std::int64_t n = 0; n < 4; ++n)
        CHECK(t.at(n, 1, 2, 3) == xs[static_cast<std::size_t>(((n + 3) % S) * 32 + 16 + 11)]);
    std::vector<std::int32_t> lab(4);
    src->labels(y, 3, 0, 0, BasicView<std::int32_t>{lab.data(), Dims{4, 1, 1, 1}, 1, 1, 1});
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
        Trainer trainer(l.net, reference_kernels(), cfg);
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

TEST_CASE("checkpoint: a trainer's state is saved and restored", "[checkpoint][trainer]") {
    TempDir dir;
    Loaded l(sample_net);
    TrainConfig cfg;
    cfg.batch = 2;
    cfg.seed = 5;
    Trainer a(l.net, reference_kernels(), cfg);
    std::string error;
    auto data = make_data_source(l.net, 0, "", "", error);
    REQUIRE(data);
    a.step(*data, 0);  // momentum is not zero any more
    REQUIRE(save(a, dir / "ckpt", 1, 5, "t.net", error));
    auto loaded = load_checkpoint(dir / "ckpt", error);
    REQUIRE(loaded);
    CHECK(loaded->meta["network"] == "t.net");
    CHECK(loaded->meta["seed"] == 5);

    cfg.seed = 6;  // other initial weights
    Trainer b(l.net, reference_kernels(), cfg);
    std::int64_t step = -1;
    REQUIRE(restore(b, *loaded, step, error));
    CHECK(step == 1);
    const auto sa = a.state(), sb = b.state();
    REQUIRE(sa.size() == sb.size());
    REQUIRE(sa.size() >= 4);  // fc weight and bias, and their momentum
    for (std::size_t i = 0; i < sa.size(); ++i) {
        CHECK(sa[i].name == sb[i].name);
        CHECK(std::equal(sa[i].data, sa[i].data + sa[i].size, sb[i].data));
    }
    // Both continue alike.
    CHECK(a.step(*data, 2) == b.step(*data, 2));

    // A checkpoint of another network is refused and leaves the trainer as it was.
    Loaded other(R"(input x [N, 2, 4, 4]
label y [N]
f = fc(5)
loss = softmax_cross_entropy from f, y
)");
    Trainer c(other.net, reference_kernels(), cfg);
    const auto before = c.state();
    std::vector<float> saved(before[0].data, before[0].data + before[0].size);
    CHECK_FALSE(restore(c, *loaded, step, error));
    CHECK_THAT(error, Catch::Contains("f.weight"));
    CHECK(std::equal(saved.begin(), saved.end(), c.state()[0].data));
}
