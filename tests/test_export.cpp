// dsl export: the zip, pickle and .npz writers, a checkpoint as a state_dict, and the command's refusals. That
// PyTorch loads the files is the oracle's (tests/oracle/export.py).
#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/torch_export.hpp>
#include <dsl/backend/trainer.hpp>

#include "run_dsl.hpp"
#include "skip.hpp"
#include "support.hpp"
#include "temp_files.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <sys/stat.h>

using namespace dsl;
using namespace dsl::backend;
using dsl::test::read_bytes;
using dsl::test::TempDir;
using dsl::test::write_bytes;

namespace {

std::uint32_t get16(const std::string& s, std::size_t at) {
    return static_cast<unsigned char>(s.at(at)) | (static_cast<std::uint32_t>(static_cast<unsigned char>(s.at(at + 1))) << 8);
}
std::uint32_t get32(const std::string& s, std::size_t at) { return get16(s, at) | (get16(s, at + 2) << 16); }

struct ZipEntry {
    std::string name, data;
    std::size_t data_offset = 0;
};

// A reader of what zip_archive writes, independent of it: the end record, the central directory, each local
// header; checks that the two headers agree and the CRC matches.
std::vector<ZipEntry> read_zip(const std::string& zip) {
    REQUIRE(zip.size() >= 22);
    const std::size_t end = zip.size() - 22;
    REQUIRE(get32(zip, end) == 0x06054b50);
    const std::uint32_t count = get16(zip, end + 10);
    std::size_t at = get32(zip, end + 16);
    CHECK(at + get32(zip, end + 12) == end);
    std::vector<ZipEntry> out;
    for (std::uint32_t i = 0; i < count; ++i) {
        REQUIRE(get32(zip, at) == 0x02014b50);
        CHECK(get16(zip, at + 10) == 0);  // stored
        const std::uint32_t crc = get32(zip, at + 16), size = get32(zip, at + 20);
        CHECK(get32(zip, at + 24) == size);
        const std::uint32_t name_size = get16(zip, at + 28), extra = get16(zip, at + 30), comment = get16(zip, at + 32);
        const std::uint32_t local = get32(zip, at + 42);
        ZipEntry e;
        e.name = zip.substr(at + 46, name_size);
        at += 46 + name_size + extra + comment;
        REQUIRE(get32(zip, local) == 0x04034b50);
        CHECK(get32(zip, local + 14) == crc);
        CHECK(get32(zip, local + 18) == size);
        CHECK(zip.substr(local + 30, get16(zip, local + 26)) == e.name);
        e.data_offset = local + 30 + get16(zip, local + 26) + get16(zip, local + 28);
        e.data = zip.substr(e.data_offset, size);
        CHECK(crc32(e.data) == crc);
        out.push_back(std::move(e));
    }
    return out;
}

NamedArray floats(const std::string& name, std::vector<std::int64_t> shape, float first) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    NamedArray a{name, std::move(shape), ArrayType::f4, std::string(static_cast<std::size_t>(n) * 4, '\0')};
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = first + 0.5f * static_cast<float>(i);
        std::memcpy(a.bytes.data() + i * 4, &v, 4);
    }
    return a;
}

}  // namespace

TEST_CASE("export: CRC-32 as zip has it", "[export]") {
    CHECK(crc32("") == 0);
    CHECK(crc32("123456789") == 0xCBF43926u);  // the check value of CRC-32/ISO-HDLC
    CHECK(crc32("6789", crc32("12345")) == 0xCBF43926u);
}

TEST_CASE("export: a zip of stored files, each file's data at a multiple of 64 bytes", "[export]") {
    std::string error;
    const std::string big(1000, 'q');
    const auto zip = zip_archive({{"archive/data.pkl", "pickle"}, {"archive/data/0", big}, {"v", ""}}, error);
    REQUIRE(zip);
    const auto entries = read_zip(*zip);
    REQUIRE(entries.size() == 3);
    CHECK(entries[0].name == "archive/data.pkl");
    CHECK(entries[0].data == "pickle");
    CHECK(entries[1].data == big);
    CHECK(entries[2].name == "v");
    CHECK(entries[2].data.empty());
    for (const auto& e : entries) CHECK(e.data_offset % 64 == 0);
    CHECK(zip->substr(0, 4) == std::string("PK\x03\x04", 4));  // what torch.load looks for first
}

TEST_CASE("export: torch.save's layout: the pickle, one storage per tensor, the version", "[export]") {
    std::vector<NamedArray> arrays{floats("mods.1.weight", {2, 3, 1, 1}, 1.0f), floats("mods.1.bias", {2}, -1.0f),
                                   {"mods.2.num_batches_tracked", {}, ArrayType::i8, std::string(8, '\0')}};
    arrays[2].bytes[0] = 7;
    std::string error;
    const auto file = torch_save_bytes(arrays, error);
    REQUIRE(file);
    const auto entries = read_zip(*file);
    std::vector<std::string> names;
    for (const auto& e : entries) names.push_back(e.name);
    CHECK(names == std::vector<std::string>{"archive/data.pkl", "archive/byteorder", "archive/data/0",
                                            "archive/data/1", "archive/data/2", "archive/version"});
    CHECK(entries[1].data == "little");
    CHECK(entries[2].data == arrays[0].bytes);
    CHECK(entries[4].data == arrays[2].bytes);
    CHECK(entries[5].data == "3\n");
    const std::string& pickle = entries[0].data;
    CHECK(pickle.substr(0, 2) == "\x80\x02");
    CHECK(pickle.back() == '.');
    CHECK(pickle.find("ccollections\nOrderedDict\n") == 2);
    CHECK(pickle.find("ctorch\nFloatStorage\n") != std::string::npos);
    CHECK(pickle.find("ctorch\nLongStorage\n") != std::string::npos);
    // The first tensor's size (2, 3, 1, 1) and stride (3, 1, 1, 1): four items, so MARK ... TUPLE.
    CHECK(pickle.find("(K\x02K\x03K\x01K\x01t(K\x03K\x01K\x01K\x01t\x89") != std::string::npos);
    // A 0-d tensor: size () and stride ().
    CHECK(pickle.find("))\x89") != std::string::npos);

    arrays[1].bytes.pop_back();
    CHECK_FALSE(torch_save_bytes(arrays, error));
    CHECK_THAT(error, Catch::Contains("mods.1.bias"));
}

TEST_CASE("export: npz holds a .npy file per array, format 1.0", "[export]") {
    std::string error;
    const auto file = npz_bytes({floats("w", {2, 3}, 0.0f), floats("b", {3}, 0.0f),
                                 {"n", {}, ArrayType::i8, std::string(8, '\0')}},
                                error);
    REQUIRE(file);
    const auto entries = read_zip(*file);
    REQUIRE(entries.size() == 3);
    CHECK(entries[0].name == "w.npy");
    for (const auto& e : entries) {
        CHECK(e.data.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
        const std::size_t header = get16(e.data, 8);
        CHECK((10 + header) % 64 == 0);
        CHECK(e.data[10 + header - 1] == '\n');
    }
    CHECK(entries[0].data.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") == 10);
    CHECK(entries[1].data.find("'shape': (3,), }") != std::string::npos);
    CHECK(entries[2].data.find("{'descr': '<i8', 'fortran_order': False, 'shape': (), }") == 10);
    CHECK(entries[0].data.size() == 10 + get16(entries[0].data, 8) + 24);
}

TEST_CASE("export: a trained checkpoint as the translator's state_dict", "[export][trainer]") {
    TempDir dir;
    test::NetworkFromText l(R"(input x [N, 2, 6, 6]
label y [N]
c = conv(4, kernel = 3, pad = 1, bias = false)
bn = batchnorm
r = relu
d = deconv(3, kernel = 2, stride = 2)
g = groupnorm(groups = 3)
f = fc(5)
loss = softmax_cross_entropy from f, y
)");
    TrainConfig cfg;
    cfg.batch = 2;
    Trainer trainer(l.net, reference_kernels(), cfg, test::one_process(l.net, cfg.batch));
    std::string error;
    auto data = make_data_source(l.net, 0, "", "", error);
    REQUIRE(data);
    trainer.step(*data, 0);
    trainer.step(*data, 2);
    REQUIRE(save(trainer, dir / "ck", 2, 0, "t.net", error));
    auto ck = load_checkpoint(dir / "ck", error);
    REQUIRE(ck);

    const auto state = torch_state_dict(l.net, *ck, error);
    INFO(error);
    REQUIRE(state);
    std::vector<std::string> keys;
    std::map<std::string, std::vector<std::int64_t>> shapes;
    for (const auto& a : *state) {
        keys.push_back(a.name);
        shapes[a.name] = a.shape;
    }
    // Layer indices in the network's order (x 0, y 1, c 2, ...), as the translator's ModuleDict has them; in
    // each module parameters first, then buffers, as Module.state_dict() gives them.
    CHECK(keys == std::vector<std::string>{"mods.2.weight", "mods.3.weight", "mods.3.bias", "mods.3.running_mean",
                                           "mods.3.running_var", "mods.3.num_batches_tracked", "mods.5.weight",
                                           "mods.5.bias", "mods.6.weight", "mods.6.bias", "mods.7.weight",
                                           "mods.7.bias"});
    CHECK(shapes["mods.2.weight"] == std::vector<std::int64_t>{4, 2, 3, 3});
    CHECK(shapes["mods.5.weight"] == std::vector<std::int64_t>{4, 3, 2, 2});  // ConvTranspose2d: in, out
    CHECK(shapes["mods.7.weight"] == std::vector<std::int64_t>{5, 3 * 12 * 12});
    CHECK(shapes["mods.3.num_batches_tracked"].empty());
    std::int64_t count = 0;
    std::memcpy(&count, state->at(5).bytes.data(), 8);
    CHECK(count == 2);
    CHECK(state->at(5).type == ArrayType::i8);
    // Each tensor's bytes are the checkpoint's.
    CHECK(state->at(3).bytes.size() == 16);
    CHECK(std::memcmp(state->at(3).bytes.data(), ck->find("bn.running_mean")->data.data(), 16) == 0);

    SECTION("a tensor missing") {
        auto broken = *ck;
        broken.tensors.erase(broken.tensors.begin());
        CHECK_FALSE(torch_state_dict(l.net, broken, error));
        CHECK_THAT(error, Catch::Contains("no tensor 'c.weight'"));
    }
    SECTION("a tensor of another shape") {
        auto broken = *ck;
        for (auto& t : broken.tensors)
            if (t.name == "f.bias") t.shape = {1, 5};
        CHECK_FALSE(torch_state_dict(l.net, broken, error));
        CHECK_THAT(error, Catch::Contains("'f.bias' is [1, 5] in the checkpoint but [5] in the network"));
    }
    SECTION("a tensor the network does not have") {
        auto broken = *ck;
        broken.tensors.push_back({"h.weight", {1}, {0.0f}});
        CHECK_FALSE(torch_state_dict(l.net, broken, error));
        CHECK_THAT(error, Catch::Contains("'h.weight', which the network does not have"));
    }
    SECTION("no step") {
        auto broken = *ck;
        broken.meta.erase("step");
        CHECK_FALSE(torch_state_dict(l.net, broken, error));
        CHECK_THAT(error, Catch::Contains("no step"));
    }
}

TEST_CASE("dsl export refuses what it cannot do, with one line, and never replaces a file unasked", "[cli][export]") {
    TempDir dir;
    const std::string net = "samples/mesh_tiny.net";
    Result r = run_dsl("run " + net + " --steps 1 --batch 2 --save " + (dir / "ck"));
    REQUIRE(r.exit_code == 0);

    r = run_dsl("export " + net + " --load " + (dir / "ck") + " -o " + (dir / "m.pt"));
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("m.pt: 38 tensors"));
    const std::string first = read_bytes(dir / "m.pt");
    CHECK(first.substr(0, 4) == std::string("PK\x03\x04", 4));

    r = run_dsl("export " + net + " --load " + (dir / "ck") + " -o " + (dir / "m.pt"));
    CHECK(r.exit_code == 1);
    CHECK(r.err == "error: -o '" + (dir / "m.pt") + "' exists; it is left as it is (--force replaces it)\n");
    write_bytes(dir / "m.pt", "mine");
    r = run_dsl("export " + net + " --load " + (dir / "ck") + " -o " + (dir / "m.pt") + " --force");
    CHECK(r.exit_code == 0);
    CHECK(read_bytes(dir / "m.pt") == first);  // the same checkpoint gives the same bytes

    r = run_dsl("export " + net + " --load " + (dir / "ck") + " -o " + (dir / "m.npz"));
    CHECK(r.exit_code == 0);
    CHECK(read_bytes(dir / "m.npz").find("mods.2.weight.npy") != std::string::npos);

    struct Bad {
        std::string args, message;
    };
    const std::vector<Bad> bad{
        {"export " + net + " --load " + (dir / "nothing") + " -o " + (dir / "a.pt"),
         "error: --load '" + (dir / "nothing") + "': no such checkpoint\n"},
        {"export " + net + " --load " + (dir / "m.pt") + " -o " + (dir / "a.pt"), "not a folder"},
        {"export " + net + " --load " + dir.path.string() + " -o " + (dir / "a.pt"), "has no manifest.json"},
        {"export samples/resnet_tiny.net --load " + (dir / "ck") + " -o " + (dir / "a.pt"),
         "does not fit the network 'samples/resnet_tiny.net': the checkpoint has no tensor"},
        {"export " + net + " --load " + (dir / "ck") + " -o " + (dir / "no/such/a.pt"), "is not a folder"},
        {"export " + net + " --load " + (dir / "ck") + " -o " + dir.path.string(), "is a folder"},
        {"export " + net + " --load " + (dir / "ck") + " -o " + (dir / "a.pt") + " --format onnx", "onnx"},
        {"export " + net + " -o " + (dir / "a.pt"), "--load is required"},
        {"export tests/diag/fail_nope.net --load " + (dir / "ck") + " -o " + (dir / "a.pt"), "fail_nope.net"},
    };
    for (const auto& b : bad) {
        r = run_dsl(b.args);
        INFO(b.args << "\n" << r.err);
        CHECK((r.exit_code == 1 || r.exit_code == 2));
        CHECK_THAT(r.err, Catch::Contains(b.message));
        // One line, and for a usage error CLI11's pointer to --help.
        const std::string rest = r.err.substr(std::min(r.err.find('\n') + 1, r.err.size()));
        CHECK((rest.empty() || (r.exit_code == 2 && rest == "Run with --help for more information.\n")));
        CHECK(r.err.find("internal") == std::string::npos);
    }
    CHECK_FALSE(fs::exists(dir / "a.pt"));
}

TEST_CASE("dsl export refuses a file in a folder it may not write in", "[cli][export]") {
    if (::geteuid() == 0) return dsl::test::skip(dsl::test::root_writes_anywhere);
    TempDir dir;
    const std::string net = "samples/mesh_tiny.net";
    Result r = run_dsl("run " + net + " --steps 1 --batch 2 --save " + (dir / "ck"));
    REQUIRE(r.exit_code == 0);
    fs::create_directories(dir / "locked");
    ::chmod((dir / "locked").c_str(), 0500);
    r = run_dsl("export " + net + " --load " + (dir / "ck") + " -o " + (dir / "locked/a.pt"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("cannot write"));
    ::chmod((dir / "locked").c_str(), 0700);
}
