// What dsl writes, when writing fails or a process is killed: every output is whole or absent, an earlier
// one stays as it was, a failed write is an error that names the file, and a checkpoint folder has one
// writer at a time. Full disks are met with a file size limit (RLIMIT_FSIZE, which needs no privilege).
#include "background_command.hpp"
#include "hdf5_files.hpp"
#include "run_dsl.hpp"
#include "temp_files.hpp"

#include <dsl/base/whole_file.hpp>

#include <hdf5.h>
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

namespace {

using dsl::test::read_bytes;
using dsl::test::TempDir;
using dsl::test::write_bytes;

// `dsl ARGS` from the repository root with regular files limited to `kib` KiB (0: none may grow), as a full
// disk would have it; its standard output and error go through pipes, which the limit leaves alone.
Result run_limited(int kib, const std::string& args) {
    TempDir dir;
    const std::string script = "cd '" + source_dir() + "' && { ( trap '' XFSZ; ulimit -f " + std::to_string(kib) +
                               "; NO_COLOR=1 " + fixture_local() + " exec timeout -s KILL 120 '" + dsl_binary() + "' " +
                               args + " ) 2>&1 1>&3 | cat >'" + (dir / "err") + "'; echo ${PIPESTATUS[0]} >'" +
                               (dir / "status") + "'; } 3>&1 | cat >'" + (dir / "out") + "'";
    write_bytes(dir / "script", script);
    std::system(("/bin/bash '" + (dir / "script") + "'").c_str());
    return Result{std::atoi(read_bytes(dir / "status").c_str()), read_bytes(dir / "out"), read_bytes(dir / "err")};
}

// The names in `dir` that a write left behind under a temporary name.
std::vector<std::string> debris(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string f = e.path().filename().string();
        if (f.find(".tmp-") != std::string::npos) out.push_back(f);
    }
    return out;
}

// The links of an HDF5 file's root group.
std::vector<std::string> h5_links(const std::string& path) {
    std::vector<std::string> names;
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(f >= 0);
    auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
    };
    H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names);
    H5Fclose(f);
    return names;
}

std::string h5_bytes(const std::string& path, const std::string& set) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(f >= 0);
    const hid_t d = H5Dopen2(f, set.c_str(), H5P_DEFAULT);
    REQUIRE(d >= 0);
    const hid_t space = H5Dget_space(d);
    const auto n = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space));
    std::string bytes(n * 4, '\0');
    REQUIRE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0);
    H5Sclose(space);
    H5Dclose(d);
    H5Fclose(f);
    return bytes;
}

// Every file of `dir` with its size and modification time: what a write changes.
std::map<std::string, std::pair<std::uintmax_t, std::int64_t>> snapshot(const std::string& dir) {
    std::map<std::string, std::pair<std::uintmax_t, std::int64_t>> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        struct stat st {};
        if (::stat(e.path().c_str(), &st) != 0) continue;
        out[e.path().filename().string()] = {static_cast<std::uintmax_t>(st.st_size),
                                             st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
    }
    return out;
}

}  // namespace

TEST_CASE("a failed write is an error that names the file, and what it replaces stays as it was", "[cli]") {
    TempDir dir;
    const Result saved = run_dsl("run samples/mesh_tiny.net --batch 2 --steps 1 --save " + (dir / "ck"));
    REQUIRE(saved.exit_code == 0);
    struct Case {
        std::string args, file;
        bool earlier;  // written first without the limit, to be kept as it is
    };
    const std::vector<Case> cases{
        {"run samples/mesh_tiny.net --batch 2 --steps 3 --log " + (dir / "l.jsonl"), "--log '" + (dir / "l.jsonl"),
         false},
        {"run samples/mesh_tiny.net --batch 2 --steps 2 --trace " + (dir / "t.json"), "'" + (dir / "t.json"), true},
        {"schedule samples/mesh_tiny.net --procs 2 -o " + (dir / "s.sched"), "'" + (dir / "s.sched"), true},
        {"export samples/mesh_tiny.net --load " + (dir / "ck") + " --force -o " + (dir / "m.pt"), "'" + (dir / "m.pt"),
         true},
        {"predict samples/mesh_tiny.net --batch 2 --samples 4 --load " + (dir / "ck") + " --force --output " +
             (dir / "p.npy"),
         "'" + (dir / "p.npy"), true},
    };
    for (const Case& c : cases) {
        INFO(c.args);
        std::string before;
        if (c.earlier) {
            const Result first = run_dsl(c.args);
            REQUIRE(first.exit_code == 0);
            before = read_bytes(c.file.substr(c.file.find('\'') + 1));
            REQUIRE_FALSE(before.empty());
        }
        const Result r = run_limited(0, c.args);
        INFO(r.out << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(c.file + "': File too large") != std::string::npos);
        if (c.earlier) CHECK(read_bytes(c.file.substr(c.file.find('\'') + 1)) == before);
    }
    CHECK(debris(dir.path.string()).empty());
    // Data on the standard output that does not reach it.
    const int status = std::system(("cd '" + source_dir() + "' && '" + dsl_binary() +
                                    "' print samples/mesh_tiny.net >/dev/full 2>'" + (dir / "err") + "'")
                                       .c_str());
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(read_bytes(dir / "err") == "error: cannot write the standard output: No space left on device\n");
}

TEST_CASE("predict with a process killed midway leaves the earlier output or none", "[cli][mpi]") {
    TempDir dir;
    const std::string out = dir / "out";
    fs::create_directories(out);
    const Result saved = run_dsl("run samples/mesh_tiny.net --batch 2 --steps 1 --save " + (dir / "ck"));
    REQUIRE(saved.exit_code == 0);
    const std::string predict = "predict samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --batch 2 --load " +
                                (dir / "ck") + " --output ",
                      many = " --samples 20000", few = " --samples 6";
    // The earlier outputs: a .npy, an HDF5 file with the data set, and one with another data set beside it.
    const Result earlier = run_dsl(predict + out + "/e.npy" + few);
    REQUIRE(earlier.exit_code == 0);
    dsl::test::write_h5(out + "/e.h5", "/pred", {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}, H5T_NATIVE_FLOAT,
                        H5T_IEEE_F32LE, false);
    dsl::test::write_h5(out + "/beside.h5", "/other", {2}, std::vector<float>{7, 8}, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE,
                        false);
    const std::string npy_before = read_bytes(out + "/e.npy"), h5_before = h5_bytes(out + "/e.h5", "/pred"),
                      other = h5_bytes(out + "/beside.h5", "/other");
    struct Case {
        std::string output;
        bool force;
    };
    for (const Case& c : std::vector<Case>{{"/n.npy", false},
                                           {"/e.npy", true},
                                           {"/n.h5:/pred", false},
                                           {"/e.h5:/pred", true},
                                           {"/beside.h5:/pred", false}}) {
        INFO(c.output);
        const auto before = snapshot(out);
        Background run(predict + out + c.output + many + (c.force ? " --force" : ""), dir / "log");
        // Rank 1 is killed once the output is being written (anything in its folder changed).
        pid_t victim = 0;
        for (int i = 0; i < 24000 && run.running(); ++i) {
            if (snapshot(out) != before && (victim = run.process(1)) != 0) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        if (victim == 0) {
            const int status = run.end();
            FAIL("no process 1 to kill once the output was begun; the command ended with " << status << ":\n"
                                                                                           << read_bytes(dir / "log"));
        }
        ::kill(victim, SIGKILL);
        const int status = run.end();
        INFO(read_bytes(dir / "log"));
        CHECK(status == 4);
        CHECK_FALSE(fs::exists(out + "/n.npy"));
        CHECK_FALSE(fs::exists(out + "/n.h5"));
        CHECK(read_bytes(out + "/e.npy") == npy_before);
        CHECK(h5_bytes(out + "/e.h5", "/pred") == h5_before);
        // The data set beside is untouched, and nothing is under the name (a temporary link may be).
        const auto links = h5_links(out + "/beside.h5");
        CHECK(std::count(links.begin(), links.end(), "pred") == 0);
        CHECK(h5_bytes(out + "/beside.h5", "/other") == other);
    }
    // The next writes remove what the killed ones left: files beside, links in the file.
    for (const char* o : {"/n.npy", "/e.npy", "/n.h5:/pred", "/e.h5:/pred", "/beside.h5:/pred"}) {
        const Result r = run_dsl(predict + out + o + few + " --force");
        INFO(o << "\n" << r.err);
        CHECK(r.exit_code == 0);
    }
    CHECK(debris(out).empty());
    CHECK(h5_links(out + "/beside.h5") == std::vector<std::string>{"other", "pred"});
    CHECK(h5_links(out + "/e.h5") == std::vector<std::string>{"pred"});
    CHECK(read_bytes(out + "/e.npy") == npy_before);  // the same prediction, whole
}

TEST_CASE("two runs saving into one folder: the second refuses at once, naming the first", "[cli][run]") {
    TempDir dir;
    const std::string common = "run samples/mesh_tiny.net --batch 2 --save " + (dir / "ck");
    Background first(common + " --steps 1000000 --log " + (dir / "first.jsonl"), dir / "first");
    // It holds the folder once it trains (its log has a line).
    for (int i = 0; i < 24000 && first.running() && read_bytes(dir / "first.jsonl").empty(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const pid_t holder = first.process(-1);
    REQUIRE(holder != 0);
    const Result second = run_dsl(common + " --steps 1");
    INFO(second.err);
    CHECK(second.exit_code == 1);
    CHECK(second.err.find("error: '" + (dir / "ck") + "' is being saved into by another run (process " +
                          std::to_string(holder) + " on host '") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path / "ck"));
    // Once the first is killed, the folder is free.
    ::kill(holder, SIGKILL);
    first.end();
    const Result third = run_dsl(common + " --steps 1");
    INFO(third.err);
    CHECK(third.exit_code == 0);
    CHECK_FALSE(fs::exists(dir.path / ".ck.lock"));
}

TEST_CASE("run says once that it removed the folder a killed save left", "[cli][run]") {
    TempDir dir;
    // The first save of a series killed after marking its temporary folder, by a process of this machine
    // that has ended.
    const std::string debris = dir / ("ck/.step-00000002.tmp-999999999-" + dsl::this_host());
    fs::create_directories(debris);
    write_bytes(debris + "/.dsl-partial",
                "a dsl checkpoint being written by process 999999999 on host '" + dsl::this_host() + "'\n");
    write_bytes(debris + "/half.npy", "\x93NUMPY partial");
    const Result r = run_dsl("run samples/mesh_tiny.net --batch 2 --steps 4 --save-every 2 --save " + (dir / "ck"));
    INFO(r.err);
    CHECK(r.exit_code == 0);
    const std::string note = "note: removed '" + debris + "', left by a save that was killed\n";
    CHECK(r.err.find(note) != std::string::npos);
    CHECK(r.err.find(note) == r.err.rfind(note));
    CHECK_FALSE(fs::exists(debris));
}
