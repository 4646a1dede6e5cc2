// .npy files: round trips, hand-written headers, errors, and tiles of samples and labels.
#include <dsl/backend/npy.hpp>

#include "temp_files.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

using namespace dsl;
using namespace dsl::backend;
using dsl::test::read_bytes;
using dsl::test::TempDir;
using dsl::test::write_bytes;

namespace {

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

}  // namespace

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

TEST_CASE("npy: int32 arrays round-trip: one-dimensional and empty shapes", "[npy]") {
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
    Tensor t(Dims{2, 1, {3, 2}}, Margins{{1, 1}, {2, 2}});
    t.fill(-7.0f);
    REQUIRE(copy_sample_tile(*f, 1, 1, Index{2, 3}, t.interior(), error));
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t y = 0; y < 3; ++y)
            for (std::int64_t x = 0; x < 2; ++x) CHECK(t.at(n, 0, {y, x}) == value(1 + n, 1, 2 + y, 3 + x));
    CHECK(t.at(0, 0, {-1, 0}) == -7.0f);
    CHECK(t.at(1, 0, {3, 1}) == -7.0f);
    CHECK(t.padded().at(0, 0, {1, 0}) == -7.0f);
    CHECK(t.padded().at(0, 0, {1, 5}) == -7.0f);

    // The whole array, and a region that reaches past the end.
    Tensor whole(Dims{S, C, {H, W}});
    REQUIRE(copy_sample_tile(*f, 0, 0, Index{0, 0}, whole.interior(), error));
    CHECK(std::equal(all.begin(), all.end(), whole.data()));
    Tensor past(Dims{1, 1, {3, 2}});
    CHECK_FALSE(copy_sample_tile(*f, 0, 0, Index{3, 0}, past.interior(), error));
    CHECK_THAT(error, Catch::Contains("outside the array [3, 2, 5, 6]"));
    CHECK_FALSE(copy_sample_tile(*f, 3, 0, Index{0, 0}, past.interior(), error));
    CHECK_FALSE(copy_sample_tile(*f, -1, 0, Index{0, 0}, past.interior(), error));

    // Bytes and doubles are converted.
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>(i * 30);
    write_bytes(dir / "u8.npy",
                npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1, 2, 2), }\n", bytes));
    auto u = open_ok(dir / "u8.npy");
    Tensor ut(Dims{1, 1, {2, 1}});
    REQUIRE(copy_sample_tile(*u, 1, 0, Index{0, 1}, ut.interior(), error));
    CHECK(ut.at(0, 0, {0, 0}) == 150.0f);
    CHECK(ut.at(0, 0, {1, 0}) == 210.0f);

    const std::vector<double> d{0.25, 1e10, -3.5, 4};
    write_bytes(dir / "f8.npy",
                npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 4)}\n", raw(d)));
    auto g = open_ok(dir / "f8.npy");
    Tensor gt(Dims{1, 1, {1, 3}});
    REQUIRE(copy_sample_tile(*g, 0, 0, Index{0, 1}, gt.interior(), error));
    CHECK(gt.at(0, 0, {0, 0}) == 1e10f);
    CHECK(gt.at(0, 0, {0, 1}) == -3.5f);
    CHECK(gt.at(0, 0, {0, 2}) == 4.0f);

    // Not 4-D.
    REQUIRE(write_npy(dir / "v.npy", {4}, all.data(), error));
    auto one = open_ok(dir / "v.npy");
    CHECK_FALSE(copy_sample_tile(*one, 0, 0, Index{0, 0}, gt.interior(), error));
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
    REQUIRE(copy_label_tile(*l, 2, Index{}, dense_view(out.data(), Dims{3, 1, {}}), error));
    CHECK(out == std::vector<std::int32_t>{4, 1, 5});
    CHECK_FALSE(copy_label_tile(*l, 3, Index{}, dense_view(out.data(), Dims{3, 1, {}}), error));

    // [2, 3, 4] bytes: value = s * 12 + y * 4 + x.
    std::string px;
    for (int i = 0; i < 24; ++i) px += static_cast<char>(i);
    write_bytes(dir / "p.npy", npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4), }\n", px));
    auto p = open_ok(dir / "p.npy");
    std::vector<std::int32_t> tile(2 * 2 * 3, -1);
    const BasicView<std::int32_t> tv = dense_view(tile.data(), Dims{2, 1, {2, 3}});
    REQUIRE(copy_label_tile(*p, 0, Index{1, 1}, tv, error));
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t y = 0; y < 2; ++y)
            for (std::int64_t x = 0; x < 3; ++x) CHECK(tv.at(n, 0, {y, x}) == n * 12 + (1 + y) * 4 + (1 + x));
    CHECK_FALSE(copy_label_tile(*p, 0, Index{2, 0}, tv, error));

    // Floats are not labels; values beyond int32 are refused.
    const float fl[2] = {0, 1};
    REQUIRE(write_npy(dir / "f.npy", {2}, fl, error));
    CHECK_FALSE(copy_label_tile(*open_ok(dir / "f.npy"), 0, Index{}, dense_view(out.data(), Dims{1, 1, {}}), error));
    CHECK_THAT(error, Catch::Contains("integer dtype"));
    const std::vector<std::int64_t> huge{1LL << 33};
    write_bytes(dir / "h.npy", npy_bytes(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }\n", raw(huge)));
    CHECK_FALSE(copy_label_tile(*open_ok(dir / "h.npy"), 0, Index{}, dense_view(out.data(), Dims{1, 1, {}}), error));
    CHECK_THAT(error, Catch::Contains("does not fit in int32"));
}
