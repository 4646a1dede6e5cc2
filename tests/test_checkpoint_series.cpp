// A series of checkpoints in one folder (dsl run --save DIR): the newest named by `latest`, the older ones
// dropped past --keep, a damaged newest passed over with a note, the earlier one-folder format still read,
// saves killed at each of their steps on a file system without RENAME_EXCHANGE, and locks and debris of
// processes of other machines left alone.
#include "logged_losses.hpp"
#include "run_dsl.hpp"
#include "temp_files.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/base/whole_file.hpp>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <span>
#include <string>
#include <vector>

using namespace dsl;
using namespace dsl::backend;
using dsl::test::read_bytes;
using dsl::test::TempDir;
using dsl::test::write_bytes;

namespace {

std::vector<CheckpointTensor> tensors(float value) {
    return {{"a.weight", {2, 3}, std::vector<float>(6, value)}, {"a.bias", {2}, {value, -value}}};
}

std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

std::int64_t step_of(const std::optional<Checkpoint>& c) { return c ? c->meta["step"].get<std::int64_t>() : -1; }

// The steps of the whole checkpoints of the series in `dir`, by their folders' names.
std::vector<std::int64_t> whole_steps(const fs::path& dir) {
    std::vector<std::int64_t> out;
    for (const std::string& name : names_in(dir)) {
        std::string error;
        if (name.rfind("step-", 0) == 0 && load_checkpoint((dir / name).string(), error))
            out.push_back(std::stoll(name.substr(5, 8)));
    }
    return out;
}

const std::string common = "run samples/mesh_tiny.net --batch 2 --seed 3 ";


}  // namespace

TEST_CASE("checkpoint series: a folder per save, `latest` naming the newest, the `keep` newest kept", "[checkpoint]") {
    TempDir dir;
    std::string error;
    const auto refs = tensors(1.0f);
    for (std::int64_t step = 1; step <= 10; ++step) {
        SeriesSave report;
        REQUIRE(save_to_series(dir / "ck", refs, {{"step", step}}, step, 3, error, &report));
        CHECK(report.folder == dir / ("ck/step-" + fmt::format("{:08d}", step)));
    }
    CHECK(names_in(dir.path) == std::vector<std::string>{"ck"});
    CHECK(names_in(dir.path / "ck") ==
          std::vector<std::string>{"latest", "step-00000008", "step-00000009", "step-00000010"});
    CHECK(read_bytes(dir / "ck/latest") == "step-00000010\n");
    CHECK(step_of(load_checkpoint(dir / "ck", error)) == 10);
    CHECK(step_of(load_checkpoint(dir / "ck/step-00000009", error)) == 9);
    CHECK(step_of(load_checkpoint(dir / "ck/step-00000008/", error)) == 8);

    // A step saved again (a run resumed from an older checkpoint) gets a folder of its own: none is replaced.
    REQUIRE(save_to_series(dir / "ck", refs, {{"step", 9}, {"again", true}}, 9, 3, error));
    CHECK(read_bytes(dir / "ck/latest") == "step-00000009-2\n");
    CHECK(load_checkpoint(dir / "ck", error)->meta["again"] == true);
    CHECK(names_in(dir.path / "ck") ==
          std::vector<std::string>{"latest", "step-00000009", "step-00000009-2", "step-00000010"});

    // Nothing in the series but its own checkpoints is removed: a file of the user's, a checkpoint with a
    // file of the user's in it, a folder that is not a checkpoint.
    write_bytes(dir / "ck/README", "mine");
    REQUIRE(save_to_series(dir / "ck", refs, {{"step", 11}}, 11, 1, error));
    fs::create_directory(dir.path / "ck/step-00000002");
    write_bytes(dir / "ck/step-00000002/notes.txt", "mine");
    write_bytes(dir / "ck/step-00000011/notes.txt", "mine");
    REQUIRE(save_to_series(dir / "ck", refs, {{"step", 12}}, 12, 1, error));
    CHECK(names_in(dir.path / "ck") ==
          std::vector<std::string>{"README", "latest", "step-00000002", "step-00000011", "step-00000012"});
}

TEST_CASE("checkpoint series: --load of a damaged newest takes the newest whole one, with a note", "[checkpoint]") {
    TempDir dir;
    std::string error, note;
    for (std::int64_t step = 1; step <= 3; ++step)
        REQUIRE(save_to_series(dir / "ck", tensors(static_cast<float>(step)), {{"step", step}}, step, 3, error));
    REQUIRE(step_of(load_checkpoint(dir / "ck", error, &note)) == 3);
    CHECK(note.empty());

    fs::remove(dir.path / "ck/step-00000003/a.bias.npy");
    CHECK(step_of(load_checkpoint(dir / "ck", error, &note)) == 2);
    CHECK_THAT(note, Catch::Contains("'" + dir / "ck/latest" + "' names 'step-00000003', which is damaged"));
    CHECK_THAT(note, Catch::Contains("a.bias.npy"));
    CHECK_THAT(note, Catch::Contains("loading '" + dir / "ck/step-00000002" + "', the newest whole checkpoint"));

    // A manifest that cannot be read, and a `latest` that is gone, say so too.
    write_bytes(dir / "ck/step-00000002/manifest.json", "{not json");
    fs::remove(dir.path / "ck/latest");
    note.clear();
    CHECK(step_of(load_checkpoint(dir / "ck", error, &note)) == 1);
    CHECK_THAT(note, Catch::Contains("is missing"));
    // None whole: an error that says why.
    fs::remove(dir.path / "ck/step-00000001/manifest.json");
    CHECK_FALSE(load_checkpoint(dir / "ck", error, &note));
    CHECK_THAT(error, Catch::Contains("holds no whole checkpoint"));
    // A damaged one named directly is refused, not passed over.
    CHECK_FALSE(load_checkpoint(dir / "ck/step-00000003", error));
    CHECK_THAT(error, Catch::Contains("a.bias.npy"));
}

TEST_CASE("checkpoint series: a checkpoint folder of the earlier format still loads, and a series grows in it",
          "[checkpoint]") {
    TempDir dir;
    std::string error, note;
    REQUIRE(save_checkpoint(dir / "old", tensors(5.0f), {{"step", 4}}, error));
    CHECK(step_of(load_checkpoint(dir / "old", error, &note)) == 4);
    CHECK(note.empty());
    CHECK(can_save_series(dir / "old", error));
    const auto before = names_in(dir.path / "old");
    REQUIRE(save_to_series(dir / "old", tensors(6.0f), {{"step", 5}}, 5, 2, error));
    CHECK(step_of(load_checkpoint(dir / "old", error)) == 5);
    for (const std::string& name : before) CHECK(fs::exists(dir.path / "old" / name));  // its files stay

    // A folder of the user's is not made a series.
    fs::create_directory(dir.path / "mine");
    write_bytes(dir / "mine/notes.txt", "mine");
    CHECK_FALSE(can_save_series(dir / "mine", error));
    CHECK_THAT(error, Catch::Contains("not a dsl checkpoint"));
    CHECK_FALSE(save_to_series(dir / "mine", tensors(1.0f), {{"step", 1}}, 1, 2, error));
    CHECK(names_in(dir.path / "mine") == std::vector<std::string>{"notes.txt"});
    // Nor is a file called `latest` of the user's taken for one.
    write_bytes(dir / "mine/latest", "my latest notes");
    CHECK_FALSE(can_save_series(dir / "mine", error));
}

TEST_CASE("checkpoint series: what killed saves left is removed only when this machine's and ended", "[checkpoint]") {
    TempDir dir;
    std::string error;
    REQUIRE(save_to_series(dir / "ck", tensors(1.0f), {{"step", 1}}, 1, 2, error));
    auto killed = [&](const std::string& name, const std::string& pid, const std::string& host) {
        const fs::path folder = dir.path / "ck" / name;
        fs::create_directory(folder);
        write_bytes((folder / ".dsl-partial").string(),
                    "a dsl checkpoint being written by process " + pid + " on host '" + host + "'\n");
        write_bytes((folder / "half.npy").string(), "\x93NUMPY partial");
    };
    const std::string here = this_host();
    killed(".step-00000002.tmp-999999999-" + here, "999999999", here);  // this machine's, ended
    killed(".step-00000002.tmp-999999998-another-node", "999999998", "another-node");
    killed(".step-00000002.tmp-999999997", "999999997", here);  // no host: of an older dsl
    SeriesSave report;
    REQUIRE(save_to_series(dir / "ck", tensors(2.0f), {{"step", 2}}, 2, 2, error, &report));
    CHECK(report.removed == std::vector<std::string>{dir / ("ck/.step-00000002.tmp-999999999-" + here)});
    CHECK(names_in(dir.path / "ck") == std::vector<std::string>{".step-00000002.tmp-999999997",
                                                                ".step-00000002.tmp-999999998-another-node", "latest",
                                                                "step-00000001", "step-00000002"});
    // The same for the temporary files of whole files (dsl predict's, a trace's).
    write_bytes(dsl::temporary_beside(dir / "out.npy", dsl::Writer{999999999, "another-node"}), "a part");
    write_bytes(dsl::temporary_beside(dir / "out.npy", dsl::Writer{999999999, here}), "a part");
    CHECK(dsl::remove_debris(dir / "out.npy") ==
          std::vector<std::string>{dsl::temporary_beside(dir / "out.npy", dsl::Writer{999999999, here})});
    CHECK(fs::exists(dsl::temporary_beside(dir / "out.npy", dsl::Writer{999999999, "another-node"})));
}

TEST_CASE("a checkpoint folder's lock left by a process of another machine is refused, never taken as stale",
          "[checkpoint]") {
    TempDir dir;
    const std::string lock = dir / ".ck.lock", text = "process 999999999 on host 'another-node'\n";
    write_bytes(lock, text);
    std::string error;
    CHECK_FALSE(lock_checkpoint_folder(dir / "ck", error));
    CHECK_THAT(error, Catch::Contains("process 999999999 on host 'another-node'"));
    CHECK_THAT(error, Catch::Contains("remove '" + lock + "'"));
    CHECK(read_bytes(lock) == text);
    // dsl run says so before it trains, and leaves the lock as it is.
    const Result r = run_dsl(common + "--steps 1 --save " + (dir / "ck"));
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind("error: ", 0) == 0);
    CHECK(r.err.find("another-node") != std::string::npos);
    CHECK(r.out.find("step") == std::string::npos);
    CHECK(read_bytes(lock) == text);
    CHECK_FALSE(fs::exists(dir.path / "ck"));
    // One of this machine's, of a process that ended without letting it go, is taken.
    write_bytes(lock, "process 999999999 on host '" + this_host() + "'\n");
    {
        auto held = lock_checkpoint_folder(dir / "ck", error);
        INFO(error);
        CHECK(held);
        CHECK_THAT(read_bytes(lock), Catch::Contains(std::to_string(::getpid())));
    }
    CHECK_FALSE(fs::exists(lock));  // let go
}

TEST_CASE("run --keep 3 over 10 saves leaves the 3 newest, each loadable, and --load falls back past damage",
          "[cli][run]") {
    TempDir dir;
    const std::string ck = dir / "ck";
    Result r = run_dsl(common + "--steps 10 --save-every 1 --keep 3 --save " + ck + " --log " + (dir / "whole.jsonl"));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(names_in(ck) == std::vector<std::string>{"latest", "step-00000008", "step-00000009", "step-00000010"});
    for (const char* step : {"8", "9", "10"}) {
        const std::string folder = ck + "/step-000000" + (std::string(step).size() == 1 ? "0" : "") + step;
        const Result e = run_dsl("eval samples/mesh_tiny.net --samples 2 --batch 2 --json --load " + folder);
        INFO(e.err);
        CHECK(e.exit_code == 0);
        CHECK(nlohmann::json::parse(e.out)["checkpoint"] == folder);
    }
    // The step-8 checkpoint resumes exactly: as the run that never stopped.
    r = run_dsl(common + "--steps 2 --load " + ck + "/step-00000008 --log " + (dir / "rest.jsonl"));
    REQUIRE(r.exit_code == 0);
    const auto whole = logged_losses(dir / "whole.jsonl"), rest = logged_losses(dir / "rest.jsonl");
    REQUIRE(rest.size() == 2);
    CHECK(rest[0] == whole[8]);
    CHECK(rest[1] == whole[9]);

    // The newest damaged: --load takes step 9, and says so once.
    fs::remove(fs::path(ck) / "step-00000010" / "manifest.json");
    r = run_dsl(common + "--steps 1 --load " + ck + " --log " + (dir / "after9.jsonl"));
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.rfind("note: '" + ck + "/latest' names 'step-00000010', which is damaged", 0) == 0);
    CHECK(r.err.find("loading '" + ck + "/step-00000009', the newest whole checkpoint") != std::string::npos);
    CHECK(logged_losses(dir / "after9.jsonl") == std::vector<double>{whole[9]});
    // dsl export takes the same forms.
    r = run_dsl("export samples/mesh_tiny.net --load " + ck + " -o " + (dir / "m.npz"));
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("the newest whole checkpoint") != std::string::npos);
    CHECK(r.out.find("at step 9") != std::string::npos);
}

TEST_CASE("run --save and --load refuse an empty folder name", "[cli][run]") {
    for (const char* args : {"--save ''", "--load ''", "--save '' --save-every 1"}) {
        const Result r = run_dsl(common + "--steps 1 " + args);
        INFO(args << "\n" << r.err);
        CHECK(r.exit_code == 2);
        CHECK(r.err.find("empty name") != std::string::npos);
        CHECK(r.out.find("step") == std::string::npos);
    }
    const Result e = run_dsl("eval samples/mesh_tiny.net --samples 2 --load ''");
    CHECK(e.exit_code == 2);
}

TEST_CASE("every file a command writes refuses an empty name, rather than write none", "[cli]") {
    for (const std::string& words :
         {common + "--steps 1 --log ''", common + "--steps 1 --trace ''",
          std::string("explain samples/mesh_tiny.net samples/mesh_tiny_serial_1.sched --trace ''"),
          std::string("schedule samples/mesh_tiny.net --procs 2 -o ''"),
          std::string("calibrate samples/mesh_tiny.net -o ''"),
          std::string("export samples/mesh_tiny.net --load ck -o ''"),
          std::string("predict samples/mesh_tiny.net --load ck --output ''")}) {
        const Result r = run_dsl(words);
        INFO(words << "\n" << r.out << r.err);
        CHECK(r.exit_code == 2);
        CHECK(r.err.find("an empty name names no file") != std::string::npos);
        CHECK(r.out.find("step") == std::string::npos);
    }
}

TEST_CASE(
    "run: a save killed at each of its steps, on a file system without RENAME_EXCHANGE, loses no whole "
    "checkpoint",
    "[cli][run]") {
    TempDir dir;
    const std::string ck = dir / "ck";
    REQUIRE(run_dsl(common + "--steps 2 --save-every 1 --save " + ck).exit_code == 0);
    const std::string env = fixture_local() + " LD_PRELOAD='" + DSL_NO_RENAME_EXCHANGE + "'";
    std::string error, note;
    int killed = 0;
    for (int k = 1; k < 200; ++k) {
        const std::int64_t newest = whole_steps(ck).back();
        // A resumed run of one step that saves (--keep 1: it also drops the older one), killed at its k-th step.
        const Result r = run_dsl(common + "--steps 1 --keep 1 --load " + ck + " --save " + ck,
                                 env + " DSL_TEST_KILL_AT=" + std::to_string(k));
        INFO("killed at step " << k << " of the save\n" << r.out << r.err);
        if (r.exit_code == 0) break;                                   // past its last step: the save went through
        REQUIRE((r.exit_code == 128 + SIGKILL || r.exit_code == -1));  // through sh, or not
        ++killed;
        // What --load takes is whole, and as new as the newest whole one was: none was lost.
        const auto loaded = load_checkpoint(ck, error, &note);
        INFO(error);
        REQUIRE(loaded);
        CHECK(step_of(loaded) >= newest);
        CHECK(whole_steps(ck).back() >= newest);
    }
    CHECK(killed >= 8);  // the folder, its files, its move into place, `latest`, the older one dropped
    // Whatever was killed, the series resumes as the run that never stopped.
    const auto at = load_checkpoint(ck, error);
    REQUIRE(at);
    const std::int64_t step = step_of(at);
    Result r = run_dsl(common + "--steps " + std::to_string(step + 1) + " --log " + (dir / "whole.jsonl"));
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + "--steps 1 --load " + ck + " --save " + ck + " --log " + (dir / "rest.jsonl"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(logged_losses(dir / "rest.jsonl") == std::vector<double>{logged_losses(dir / "whole.jsonl").back()});
    // And the debris of the killed saves is gone: only checkpoints and `latest` are left in the series.
    for (const std::string& name : names_in(ck)) {
        INFO(name);
        CHECK((name == "latest" || name.rfind("step-", 0) == 0));
    }
}
