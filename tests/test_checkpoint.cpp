// Checkpoint folders: round trip, atomic replacement, refusals, and a trainer's state saved and restored.
#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/npy.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/base/whole_file.hpp>

#include "skip.hpp"
#include "support.hpp"
#include "temp_files.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace dsl;
using namespace dsl::backend;
using dsl::test::read_bytes;
using dsl::test::TempDir;
using dsl::test::write_bytes;
namespace fs = std::filesystem;

namespace {

using Loaded = test::NetworkFromText;

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

// A temporary name's tail for process `pid` of this machine: "PID-HOST".
std::string tag(const std::string& pid) { return pid + "-" + dsl::this_host(); }

// The temporary names of a save to "ckpt" by process `pid` of this machine.
std::string tmp(const std::string& pid) { return ".ckpt.tmp-" + tag(pid); }
std::string old(const std::string& pid) { return ".ckpt.old-" + tag(pid); }

// The marker of a folder being written by process `pid` of this machine.
std::string marker(const std::string& pid) {
    return "a dsl checkpoint being written by process " + pid + " on host '" + dsl::this_host() + "'\n";
}

// What a save killed while writing leaves: its temporary folder, marked with the process's number first.
void killed_save(const fs::path& folder, const std::string& pid) {
    fs::create_directory(folder);
    write_bytes((folder / ".dsl-partial").string(), marker(pid));
    write_bytes((folder / "half.npy").string(), "\x93NUMPY partial");
}

}  // namespace

TEST_CASE("checkpoint: temporary folders of a killed run do not break a later save", "[checkpoint]") {
    TempDir dir;
    std::string error;
    // One of this process (a run killed with the same pid), one of a process that no longer exists, and the
    // old checkpoint a killed save had moved aside.
    const std::string pid = std::to_string(::getpid());
    killed_save(dir.path / (".ckpt.tmp-" + tag(pid)), pid);
    killed_save(dir.path / tmp("999999999"), "999999999");
    killed_save(dir.path / old("999999999"), "999999999");
    // Saves killed before their marker was whole: right after making the folder, and halfway through the mark.
    fs::create_directory(dir.path / tmp("999999993"));
    fs::create_directory(dir.path / tmp("999999992"));
    write_bytes(dir / (tmp("999999992") + "/.dsl-partial"), "a dsl checkpoint being wri");
    REQUIRE(save_checkpoint(dir / "ckpt", sample_tensors(2.0f), {{"step", 3}}, error));
    CHECK(siblings(dir.path) == std::vector<std::string>{"ckpt"});
    auto loaded = load_checkpoint(dir / "ckpt", error);
    REQUIRE(loaded);
    CHECK(loaded->tensors.size() == 4);
    CHECK(siblings(dir.path / "ckpt").size() == 5);  // no mark left in the checkpoint
}

TEST_CASE("a write of a process that has ended, not yet reaped by its parent, is debris", "[checkpoint]") {
    // A child that exits and is not waited for stays a zombie: kill(pid, 0) still finds it (as a rank that
    // mpirun ended may be a moment after the command), but it has ended, and its temporary file is removed.
    TempDir dir;
    const pid_t child = ::fork();
    if (child == 0) std::_Exit(0);
    REQUIRE(child > 0);
    for (int i = 0; i < 500 && !dsl::process_ended(child); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(::kill(child, 0) == 0);
    CHECK(dsl::process_ended(child));
    write_bytes(dsl::temporary_beside(dir / "out.npy", child), "a part");
    CHECK(dsl::remove_debris(dir / "out.npy").size() == 1);
    CHECK(siblings(dir.path).empty());
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(dsl::process_ended(child));
    // A running process, and this one, have not ended.
    const pid_t sleeper = ::fork();
    if (sleeper == 0) {
        ::pause();
        std::_Exit(0);
    }
    REQUIRE(sleeper > 0);
    CHECK_FALSE(dsl::process_ended(sleeper));
    CHECK_FALSE(dsl::process_ended(::getpid()));
    ::kill(sleeper, SIGKILL);
    ::waitpid(sleeper, &status, 0);
}

TEST_CASE("checkpoint: a save killed while it replaced the old checkpoint leaves nothing for good", "[checkpoint]") {
    TempDir dir;
    std::string error;
    // The old checkpoint as a kill leaves it: exchanged into the temporary name but not yet marked, marked in
    // part, and deleted in part (the marker goes last, so what is left is still marked).
    for (const std::string& name : {tmp("999999990"), old("999999991"), old("999999989")}) {
        REQUIRE(save_checkpoint(dir / "whole", sample_tensors(1.0f), {{"step", 1}}, error));
        fs::rename(dir.path / "whole", dir.path / name);
    }
    write_bytes(dir / (old("999999991") + "/.dsl-partial"), "a dsl checkpoint being written by proc");
    write_bytes(dir / (old("999999989") + "/.dsl-partial"), marker("999999989"));
    fs::remove(dir.path / old("999999989") / "manifest.json");
    std::vector<std::string> removed;
    REQUIRE(save_checkpoint(dir / "ckpt", sample_tensors(2.0f), {{"step", 3}}, error, &removed));
    CHECK(siblings(dir.path) == std::vector<std::string>{"ckpt"});
    std::sort(removed.begin(), removed.end());
    CHECK(removed == std::vector<std::string>{dir / old("999999989"), dir / old("999999991"), dir / tmp("999999990")});
}

TEST_CASE("checkpoint: a folder named like a temporary one is removed only if dsl marked it", "[checkpoint]") {
    TempDir dir;
    std::string error;
    // The user's folders: no mark, another process's mark, dsl's mark but a file of the user's in it, and a
    // link to a folder of the user's.
    fs::create_directory(dir.path / tmp("999999"));
    write_bytes(dir / (tmp("999999") + "/mine.txt"), "mine");
    fs::create_directory(dir.path / old("999999998"));
    write_bytes(dir / (old("999999998") + "/w.npy"), "mine too");
    killed_save(dir.path / tmp("999999997"), "999999996");
    killed_save(dir.path / tmp("999999995"), "999999995");
    write_bytes(dir / (tmp("999999995") + "/notes.txt"), "mine as well");
    killed_save(dir.path / "target", "999999994");
    fs::create_directory_symlink(dir.path / "target", dir.path / old("999999994"));
    REQUIRE(save_checkpoint(dir / "ckpt", sample_tensors(2.0f), {{"step", 3}}, error));
    CHECK(siblings(dir.path) == std::vector<std::string>{old("999999994"), old("999999998"), tmp("999999"),
                                                         tmp("999999995"), tmp("999999997"), "ckpt", "target"});
    CHECK(read_bytes(dir / (tmp("999999") + "/mine.txt")) == "mine");
    CHECK(read_bytes(dir / (old("999999998") + "/w.npy")) == "mine too");
    CHECK(read_bytes(dir / (tmp("999999995") + "/notes.txt")) == "mine as well");
    CHECK(siblings(dir.path / "target").size() == 2);

    // A folder of this process's name that is not its own is in the way: the save says so before it starts.
    const fs::path mine = dir.path / (".ckpt.tmp-" + tag(std::to_string(::getpid())));
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
}

TEST_CASE("checkpoint: a save into a folder it may not write in is known before the work", "[checkpoint]") {
    if (::geteuid() == 0) return dsl::test::skip(dsl::test::root_writes_anywhere);
    TempDir dir;
    std::string error;
    fs::create_directory(dir.path / "locked");
    fs::permissions(dir.path / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_FALSE(can_save_checkpoint(dir / "locked/ckpt", error));
    CHECK_THAT(error, Catch::Contains("cannot write in"));
    fs::permissions(dir.path / "locked", fs::perms::owner_all);
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

TEST_CASE("checkpoint: a trainer's state is saved and restored", "[checkpoint][trainer]") {
    TempDir dir;
    Loaded l(R"(input x [N, 2, 4, 4]
label y [N]
f = fc(3)
loss = softmax_cross_entropy from f, y
)");
    TrainConfig cfg;
    cfg.batch = 2;
    cfg.seed = 5;
    Trainer a(l.net, reference_kernels(), cfg, test::one_process(l.net, cfg.batch));
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
    Trainer b(l.net, reference_kernels(), cfg, test::one_process(l.net, cfg.batch));
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
    Trainer c(other.net, reference_kernels(), cfg, test::one_process(other.net, cfg.batch));
    const auto before = c.state();
    std::vector<float> saved(before[0].data, before[0].data + before[0].size);
    CHECK_FALSE(restore(c, *loaded, step, error));
    CHECK_THAT(error, Catch::Contains("f.weight"));
    CHECK(std::equal(saved.begin(), saved.end(), c.state()[0].data));
}
