// A command of dsl in the background, for tests that act on it while it runs (kill a process of it, change
// its input files): its processes are found by a mark in their environment, which mpirun passes on.
#pragma once

#include "run_dsl.hpp"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

// A shell running `cmd` in a process group of its own (so that killing the group ends all it started).
inline pid_t start_group(const std::string& cmd) {
    const pid_t shell = ::fork();
    if (shell == 0) {
        ::setpgid(0, 0);
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        std::_Exit(127);
    }
    ::setpgid(shell, shell);
    return shell;
}

// A process that a test started with `mark` (NAME=VALUE) in its environment, which mpirun passes on.
struct Marked {
    pid_t pid;
    std::string exe;  // the program's file name: "dsl", "mpirun", "orterun", ...
    int rank;         // its OMPI_COMM_WORLD_RANK; -1 for dsl outside MPI, -2 for anything else
    bool zombie;      // ended, not yet reaped
};

// Every process now running with `mark` in its environment.
inline std::vector<Marked> marked_processes(const std::string& mark) {
    std::vector<Marked> out;
    const std::string z(1, '\0');
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string env = z + read(e.path() / "environ");
        if (env.find(z + mark + z) == std::string::npos) continue;
        std::error_code gone;
        const std::string exe = fs::read_symlink(e.path() / "exe", gone).filename().string();
        const auto at = env.find(z + "OMPI_COMM_WORLD_RANK=");
        const int rank = at != std::string::npos ? std::atoi(env.c_str() + at + 22) : exe == "dsl" ? -1 : -2;
        out.push_back({static_cast<pid_t>(std::stol(name)), exe, rank,
                       read(e.path() / "stat").find(") Z ") != std::string::npos});
    }
    return out;
}

// The dsl process of `rank` (-1: dsl itself, when it runs alone or starts mpirun) with `mark`, or 0.
inline pid_t marked_dsl(const std::string& mark, int rank) {
    for (const Marked& m : marked_processes(mark))
        if (m.exe == "dsl" && m.rank == rank) return m.pid;
    return 0;
}

// A command of dsl in the background, in a process group of its own; its processes (dsl, its ranks) are
// found by a mark in their environment, which mpirun passes on.
class Background {
public:
    Background(const std::string& args, const std::string& out) {
        const std::string cmd = "cd '" + source_dir() + "' && NO_COLOR=1 " + fixture_local() + " " + mark_ + " '" +
                                dsl_binary() + "' " + args + " >'" + out + "' 2>&1";
        shell_ = start_group(cmd);
    }
    ~Background() {
        if (shell_ > 0) kill_all();
    }
    // The pid of `rank` (-1: dsl itself, when it runs alone or starts mpirun), or 0 when there is none.
    pid_t process(int rank) const { return marked_dsl(mark_, rank); }
    bool running() { return shell_ > 0 && ::waitpid(shell_, &status_, WNOHANG) == 0; }
    // Waits for the command's end (two minutes at most, then kills it), and for every process of it to be
    // gone (a rank that mpirun ends may outlive it a moment, and what it leaves is debris only once it has
    // ended): its exit status, or -1.
    int end() {
        for (int i = 0; i < 2400 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (running()) {
            kill_all();
            return -1;
        }
        shell_ = 0;
        for (int i = 0; i < 600 && any_left(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
    }

private:
    bool any_left() const {
        for (int rank = -1; rank < 8; ++rank)
            if (process(rank) != 0) return true;
        return false;
    }
    void kill_all() {
        for (int rank = -1; rank < 8; ++rank)
            if (const pid_t p = process(rank)) ::kill(p, SIGKILL);
        ::kill(-shell_, SIGKILL);
        ::waitpid(shell_, &status_, 0);
        shell_ = 0;
    }
    std::string mark_ = "DSL_TEST_OUTPUTS=" + std::to_string(::getpid());
    pid_t shell_ = 0;
    int status_ = 0;
};

}  // namespace
