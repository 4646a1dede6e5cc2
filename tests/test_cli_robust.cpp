// The command where a user's setup is unusual: inputs that are not regular files, a process of a run killed
// by a signal, runs under an external launcher (mpirun, over TCP as between nodes), options given wrong.
#include "background_command.hpp"
#include "hdf5_files.hpp"
#include "train_runs.hpp"

#include <dsl/backend/npy.hpp>
#include <dsl/backend/tensor.hpp>

#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <thread>

namespace {

// A folder of this test's, removed at the end.
struct Scratch {
    fs::path path;
    explicit Scratch(const std::string& name)
        : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~Scratch() { fs::remove_all(path); }
    std::string operator/(const std::string& file) const { return (path / file).string(); }
};

// `prefix` (environment settings, a launcher) before the dsl binary; killed after `seconds`, so that a run
// that would wait forever fails the test instead (exit code 137).
Result run_command(const std::string& prefix, const std::string& args, int seconds = 120) {
    const fs::path dir = fs::temp_directory_path() / ("dsl_cmd_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string cmd = "cd '" + source_dir() + "' && NO_COLOR=1 " + fixture_local() + " timeout -s KILL " +
                            std::to_string(seconds) + " " + prefix + " '" + dsl_binary() + "' " + args + " >'" +
                            (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
    const int status = std::system(cmd.c_str());
    Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(dir / "out"), read(dir / "err")};
    fs::remove_all(dir);
    return r;
}

std::string mpirun(int procs) {
    return "mpirun -np " + std::to_string(procs) + " --oversubscribe" +
           (::geteuid() == 0 ? " --allow-run-as-root" : "");
}

std::vector<double> losses_in(const std::string& log) {
    std::vector<double> out;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    return out;
}

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A .npy file (format 1.0) holding `data` as the dtype `descr` with `shape` (a Python tuple's text).
std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    dict.append(64 - (10 + dict.size() + 1) % 64, ' ');
    dict += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(dict.size() & 0xff);
    out += static_cast<char>(dict.size() >> 8);
    return out + dict + data;
}

// `dsl run` of the tiny network on 2 processes (started by dsl) for a long time, in the background, in a
// process group of its own; its processes are found by a mark in their environment (mpirun passes it on).
class BackgroundRun {
public:
    explicit BackgroundRun(const Scratch& dir) : dir_(dir) {
        const std::string cmd = "cd '" + source_dir() + "' && NO_COLOR=1 " + mark_ + " '" + dsl_binary() +
                                "' run samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --steps 100000 --log '" +
                                (dir / "log.jsonl") + "' >'" + (dir / "out") + "' 2>'" + (dir / "err") + "'";
        shell_ = start_group(cmd);
    }
    ~BackgroundRun() {
        if (shell_ > 0) end(0);
        for (const auto& [rank, pid] : processes()) ::kill(pid, SIGKILL);  // any left behind (mpirun, say)
    }

    // Every process of the run: rank (-1 for dsl itself, -2 for mpirun) and pid.
    std::vector<std::pair<int, pid_t>> processes() const {
        std::vector<std::pair<int, pid_t>> out;
        for (const Marked& m : marked_processes(mark_))
            if (m.exe == "dsl" || m.exe.rfind("orterun", 0) == 0 || m.exe.rfind("mpirun", 0) == 0)
                out.emplace_back(m.rank, m.pid);
        return out;
    }

    // The process of `rank` once the run trains (its log has a step), or 0 after two minutes.
    pid_t training_process(int rank) const {
        for (const auto start = clock::now(); clock::now() - start < std::chrono::seconds(120);) {
            if (fs::exists(dir_.path / "log.jsonl") && fs::file_size(dir_.path / "log.jsonl") > 0)
                for (const auto& [r, pid] : processes())
                    if (r == rank) return pid;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return 0;
    }

    // Waits up to `seconds` for the run to end (then kills it): the shell's status, and the seconds waited.
    std::pair<int, double> end(int seconds) {
        int status = 0;
        const auto start = clock::now();
        bool ended = false;
        while (!ended && clock::now() - start < std::chrono::seconds(seconds)) {
            ended = ::waitpid(shell_, &status, WNOHANG) == shell_;
            if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        const double waited = std::chrono::duration<double>(clock::now() - start).count();
        if (!ended) {
            for (const auto& [rank, pid] : processes()) ::kill(pid, SIGKILL);
            ::kill(-shell_, SIGKILL);
            ::waitpid(shell_, &status, 0);
            status = -1;
        }
        shell_ = 0;
        return {status, waited};
    }

private:
    using clock = std::chrono::steady_clock;
    const Scratch& dir_;
    std::string mark_ = "DSL_TEST_RUN=" + std::to_string(::getpid());
    pid_t shell_ = 0;
};

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

TEST_CASE("inputs that are not regular files are refused at once, never waited on", "[cli]") {
    Scratch dir("dsl_fifo");
    for (const char* name : {"f.net", "f.sched", "f.platform", "f.npy"})
        REQUIRE(::mkfifo((dir / name).c_str(), 0600) == 0);
    // A checkpoint with a FIFO in place of its manifest, and one with a FIFO in place of a tensor.
    const Result saved = run_dsl("run samples/mesh_tiny.net --batch 2 --steps 1 --save " + (dir / "ck"));
    INFO(saved.err);
    REQUIRE(saved.exit_code == 0);
    fs::copy(dir.path / "ck" / "step-00000001", dir.path / "ck_manifest");
    fs::remove(dir.path / "ck_manifest" / "manifest.json");
    REQUIRE(::mkfifo((dir / "ck_manifest/manifest.json").c_str(), 0600) == 0);
    fs::copy(dir.path / "ck" / "step-00000001", dir.path / "ck_tensor");
    fs::remove(dir.path / "ck_tensor" / "block1.0.conv.weight.npy");
    REQUIRE(::mkfifo((dir / "ck_tensor/block1.0.conv.weight.npy").c_str(), 0600) == 0);

    write_file(dir / "fifo_platform.sched",
               "procs = 1\nplatform = \"" + (dir / "f.platform") + "\"\n\ndefault N=1 overlap=off\n");
    const std::string fifo = "it is a FIFO (named pipe), not a regular file";
    struct Case {
        std::string args, message;
    };
    const std::vector<Case> cases{
        {"check " + (dir / "f.net"), fifo},
        {"run " + (dir / "f.net") + " --steps 1", fifo},
        {"check samples/mesh_tiny.net " + (dir / "f.sched"), fifo},
        {"run samples/mesh_tiny.net " + (dir / "f.sched") + " --steps 1", fifo},
        {"print " + (dir / "f.platform"), fifo},
        {"explain samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --platform " + (dir / "f.platform"), fifo},
        {"explain samples/mesh_tiny.net " + (dir / "fifo_platform.sched"), fifo},
        {"run samples/mesh_tiny.net --steps 1 --inputs " + (dir / "f.npy") + " --labels " + (dir / "f.npy"), fifo},
        {"run samples/mesh_tiny.net --batch 2 --steps 1 --load " + (dir / "ck_manifest"), fifo},
        {"run samples/mesh_tiny.net --batch 2 --steps 1 --load " + (dir / "ck_tensor"), fifo},
        {"check /dev/zero", "it is a device, not a regular file"},
        {"check samples", "it is a directory, not a regular file"},
    };
    for (const Case& c : cases) {
        const Result r = run_command("", c.args, 60);
        INFO(c.args << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(c.message) != std::string::npos);
    }
}

TEST_CASE("outputs that are not regular files are refused at once, and a file beside an output is kept", "[cli]") {
    Scratch dir("dsl_fifo_out");
    REQUIRE(::mkfifo((dir / "out").c_str(), 0600) == 0);
    for (const std::string& args : {"run samples/mesh_tiny.net --steps 1 --log " + (dir / "out"),
                                    "schedule samples/mesh_tiny.net --procs 2 -o " + (dir / "out"),
                                    "calibrate samples/mesh_tiny.net --procs 1 -o " + (dir / "out"),
                                    "export samples/mesh_tiny.net --load " + (dir / "ck") + " -o " + (dir / "out") +
                                        " --force"}) {
        const Result r = run_command("", args, 60);
        INFO(args << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find("not a regular file") != std::string::npos);
    }
    // dsl schedule writes its file through a temporary one beside it, never through a file of the user's.
    write_file(dir / "s.sched.tmp", "mine\n");
    const Result r = run_command("", "schedule samples/mesh_tiny.net --procs 2 -o " + (dir / "s.sched"), 60);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(read(dir / "s.sched.tmp") == "mine\n");
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"out", "s.sched", "s.sched.tmp"});
}

TEST_CASE("a process of a run killed by SIGKILL is named, with its host and the signal", "[cli][run][mpi]") {
    Scratch dir("dsl_sigkill");
    BackgroundRun run(dir);
    const pid_t victim = run.training_process(1);
    CHECK(victim > 0);
    if (victim > 0) ::kill(victim, SIGKILL);
    const auto [status, seconds] = run.end(30);
    const std::string err = read(dir.path / "err");
    INFO(err);
    CHECK(seconds < 10.0);  // the other process ends too (about 2 s here)
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 4);
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    CHECK(err.find(std::string("error: process 1 of 2 (on host ") + host +
                   ") was killed by signal 9 (SIGKILL), perhaps by the out-of-memory killer") != std::string::npos);
    CHECK(err.find("mpirun") == std::string::npos);  // its notice is said in our line, not repeated
    // One line besides the run's notes (the fast paths it runs without, each indented beneath).
    std::istringstream lines(err);
    int others = 0;
    for (std::string line; std::getline(lines, line);)
        others += line.rfind("note: ", 0) != 0 && line.rfind("  ", 0) != 0;
    CHECK(others == 1);
}

TEST_CASE("SIGINT to dsl run ends mpirun and every process with it, SIGTERM stops them at a step", "[cli][run][mpi]") {
    // SIGINT (Ctrl-C) ends the run at once; SIGTERM (a job's time limit) stops every process at the end of a
    // step, with exit code 5 (test_cli_preempt.cpp checks what it saves).
    const int signal = GENERATE(SIGINT, SIGTERM);
    INFO(::sigabbrev_np(signal));
    Scratch dir("dsl_sigterm");
    BackgroundRun run(dir);
    REQUIRE(run.training_process(1) > 0);
    const pid_t dsl = run.training_process(-1);
    REQUIRE(dsl > 0);
    ::kill(dsl, signal);
    const auto [status, seconds] = run.end(30);
    INFO(read(dir.path / "err"));
    CHECK(seconds < 10.0);
    CHECK(run.processes().empty());  // none is left running
    // The shell that started dsl saw it end by SIGINT (128 + 2), as a program without children would.
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == (signal == SIGINT ? 128 + SIGINT : 5));
}

TEST_CASE("an error on one process of a run is said once, without mpirun's notices", "[cli][run][mpi]") {
    // Every process refuses the inputs (their own message); only the first says so.
    const Result r = run_command("",
                                 "run samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --steps 1 --inputs "
                                 "no_such.npy --labels no_such.npy");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("error: no_such.npy: cannot open") != std::string::npos);
    CHECK(r.err.find("----") == std::string::npos);
    CHECK(r.err.find("mpirun") == std::string::npos);
}

TEST_CASE("under an external mpirun, --auto-schedule plans for the processes it started", "[cli][run][mpi]") {
    Scratch dir("dsl_auto_np");
    const Result r = run_command(mpirun(2),
                                 "run samples/mesh_tiny.net --auto-schedule --batch 4 --steps 2 --seed 5 "
                                 "--log " +
                                     (dir / "auto.jsonl"));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("auto-schedule for 2 processes") != std::string::npos);
    CHECK(r.out.find("training samples/mesh_tiny.net on 2 processes") != std::string::npos);
    // The schedule it chose, printed as .sched text: saved, it checks and trains the same.
    const auto begin = r.out.find("\n# ");
    const auto end = r.out.find("\ntraining ");
    REQUIRE(begin != std::string::npos);
    REQUIRE(end != std::string::npos);
    const std::string text = r.out.substr(begin + 1, end - begin);
    CHECK(text.find("procs = 2\n") != std::string::npos);
    CHECK(text.find("batch = 4\n") != std::string::npos);
    write_file(dir / "chosen.sched", text);
    const Result check = run_dsl("check samples/mesh_tiny.net " + (dir / "chosen.sched"));
    INFO(text << check.err);
    CHECK(check.exit_code == 0);
    const Result again = run_dsl("run samples/mesh_tiny.net " + (dir / "chosen.sched") + " --steps 2 --seed 5 --log " +
                                 (dir / "again.jsonl"));
    INFO(again.err);
    REQUIRE(again.exit_code == 0);
    const auto a = losses_in(dir / "auto.jsonl"), b = losses_in(dir / "again.jsonl");
    REQUIRE(a.size() == 2);
    REQUIRE(b.size() == 2);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i] == Approx(a[i]).epsilon(1e-6));
    // A schedule that leaves 'procs' open runs on the processes the launcher started.
    write_file(dir / "open.sched", "batch = 4\n\ndefault N=2 overlap=off\n");
    const Result open = run_command(mpirun(2), "run samples/mesh_tiny.net " + (dir / "open.sched") + " --steps 1");
    INFO(open.err);
    CHECK(open.exit_code == 0);
    CHECK(open.out.find("training samples/mesh_tiny.net on 2 processes") != std::string::npos);
}

TEST_CASE("under an external mpirun, each process takes its share of the node's cores", "[cli][run][mpi]") {
    // Unbound (as `--bind-to none`, or a launcher that binds nothing): the cores divided among the processes,
    // no more than the cores the processes may run on.
    cpu_set_t mask;
    CPU_ZERO(&mask);
    REQUIRE(::sched_getaffinity(0, sizeof mask, &mask) == 0);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int share = std::max(1, std::min(cores / 2, CPU_COUNT(&mask)));
    const std::string args = "run samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --steps 1";
    const Result r = run_command("env -u OMP_NUM_THREADS " + mpirun(2) + " --bind-to none", args);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("on 2 processes (" + std::to_string(share) + (share == 1 ? " thread" : " threads") + " each)") !=
          std::string::npos);
    // OMP_NUM_THREADS, where the user sets it, is kept.
    const Result set = run_command("env OMP_NUM_THREADS=3 " + mpirun(2) + " -x OMP_NUM_THREADS --bind-to none", args);
    INFO(set.out << set.err);
    REQUIRE(set.exit_code == 0);
    CHECK(set.out.find("on 2 processes (3 threads each)") != std::string::npos);
}

TEST_CASE("over Open MPI's TCP transport alone, as between nodes, a distributed run trains as one process",
          "[distributed][mpi]") {
    Scratch dir("dsl_tcp");
    const Run one = train("samples/mesh_tiny.net", "", 4);
    const Result r = run_command(mpirun(2) + " --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo",
                                 "run samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --steps 3 --seed 7 "
                                 "--batch 4 --log " +
                                     (dir / "log.jsonl") + " --save " + (dir / "ckpt"));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const auto losses = losses_in(dir / "log.jsonl");
    REQUIRE(losses.size() == one.losses.size());
    for (std::size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == Approx(one.losses[i]).epsilon(1e-4));
    std::string error;
    const auto ckpt = load_checkpoint(dir / "ckpt", error);
    REQUIRE(ckpt);
    check_same_state(*ckpt, one.checkpoint, 1e-4);
}

TEST_CASE("whole-number options say what is wrong in the user's terms", "[cli]") {
    struct Case {
        std::string args, message;
    };
    const std::vector<Case> cases{
        {"run samples/mesh_tiny.net --steps 0", "--steps: 0 is not positive"},
        {"run samples/mesh_tiny.net --batch -2", "--batch: -2 is not positive"},
        {"run samples/mesh_tiny.net --procs 1,2", "--procs: '1,2' is not a whole number"},
        {"run samples/mesh_tiny.net --procs 0", "--procs: 0 is not positive"},
        {"run samples/mesh_tiny.net --seed -1", "--seed: -1 is not 0 or more"},
        {"run samples/mesh_tiny.net --save ck --save-every 0", "--save-every: 0 is not positive"},
        {"run samples/mesh_tiny.net --steps 1e3", "--steps: '1e3' is not a whole number"},
        {"check samples/mesh_tiny.net --batch 0", "--batch: 0 is not positive"},
        {"schedule samples/mesh_tiny.net --procs 1,2", "--procs: '1,2' is not a whole number"},
        {"explain samples/mesh_tiny.net --procs 0", "--procs: 0 is not positive"},
        {"compare samples/mesh_tiny.net a.sched b.sched --steps 0", "--steps: 0 is not positive"},
        {"calibrate samples/mesh_tiny.net -o x.platform --procs 0", "--procs: 0 is not positive"},
        {"calibrate samples/mesh_tiny.net -o x.platform --reps 0", "--reps: 0 is not positive"},
        {"calibrate samples/mesh_tiny.net -o x.platform --warmup -1", "--warmup: -1 is not 0 or more"},
        {"calibrate samples/mesh_tiny.net -o x.platform --warmup 3000000000", "--warmup: 3000000000 is too large"},
        {"calibrate samples/mesh_tiny.net -o x.platform --max-message 0", "--max-message: 0 is not positive"},
    };
    for (const Case& c : cases) {
        const Result r = run_dsl(c.args);
        INFO(c.args << "\n" << r.err);
        CHECK(r.exit_code == 2);
        CHECK(r.err.rfind("error: " + c.message, 0) == 0);
        CHECK(r.err.find("not in range") == std::string::npos);
    }
    const Result help = run_dsl("calibrate --help");
    CHECK(help.out.find("{false}") == std::string::npos);
    CHECK(help.out.find("--kernels-only ") != std::string::npos);
}

TEST_CASE("an unknown verb is named, with the verbs there are", "[cli]") {
    const Result r = run_dsl("bogus x.net");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("error: unknown verb 'bogus'; the verbs are check, print, run,") == 0);
    const Result near = run_dsl("chek x.net");
    CHECK(near.exit_code == 2);
    CHECK(near.err.find("unknown verb 'chek' (did you mean 'check'?)") != std::string::npos);
    // --version, as the README says.
    const Result version = run_dsl("--version");
    CHECK(version.exit_code == 0);
    CHECK(version.out.rfind("dsl ", 0) == 0);
    CHECK(read(fs::path(source_dir()) / "README.md").find("`dsl --version`") != std::string::npos);
}

TEST_CASE("colour is off only when NO_COLOR is set and not empty", "[cli]") {
    // On a terminal (script gives the command one), a diagnostic is coloured unless NO_COLOR says otherwise.
    REQUIRE(std::system("command -v script >/dev/null") == 0);  // util-linux's
    auto on_terminal = [](const std::string& env) {
        const fs::path out = fs::temp_directory_path() / ("dsl_color_" + std::to_string(::getpid()));
        const std::string cmd = "cd '" + source_dir() + "' && script -qec \"env " + env + " '" + dsl_binary() +
                                "' check tests/diag/fail_add_shapes.net\" /dev/null >'" + out.string() + "' 2>&1";
        REQUIRE(std::system(cmd.c_str()) != -1);
        const std::string text = read(out);
        fs::remove(out);
        return text;
    };
    const std::string unset = on_terminal("-u NO_COLOR"), empty = on_terminal("NO_COLOR="),
                      set = on_terminal("NO_COLOR=1");
    INFO(unset << empty << set);
    REQUIRE(unset.find("cannot add tensors") != std::string::npos);
    CHECK(unset.find("\x1b[") != std::string::npos);
    CHECK(empty.find("\x1b[") != std::string::npos);
    CHECK(set.find("cannot add tensors") != std::string::npos);
    CHECK(set.find("\x1b[") == std::string::npos);
}

TEST_CASE("npy: float16 inputs are converted to float exactly", "[npy]") {
    Scratch dir("dsl_f2");
    // 1, -2, the largest half, the smallest subnormal, 1/3 rounded, -0, +inf, 0.5.
    const std::vector<std::uint16_t> halves{0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555, 0x8000, 0x7c00, 0x3800};
    const std::vector<float> floats{
        1.0f, -2.0f, 65504.0f, 5.9604644775390625e-8f, 0.333251953125f, -0.0f, std::numeric_limits<float>::infinity(),
        0.5f};
    write_file(dir / "h.npy", npy("<f2", "(1, 2, 2, 2)", bytes_of(halves)));
    std::string error;
    const auto file = dsl::backend::NpyFile::open(dir / "h.npy", error);
    INFO(error);
    REQUIRE(file);
    dsl::backend::Tensor got(dsl::Dims{1, 2, {2, 2}});
    got.fill(7.0f);
    REQUIRE(dsl::backend::copy_sample_tile(*file, 0, 0, dsl::backend::Index{0, 0}, got.interior(), error));
    for (std::size_t i = 0; i < floats.size(); ++i) {
        INFO(i);
        const float v = got.at(0, static_cast<std::int64_t>(i / 4),
                               {static_cast<std::int64_t>(i / 2 % 2), static_cast<std::int64_t>(i % 2)});
        CHECK(v == floats[i]);
        CHECK(std::signbit(v) == std::signbit(floats[i]));
        CHECK(file->at(static_cast<std::int64_t>(i)) == static_cast<double>(floats[i]));
    }
}

TEST_CASE("run trains on float16 inputs", "[cli][run]") {
    Scratch dir("dsl_f2_run");
    const std::int64_t inputs = 2 * 18 * 64 * 64;
    std::vector<std::uint16_t> x(static_cast<std::size_t>(inputs));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? 0x3c00 : i % 3 == 1 ? 0xb800 : 0x0000;  // 1, -0.5, 0
    std::vector<std::int64_t> y(2 * 8 * 8);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 2);
    write_file(dir / "x.npy", npy("<f2", "(2, 18, 64, 64)", bytes_of(x)));
    write_file(dir / "y.npy", npy("<i8", "(2, 8, 8)", bytes_of(y)));
    const Result r = run_dsl("run samples/mesh_tiny.net --batch 2 --steps 2 --inputs " + (dir / "x.npy") +
                             " --labels " + (dir / "y.npy"));
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("step     2  loss") != std::string::npos);
}

TEST_CASE("the device is --device's, else with --auto-schedule its platform's, else the CPU", "[cli][run]") {
    // --platform is the auto-scheduler's: alone it would do nothing, and says so.
    const Result alone = run_dsl("run samples/mesh_tiny.net --platform dgx_h100 --steps 1");
    CHECK(alone.exit_code == 2);
    CHECK(alone.err.find("--platform is the platform --auto-schedule plans for") != std::string::npos);
    CHECK(alone.out.find("step") == std::string::npos);
    // A schedule written for a GPU platform runs where --device says: the CPU by default.
    Scratch dir("dsl_device");
    write_file(dir / "gpu.sched", "procs = 1\nplatform = dgx_h100\n\ndefault N=1 overlap=off\n");
    const Result cpu = run_dsl("run samples/mesh_tiny.net " + (dir / "gpu.sched") + " --steps 1");
    INFO(cpu.err);
    CHECK(cpu.exit_code == 0);
    CHECK(cpu.out.find("threads") != std::string::npos);  // on the CPU
}

TEST_CASE("bad data is a one-line error before the first step, said once under mpirun", "[cli][run][hdf5]") {
    using dsl::test::write_h5;
    Scratch dir("dsl_bad_data");
    const std::string f = dir / "d.h5";
    const std::int64_t S = 4;
    std::vector<float> x(S * 3 * 66 * 70, 0.5f);
    std::vector<std::uint8_t> y(S * 33 * 35, 1);
    std::vector<std::int32_t> z{0, 1, 2, 1};
    write_h5(f, "/x", {S, 3, 66, 70}, x, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
    write_h5(f, "/y", {S, 33, 35}, y, H5T_NATIVE_UINT8, H5T_STD_U8LE);
    write_h5(f, "/z", {S}, z, H5T_NATIVE_INT32, H5T_STD_I32LE, false);
    write_h5(f, "/x_wide", {S, 3, 66, 71}, std::vector<float>(S * 3 * 66 * 71), H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
    write_h5(f, "/x_few", {2, 3, 66, 70}, std::vector<float>(2 * 3 * 66 * 70), H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
    write_h5(f, "/z_few", {2}, std::vector<std::int32_t>{0, 1}, H5T_NATIVE_INT32, H5T_STD_I32LE);
    write_h5(f, "/z_float", {S}, std::vector<float>{0, 1, 2, 1}, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
    write_h5(f, "/z_bad", {S}, std::vector<std::int32_t>{0, 1, 3, 1}, H5T_NATIVE_INT32, H5T_STD_I32LE);
    std::vector<std::uint8_t> y_bad(y);
    y_bad[2 * 33 * 35 + 100] = 7;
    write_h5(f, "/y_bad", {S, 33, 35}, y_bad, H5T_NATIVE_UINT8, H5T_STD_U8LE);
    {  // fixed-length strings: no conversion to numbers
        const hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        const hid_t type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, 4);
        const hsize_t n = S;
        const hid_t space = H5Screate_simple(1, &n, nullptr);
        const hid_t set = H5Dcreate2(file, "/z_text", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        REQUIRE(H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, "abc\0def\0ghi\0jkl") >= 0);
        H5Dclose(set), H5Sclose(space), H5Tclose(type), H5Fclose(file);
    }
    auto args = [&](const std::string& x_, const std::string& y_, const std::string& z_) {
        return "run tests/dist/modern.net --steps 1 --batch 4 --data x=" + x_ + " --data y=" + y_ + " --data z=" + z_;
    };
    const std::string X = f + ":/x", Y = f + ":/y", Z = f + ":/z";
    struct Case {
        std::string args, message;
    };
    const std::vector<Case> cases{
        {args(dir / "none.h5:/x", Y, Z), "error: " + (dir / "none.h5") + ": cannot open: no such file"},
        {args(f + ":/train/x", Y, Z), "error: " + f + ": no data set '/train/x' (it holds /x, /x_few, /x_wide, /y,"},
        {args(f, Y, Z), "error: " + f + ": name the data set in the file: " + f + ":/path/to/dataset"},
        {args(f + ":/x_wide", Y, Z),
         "error: " + f + ":/x_wide: holds [4, 3, 66, 71], but input 'x' is [N, 3, 66, 70]: expected [S, 3, 66, 70]"},
        {args(X, Y, f + ":/z_few"), "error: " + f + ":/z_few: holds [2], but label 'z' is [N] and " + f +
                                        ":/x holds 4 samples: expected [4]"},
        {args(X, Y, f + ":/z_text"), "error: " + f + ":/z_text: holds string values, which do not convert"},
        {args(X, Y, f + ":/z_float"), "error: " + f + ":/z_float: labels must have an integer type, not 'float32'"},
        {args(X, Y, f + ":/z_bad"), "error: " + f + ":/z_bad: label 3 of sample 2 is outside [0, 3)"},
        {args(X, f + ":/y_bad", Z), "error: " + f + ":/y_bad: label 7 of sample 2 is outside [0, 3)"},
        {args(f + ":/x_few", Y + "_few", Z), "error: " + f + ": no data set '/y_few'"},
        {"run tests/dist/modern.net --steps 1 --batch 4 --data x=" + f + ":/x_few --data y=" + f +
             ":/y --data z=" + f + ":/z",
         "error: " + f + ":/y: holds [4, 33, 35], but label 'y' is [N, 33, 35] and " + f + ":/x_few holds 2 samples"},
        {"run tests/dist/modern.net --steps 1 --batch 4 --data x=" + X + " --data y=" + Y,
         "error: label 'z' has no data: give --data z=FILE for each of input 'x', label 'y', label 'z'"},
        {args(X, Y, Z) + " --data w=" + X, "error: --data w=" + X + ": the network has no input or label 'w'"},
        {args(X, Y, Z) + " --data x=" + X, "error: --data x: layer 'x' is given twice"},
        {"run tests/dist/modern.net --steps 1 --data x", "error: --data 'x': give NAME=FILE"},
        {"run tests/dist/modern.net --steps 1 --inputs " + X + " --labels " + Y,
         "error: --labels stands for the network's one label, but it has 'y', 'z': give --data NAME=FILE for each"},
        {"run samples/mesh_tiny.net --steps 1 --shuffle", "error: --shuffle applies to data from files"},
        {"run tests/dist/modern.net --steps 1 --batch 8 --data x=" + X + " --data y=" + Y + " --data z=" + Z,
         "error: the data set holds 4 samples, fewer than one mini-batch of 8"},
        {args(X, Y, Z) + " --normalize file", "error: " + X + ": the data set has no attribute 'mean'"},
    };
    for (const Case& c : cases) {
        const Result r = run_dsl(c.args);
        INFO(c.args << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.rfind(c.message, 0) == 0);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
        CHECK(r.out.find("step") == std::string::npos);
    }
    // On 2 processes (which dsl starts), every process finds the same fault; the first alone says it.
    const Result r = run_command("", args(X, Y, f + ":/z_bad") + " tests/dist/modern_h2.sched");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind("error: " + f + ":/z_bad: label 3 of sample 2 is outside [0, 3)", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    // Under an external mpirun too (which adds its own notice of the exit code).
    const Result external = run_command(mpirun(2), args(X, Y, f + ":/z_bad") + " tests/dist/modern_h2.sched");
    INFO(external.err);
    CHECK(external.exit_code == 1);
    CHECK(external.err.rfind("error: " + f + ":/z_bad: label 3 of sample 2", 0) == 0);
    CHECK(external.err.find("error:", 1) == std::string::npos);
    // And the good files train.
    const Result good = run_dsl(args(X, Y, Z));
    INFO(good.err);
    CHECK(good.exit_code == 0);
}

TEST_CASE("a volume file of the wrong shape is a one-line error before the first step, said once under mpirun",
          "[cli][run][hdf5]") {
    using dsl::test::write_h5;
    Scratch dir("dsl_bad_volume");
    const std::string f = dir / "v.h5";
    const std::int64_t S = 4;
    write_h5(f, "/x", {S, 3, 17, 15, 13}, std::vector<float>(S * 3 * 17 * 15 * 13, 0.5f), H5T_NATIVE_FLOAT,
             H5T_IEEE_F32LE);
    write_h5(f, "/x_image", {S, 3, 15, 13}, std::vector<float>(S * 3 * 15 * 13), H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
    std::vector<std::uint8_t> y(S * 9 * 8 * 7, 1);
    write_h5(f, "/y", {S, 9, 8, 7}, y, H5T_NATIVE_UINT8, H5T_STD_U8LE);
    write_h5(f, "/y_image", {S, 8, 7}, std::vector<std::uint8_t>(S * 8 * 7), H5T_NATIVE_UINT8, H5T_STD_U8LE);
    y[2 * 9 * 8 * 7 + 100] = 3;
    write_h5(f, "/y_bad", {S, 9, 8, 7}, y, H5T_NATIVE_UINT8, H5T_STD_U8LE);
    std::string error;
    const std::vector<float> shallow(S * 3 * 16 * 15 * 13);
    REQUIRE(dsl::backend::write_npy(dir / "shallow.npy", {S, 3, 16, 15, 13}, shallow.data(), error));
    const std::vector<std::int32_t> labels(S * 9 * 8, 1);
    REQUIRE(dsl::backend::write_npy(dir / "labels_hw.npy", {S, 9, 8}, labels.data(), error));
    auto args = [&](const std::string& x, const std::string& y_) {
        return "run tests/dist/vol.net --steps 1 --batch 2 --data x=" + x + " --data y=" + y_;
    };
    const std::string X = f + ":/x", Y = f + ":/y";
    struct Case {
        std::string args, message;
    };
    const std::string input_x = "but input 'x' is [N, 3, 17, 15, 13]: expected [S, 3, 17, 15, 13] with S > 0",
                      label_y = "but label 'y' is [N, 9, 8, 7] and " + X + " holds 4 samples: expected [4, 9, 8, 7]";
    // An image for a volume input, a volume a plane short, an image's labels, a volume's labels without their
    // last dimension, and a class out of range.
    const std::vector<Case> cases{
        {args(f + ":/x_image", Y), "error: " + f + ":/x_image: holds [4, 3, 15, 13], " + input_x},
        {args(dir / "shallow.npy", Y), "error: " + (dir / "shallow.npy") + ": holds [4, 3, 16, 15, 13], " + input_x},
        {args(X, f + ":/y_image"), "error: " + f + ":/y_image: holds [4, 8, 7], " + label_y},
        {args(X, dir / "labels_hw.npy"), "error: " + (dir / "labels_hw.npy") + ": holds [4, 9, 8], " + label_y},
        {args(X, f + ":/y_bad"), "error: " + f + ":/y_bad: label 3 of sample 2 is outside [0, 3)"},
    };
    for (const Case& c : cases) {
        const Result r = run_dsl(c.args);
        INFO(c.args << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.rfind(c.message, 0) == 0);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
        CHECK(r.out.find("step") == std::string::npos);
    }
    // The volume a plane short in slabs of depth on 2 processes, started by dsl or by an external mpirun: the
    // first alone says it.
    for (const std::string& launcher : {std::string(), mpirun(2)}) {
        const Result r = run_command(launcher, args(dir / "shallow.npy", Y) + " tests/dist/vol_d2.sched");
        INFO(launcher << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.rfind("error: " + (dir / "shallow.npy") + ": holds [4, 3, 16, 15, 13], " + input_x, 0) == 0);
        CHECK(r.err.find("error:", 1) == std::string::npos);
        if (launcher.empty()) CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.out.find("step") == std::string::npos);
    }
    // And the good files train.
    const Result good = run_dsl(args(X, Y));
    INFO(good.err);
    CHECK(good.exit_code == 0);
}

TEST_CASE("eval and predict refuse what they cannot do before any work, in one line said once", "[cli][eval]") {
    Scratch dir("dsl_eval_errors");
    const std::string ck = dir / "ck", out = dir / "out.npy";
    REQUIRE(run_dsl("run samples/mesh_tiny.net --steps 1 --save " + ck).exit_code == 0);
    { std::ofstream(out) << "the user's"; }
    struct Case {
        std::string args, message;
    };
    const std::string load = " --load " + ck + " --samples 4";
    for (const Case& c : {
             Case{"eval samples/mesh_tiny.net --load " + ck,
                  "synthetic data (no --data) has no end: say how many samples with --samples"},
             Case{"eval samples/mesh_tiny.net --load " + (dir / "none") + " --samples 4",
                  "error: --load '" + (dir / "none") + "'"},
             Case{"eval samples/regression_tiny.net --load " + ck + " --samples 4", "does not fit the network"},
             Case{"eval samples/mesh_tiny.net samples/mesh_tiny_hybrid_4.sched --load " + (dir / "none") +
                      " --samples 4",
                  "error: --load '" + (dir / "none") + "'"},
             Case{"eval samples/mesh_tiny.net --shuffle" + load, "--shuffle: an evaluation or a prediction reads"},
             Case{"predict samples/mesh_tiny.net --layer nope --output " + (dir / "p.npy") + load,
                  "--layer: no layer 'nope' in the network; its layers: x, block1.0.conv"},
             Case{"predict samples/mesh_tiny.net --layer loss --output " + (dir / "p.npy") + load,
                  "--layer 'loss' is a loss"},
             Case{"predict samples/mesh_tiny.net --output " + out + load, "exists (--force replaces it)"},
             Case{"predict samples/mesh_tiny.net samples/mesh_tiny_hybrid_4.sched --output " + out + load,
                  "exists (--force replaces it)"},
             Case{"predict samples/mesh_tiny.net --output " + (dir / "p.txt") + load,
                  "is neither OUT.npy nor OUT.h5:/dataset"},
             Case{"predict samples/mesh_tiny.net --output " + (dir / "p.h5") + ":pred" + load,
                  "the dataset must be a path"},
             Case{"predict samples/mesh_tiny.net --output " + (dir / "no/p.npy") + load, "does not exist"},
             Case{"predict samples/mesh_tiny.net --output " + (dir / "p.npy") + " --load " + (dir / "none") +
                      " --samples 4",
                  "error: --load"},
             Case{"run samples/mesh_tiny.net --steps 1 --eval-every 1",
                  "error: --eval-every: synthetic data has no end"},
             Case{"run samples/mesh_tiny.net --steps 1 --eval-every 1 --eval-data x=" + (dir / "none.npy") +
                      " --eval-data y=" + (dir / "none.npy"),
                  "error: --eval-data: "},
         }) {
        const Result r = run_dsl(c.args);
        INFO(c.args << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(c.message) != std::string::npos);
        // One line, said once (by the first process under mpirun), and nothing done.
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK(r.out.empty());
    }
    CHECK(read(out) == "the user's");
    CHECK(!fs::exists(dir / "p.npy"));
    // --force replaces it.
    const Result forced = run_dsl("predict samples/mesh_tiny.net --force --output " + out + load);
    CHECK(forced.exit_code == 0);
    CHECK(read(out).substr(1, 5) == "NUMPY");
}
