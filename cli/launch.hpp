// Starting processes: this very program again under mpirun (a run on several processes), or as a child
// (a measurement in a process of its own), waiting for it and returning its exit code.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsl::cli {

// `procs` copies of this program with `args` under mpirun, one thread each where the cores allow (each
// bound to its core), more threads each when there are fewer processes than cores. Where a process dies of a
// signal (the out-of-memory killer's SIGKILL, say), one line names it, its host and the signal, and the exit
// code is `killed` (`internal` for a crash). With `stop_at_step` (`dsl run`), a SIGTERM or SIGUSR1 to this
// process stops them at the end of a step (stop_signals.hpp), and their exit code is returned.
int launch_mpi(std::int64_t procs, const std::vector<std::string>& args, bool stop_at_step = false);

// mpirun's stderr on its way to ours: the processes' lines pass at once; mpirun's notices (between lines of
// dashes) that repeat what a process which stopped with an error has said are held back; the one that says
// a process died of a signal is kept in `death`; any other passes. Open MPI's own lines from the processes
// are said at the end, unless a process died or a process's watchdog ended the run (they are its consequences).
class MpirunOutput {
public:
    void add(std::string_view bytes);
    void finish();  // at the end of the output

    struct Death {
        int rank = 0, signal = 0;
        std::string host;
    };
    std::optional<Death> death;  // the first process that died of a signal
    int mpirun_signal = 0;       // the signal mpirun itself died of, or 0

private:
    void line(const std::string& text);  // a whole line, its '\n' included
    std::string partial_;                // a line not ended yet
    bool passed_ = false;                // its start was passed on already
    bool in_notice_ = false;
    std::vector<std::string> notice_;  // the lines of an open notice
    std::vector<std::string> held_;    // Open MPI's lines ("[host:pid] ..."), said at the end but after a death
    // The line being read, whole, and whether a process's watchdog ended the run (whose lines Open MPI's then
    // only repeat, as after a death).
    std::string line_;
    bool watchdog_ended_ = false;
};

// This program with `args`, with `env` added to its environment; stdout goes to `stdout_path` unless empty.
int launch_child(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                 const std::string& stdout_path = "");

// The threads each of `procs` processes gets on this machine: its cores divided among them, at least one.
int threads_per_process(std::int64_t procs);

}  // namespace dsl::cli
