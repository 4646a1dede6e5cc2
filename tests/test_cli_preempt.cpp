// Long runs on clusters: a run stopped by SIGTERM or SIGUSR1 (to dsl, to mpirun, to every process) saves the
// step it was in and resumes bitwise; a process that stops (SIGSTOP) ends the run, named, within --timeout; a
// layer that no tile can address, or no process can hold, is an error at its line; the Slurm example is a valid
// script.
#include "background_command.hpp"
#include "logged_losses.hpp"
#include "skip.hpp"
#include "temp_files.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

namespace {

using clock_type = std::chrono::steady_clock;

std::string mpirun_words(int procs) {
    return "mpirun -np " + std::to_string(procs) + " --oversubscribe" +
           (::geteuid() == 0 ? " --allow-run-as-root" : "");
}

// dsl with `args`, after `prefix` (a launcher), as words of a shell.
std::string dsl_words(const std::string& prefix, const std::string& args) {
    return prefix + " '" + dsl_binary() + "' " + args;
}

// A command in the background (`words`: dsl_words, or a script that runs dsl), run from the repository in a
// process group of its own, its output in one file; the processes of dsl are found by a mark in their
// environment, which mpirun passes on.
class Job {
public:
    Job(const std::string& words, const std::string& out) {
        const std::string cmd = "cd '" + source_dir() + "' && NO_COLOR=1 " + fixture_local() + " " + mark_ + " exec " +
                                words + " >'" + out + "' 2>&1";
        shell_ = start_group(cmd);
    }
    ~Job() {
        if (shell_ > 0) {
            for (int rank = -1; rank < 8; ++rank)
                if (const pid_t p = process(rank)) ::kill(p, SIGKILL);
            ::kill(-shell_, SIGKILL);
            ::waitpid(shell_, nullptr, 0);
        }
    }
    // The command itself: dsl, or the mpirun it was started under.
    pid_t command() const { return shell_; }
    // The pid of `rank` (-1: dsl when it starts mpirun itself), or 0 when there is none.
    pid_t process(int rank) const { return marked_dsl(mark_, rank); }
    // Any process of the command left: dsl, its ranks, or an mpirun (found by the mark too).
    bool any_left() const {
        for (const Marked& m : marked_processes(mark_))
            if (m.pid != shell_ && !m.zombie) return true;  // a zombie is gone, only not yet reaped
        return false;
    }
    // Waits up to `seconds` for its end: the exit code (-1 where it did not end, and was killed).
    int end(double seconds) {
        int status = 0;
        for (const auto start = clock_type::now();
             clock_type::now() - start < std::chrono::duration<double>(seconds);) {
            if (::waitpid(shell_, &status, WNOHANG) == shell_) {
                shell_ = 0;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }

private:
    std::string mark_ = "DSL_TEST_PREEMPT=" + std::to_string(::getpid());
    pid_t shell_ = 0;
};

// Waits (a minute at most) for the log to have `steps` steps.
bool logged(const std::string& log, std::size_t steps) {
    for (const auto start = clock_type::now(); clock_type::now() - start < std::chrono::seconds(60);) {
        if (logged_losses(log).size() >= steps) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

// The checkpoint a --save folder holds: itself, or in a series the folder its `latest` names.
std::string checkpoint_in(const std::string& dir) {
    std::string latest = read(fs::path(dir) / "latest");
    while (!latest.empty() && (latest.back() == '\n' || latest.back() == '\r')) latest.pop_back();
    return latest.empty() ? dir : (fs::path(dir) / latest).string();
}

// Every tensor of the checkpoints of two --save folders equal to the byte, and their manifests' steps.
void same_checkpoints(const std::string& a_dir, const std::string& b_dir) {
    const std::string a = checkpoint_in(a_dir), b = checkpoint_in(b_dir);
    std::size_t tensors = 0;
    for (const auto& e : fs::directory_iterator(a)) {
        const std::string name = e.path().filename().string();
        if (name == "manifest.json") continue;
        INFO(name);
        CHECK(read(e.path()) == read(fs::path(b) / name));
        ++tensors;
    }
    CHECK(tensors > 10);
    const auto step = [](const std::string& c) {
        return nlohmann::json::parse(read(fs::path(c) / "manifest.json"))["step"];
    };
    CHECK(step(a) == step(b));
}

// The run stopped in `dir` (its checkpoint series `ck`, its losses `before`) resumed by `run` for `steps` steps:
// its losses and its checkpoint those of the run never stopped, `whole`, to the bit.
void resumes_bitwise(const std::string& run, const dsl::test::TempDir& dir, std::vector<double> before, int steps) {
    const Result resumed = run_dsl(run + "--steps " + std::to_string(steps) + " --load " + (dir / "ck") + " --save " +
                                   (dir / "ck") + " --log " + (dir / "resumed.jsonl"));
    INFO(resumed.err);
    REQUIRE(resumed.exit_code == 0);
    for (double l : logged_losses(dir / "resumed.jsonl")) before.push_back(l);
    CHECK(before == logged_losses(dir / "whole.jsonl"));
    same_checkpoints(dir / "ck", dir / "whole");
}

// The schedule of mesh_tiny on `procs` processes (none for one).
std::string schedule_for(int procs) {
    return procs == 1 ? "" : procs == 2 ? "samples/mesh_tiny_spatial_h_2.sched" : "samples/mesh_tiny_hybrid_4.sched";
}

}  // namespace

TEST_CASE("run: SIGTERM and SIGUSR1 stop every process at one step and save it, and --load resumes it bitwise",
          "[cli][run][preempt][mpi]") {
    // Who is sent the signal: dsl (which starts mpirun itself on several processes), an mpirun a user started
    // around it, or every process (as Slurm signals a job step's tasks).
    enum class To { dsl, user_mpirun, every_process };
    struct Case {
        int signal;
        To to;
    };
    const int procs = GENERATE(1, 2, 4);
    const std::vector<Case> cases =
        procs == 1   ? std::vector<Case>{{SIGTERM, To::dsl}, {SIGUSR1, To::dsl}}
        : procs == 2 ? std::vector<Case>{{SIGTERM, To::dsl},
                                         {SIGUSR1, To::dsl},
                                         {SIGUSR1, To::user_mpirun},
                                         {SIGTERM, To::every_process}}
                     : std::vector<Case>{{SIGTERM, To::dsl}, {SIGUSR1, To::dsl}, {SIGUSR1, To::user_mpirun}};
    dsl::test::TempDir dir;
    const int total = 20;
    const std::string run = "run samples/mesh_tiny.net " + schedule_for(procs) + " --batch 4 ";

    // The run never stopped.
    const Result whole = run_dsl(run + "--steps " + std::to_string(total) + " --save " + (dir / "whole") + " --log " +
                                 (dir / "whole.jsonl"));
    INFO(whole.err);
    REQUIRE(whole.exit_code == 0);

    for (const Case& c : cases) {
        const std::string name = c.signal == SIGTERM ? "SIGTERM" : "SIGUSR1";
        INFO(procs << " processes, " << name << " to "
                   << (c.to == To::dsl           ? "dsl"
                       : c.to == To::user_mpirun ? "mpirun"
                                                 : "every process"));
        fs::remove_all(dir.path / "ck");
        fs::remove(dir.path / "stopped.jsonl");
        // The run stopped once it has taken 2 steps: at the step it was in, or the next.
        const std::string out = dir / "stopped.out";
        Job job(dsl_words(c.to == To::user_mpirun ? mpirun_words(procs) : "", run + "--steps " + std::to_string(total) +
                                                                                  " --save " + (dir / "ck") +
                                                                                  " --log " + (dir / "stopped.jsonl")),
                out);
        REQUIRE(logged(dir / "stopped.jsonl", 2));
        if (c.to == To::every_process)
            for (int rank = 0; rank < procs; ++rank) ::kill(job.process(rank), c.signal);
        else
            ::kill(job.command(), c.signal);
        const int code = job.end(60);
        const std::string said = read(out);
        INFO(said);
        REQUIRE(code == 5);
        std::smatch m;
        // The --save folder, or in a series its checkpoint of that step.
        const std::regex stopped("stopped by " + name + " at step (\\d+): saved '" + (dir / "ck") + "/step-\\d+'\n");
        REQUIRE(std::regex_search(said, m, stopped));
        const int at = std::stoi(m[1].str());
        CHECK(at >= 2);
        REQUIRE(at < total);
        // Said once, however many processes had the signal; mpirun's word that it passed a signal on is not said.
        CHECK(said.find("stopped by", static_cast<std::size_t>(m.position(0)) + 1) == std::string::npos);
        CHECK((c.to == To::user_mpirun || said.find("Forwarding signal") == std::string::npos));
        const auto before = logged_losses(dir / "stopped.jsonl");
        REQUIRE(before.size() == static_cast<std::size_t>(at));
        CHECK(!job.any_left());
        resumes_bitwise(run, dir, before, total - at);
    }
}

TEST_CASE(
    "run: SIGTERM to an mpirun of the user's own that gives its processes time stops them at one step, "
    "saved, and --load resumes it bitwise",
    "[cli][run][preempt][mpi]") {
    // Open MPI's mpirun takes a SIGTERM as its own end: it passes SIGTERM on to its processes after
    // odls_base_sigkill_timeout seconds and SIGKILL as long again after that (1 s by default, too little to
    // save); with more, the processes stop as for any SIGTERM. The run lasts until it is stopped.
    const int procs = GENERATE(2, 4);
    INFO(procs << " processes");
    dsl::test::TempDir dir;
    const std::string run = "run samples/mesh_tiny.net " + schedule_for(procs) + " --batch 4 ";
    const std::string out = dir / "stopped.out";
    Job job(dsl_words(mpirun_words(procs) + " --mca odls_base_sigkill_timeout 3",
                      run + "--steps 1000000 --save " + (dir / "ck") + " --log " + (dir / "stopped.jsonl")),
            out);
    REQUIRE(logged(dir / "stopped.jsonl", 2));
    ::kill(job.command(), SIGTERM);
    const int code = job.end(60);
    const std::string said = read(out);
    INFO(said);
    CHECK(code != 0);  // mpirun's own code for a job it ended
    CHECK(code != -1);
    std::smatch m;
    REQUIRE(std::regex_search(
        said, m, std::regex("stopped by SIGTERM at step (\\d+): saved '" + (dir / "ck") + "/step-\\d+'\n")));
    CHECK(said.find("stopped by", static_cast<std::size_t>(m.position(0)) + 1) == std::string::npos);
    const int at = std::stoi(m[1].str());
    const auto before = logged_losses(dir / "stopped.jsonl");
    REQUIRE(before.size() == static_cast<std::size_t>(at));
    CHECK(!job.any_left());

    // A run never stopped, 3 steps past the stop, against the stopped one resumed for 3 steps.
    const Result whole = run_dsl(run + "--steps " + std::to_string(at + 3) + " --save " + (dir / "whole") + " --log " +
                                 (dir / "whole.jsonl"));
    INFO(whole.err);
    REQUIRE(whole.exit_code == 0);
    resumes_bitwise(run, dir, before, 3);
}

TEST_CASE("run: a stop without --save says that nothing is saved, with the same exit code", "[cli][run][preempt]") {
    dsl::test::TempDir dir;
    const std::string out = dir / "out";
    Job job(dsl_words("", "run samples/mesh_tiny.net --batch 4 --kernels reference --steps 1000 --log " +
                              (dir / "log.jsonl")),
            out);
    REQUIRE(logged(dir / "log.jsonl", 1));
    ::kill(job.command(), SIGTERM);
    CHECK(job.end(60) == 5);
    CHECK(std::regex_search(read(out),
                            std::regex("stopped by SIGTERM at step \\d+: not saved \\(the run has no --save\\)")));
}

TEST_CASE("run: a second signal while the checkpoint is written leaves it whole", "[cli][run][preempt]") {
    dsl::test::TempDir dir;
    const std::string out = dir / "out";
    Job job(dsl_words("", "run samples/mesh_tiny.net --batch 4 --kernels reference --steps 1000 --save " +
                              (dir / "ck") + " --log " + (dir / "log.jsonl")),
            out);
    REQUIRE(logged(dir / "log.jsonl", 1));
    // A burst of signals: the first stops the run, the others come while it finishes its step and saves.
    for (int i = 0; i < 20; ++i) {
        ::kill(job.command(), i % 2 ? SIGUSR1 : SIGTERM);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE(job.end(60) == 5);
    INFO(read(out));
    CHECK(std::regex_search(read(out), std::regex("stopped by SIGTERM at step \\d+: saved")));
    // Whole: it resumes.
    const Result resumed = run_dsl("run samples/mesh_tiny.net --batch 4 --steps 1 --load " + (dir / "ck"));
    INFO(resumed.err);
    CHECK(resumed.exit_code == 0);
}

TEST_CASE("run: a stopped process ends every process of the run within --timeout, named", "[cli][run][preempt][mpi]") {
    const int procs = GENERATE(2, 4);
    INFO(procs << " processes");
    dsl::test::TempDir dir;
    const std::string out = dir / "out";
    const double timeout = 3;
    Job job(dsl_words("", "run samples/mesh_tiny.net " + schedule_for(procs) +
                              " --batch 4 --steps 100000 --timeout 3 --log " + (dir / "log.jsonl")),
            out);
    REQUIRE(logged(dir / "log.jsonl", 2));
    const pid_t victim = job.process(1);
    REQUIRE(victim != 0);
    ::kill(victim, SIGSTOP);
    const auto stopped = clock_type::now();
    const int code = job.end(timeout + 10);
    const double took = std::chrono::duration<double>(clock_type::now() - stopped).count();
    const std::string said = read(out);
    INFO(said << "\nended after " << took << " s");
    ::kill(victim, SIGCONT);  // where it was left behind: so that the test's cleanup can end it
    CHECK(code == 1);
    CHECK(took < timeout + 10);
    CHECK(std::regex_search(said, std::regex("error: process \\d of " + std::to_string(procs) +
                                             " \\(host [^,]+, pid \\d+\\) made no progress for \\d+ s")));
    CHECK(said.find("process 1 of " + std::to_string(procs) + " (host ") != std::string::npos);
    CHECK(said.find("has not run for") != std::string::npos);
    // No process left behind: dsl, mpirun, every rank (the stopped one too).
    bool left = true;
    for (int i = 0; i < 100 && left; ++i) {
        left = job.any_left();
        if (left) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(!left);
}

TEST_CASE("run --timeout takes a positive number of seconds", "[cli][run][preempt]") {
    const Result r = run_dsl("run samples/mesh_tiny.net --steps 1 --timeout 0");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("a timeout is a positive number of seconds, not 0") != std::string::npos);
}

TEST_CASE("a layer that no tile can address is an error at its line in check and run", "[cli][run][check]") {
    dsl::test::TempDir dir;
    const std::string net = dir / "wide.net";
    dsl::test::write_bytes(net,
                           "input x [N, 3, 8, 8]\nlabel y [N]\n\nc1 = conv(2147483648, kernel = 1)\np = "
                           "global_avgpool\nf = fc(10)\nloss = softmax_cross_entropy from f, y\n");
    for (const std::string& words : {"check " + net, "run " + net + " --batch 1 --steps 1"}) {
        const Result r = run_dsl(words);
        INFO(words << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(net + ":4:1: error: 'c1' would have 2147483648 channels (output [N, 2147483648, 8, 8]): a "
                               "dimension of a tensor holds at most 2147483647 (2^31-1)") != std::string::npos);
        CHECK(r.err.find("out of memory") == std::string::npos);
    }
    // CosmoFlow's first convolution, [16, 512, 512, 512] a sample, is 2^31 elements: on one process, no tile of
    // the kernels holds it; under its schedule for 16 processes (D=4 H=4) each tile does.
    const Result one = run_dsl("run stdlib/cosmoflow.net --batch 1 --steps 1");
    INFO(one.err);
    CHECK(one.exit_code == 1);
    CHECK(one.err.find("stdlib/cosmoflow.net:") != std::string::npos);
    CHECK(one.err.find(": error: layer 'c1.conv': a process's tile of its output on one process holds 2147483648 "
                       "elements, more than the 2147483647 (2^31-1) that dsl's kernels can address") !=
          std::string::npos);
    const Result split = run_dsl("check stdlib/cosmoflow.net stdlib/cosmoflow_lassen_16.sched");
    INFO(split.err);
    CHECK(split.exit_code == 0);
    const Result check_one = run_dsl("check stdlib/cosmoflow.net " + [&] {
        dsl::test::write_bytes(dir / "one.sched", "procs = 1\nbatch = 1\ndefault N=1\n");
        return dir / "one.sched";
    }());
    CHECK(check_one.exit_code == 1);
    CHECK(check_one.err.find("layer 'c1.conv': a process's tile of its output on one process holds") !=
          std::string::npos);
}

TEST_CASE("a layer whose tile no process of this machine can hold is an error at its line in check and run",
          "[cli][run][check]") {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    double kib = 0.0;
    while (meminfo >> key >> kib && key != "MemTotal:") meminfo.ignore(256, '\n');
    if (kib * 1024.0 / 2.0 > 15.0 * (1 << 30))
        return dsl::test::skip("this machine gives each of 2 processes more than the 15.8 GiB the layer needs");
    dsl::test::TempDir dir;
    // 2.1e9 weights (within what a tensor indexes), held whole under N=2 with their gradient: 15.8 GiB, more
    // than the half of this machine's memory that each of 2 processes has; under F=2 each holds half of them.
    const std::string net = dir / "wide.net";
    dsl::test::write_bytes(net,
                           "input x [N, 46000, 4, 4]\nlabel y [N, 4, 4]\n\nwide = conv(46000, kernel = 1)\n"
                           "pred = conv(2, kernel = 1)\nloss = pixel_cross_entropy from pred, y\n");
    dsl::test::write_bytes(dir / "n2.sched", "procs = 2\nbatch = 2\n\ndefault N=2 overlap=off\n");
    dsl::test::write_bytes(dir / "f2.sched",
                           "procs = 2\nbatch = 2\n\ndefault N=2 overlap=off\nlayer wide F=2\nlayer pred F=2\n");
    for (const std::string& words :
         {"check " + net + " " + (dir / "n2.sched"), "run " + net + " " + (dir / "n2.sched") + " --steps 1"}) {
        const Result r = run_dsl(words);
        INFO(words << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(std::regex_search(r.err, std::regex(net + ":4:1: error: layer 'wide': a process under split N=2 H=1 W=1 "
                                                        "needs at least 15\\.8 GiB for it \\(2\\.8 MiB for its tile "
                                                        "of the output in float32, 15\\.8 GiB for its block of weights "
                                                        "and their gradient\\), more than the [0-9.]+ GiB a process "
                                                        "has; split it further \\(F=, C= in a schedule\\)")));
        CHECK(r.err.find("out of memory") == std::string::npos);
    }
    const Result split = run_dsl("check " + net + " " + (dir / "f2.sched"));
    INFO(split.err);
    CHECK(split.exit_code == 0);
}

TEST_CASE("the Slurm example requeues itself when signalled, and resumes where it stopped",
          "[cli][run][preempt][mpi]") {
    // No Slurm here: the script runs dsl alone (which starts mpirun), and a stand-in for scontrol notes its
    // arguments.
    dsl::test::TempDir dir;
    fs::create_directories(dir.path / "bin");
    dsl::test::write_bytes(dir / "bin/scontrol", "#!/bin/sh\necho \"$@\" >> '" + (dir / "requeued") + "'\n");
    fs::permissions(dir / "bin/scontrol", fs::perms::owner_all);
    const std::string args = " --batch 4 --log ";
    const std::string job_words = "env PATH='" + (dir / "bin") + "':\"$PATH\" SLURM_JOB_ID=42 LAUNCH=env DSL='" +
                                  dsl_binary() +
                                  "' NET=samples/mesh_tiny.net SCHED=samples/mesh_tiny_spatial_h_2.sched CKPT='" +
                                  (dir / "ck") + "' TOTAL=30 bash scripts/slurm/train.sbatch" + args;
    {
        Job job(job_words + (dir / "first.jsonl"), dir / "first.out");
        REQUIRE(logged(dir / "first.jsonl", 2));
        ::kill(job.command(), SIGUSR1);
        const int code = job.end(60);
        INFO(read(dir / "first.out"));
        REQUIRE(code == 5);
        CHECK(std::regex_search(read(dir / "first.out"), std::regex("stopped by SIGUSR1 at step \\d+: saved")));
        CHECK(read(dir / "requeued") == "requeue 42\n");
    }
    // The requeued job: the steps left, to the end.
    Job again(job_words + (dir / "second.jsonl"), dir / "second.out");
    const int code = again.end(120);
    INFO(read(dir / "second.out"));
    REQUIRE(code == 0);
    CHECK(read(dir / "requeued") == "requeue 42\n");
    auto all = logged_losses(dir / "first.jsonl");
    for (double l : logged_losses(dir / "second.jsonl")) all.push_back(l);
    const Result whole = run_dsl("run samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --steps 30 --save " +
                                 (dir / "whole") + args + (dir / "whole.jsonl"));
    REQUIRE(whole.exit_code == 0);
    CHECK(all == logged_losses(dir / "whole.jsonl"));
    same_checkpoints(dir / "ck", dir / "whole");
}

TEST_CASE("the Slurm example is a valid bash script", "[cli][preempt]") {
    const std::string script = source_dir() + "/scripts/slurm/train.sbatch";
    REQUIRE(fs::exists(script));
    CHECK(std::system(("bash -n '" + script + "'").c_str()) == 0);
    const std::string text = read(script);
    CHECK(text.find("#SBATCH --signal=B:USR1@120") != std::string::npos);
    CHECK(text.find("#SBATCH --requeue") != std::string::npos);
    CHECK(text.find("--load") != std::string::npos);
}
