// Preemption: SIGTERM and SIGUSR1, a cluster's notice that a job is about to be ended (Slurm sends SIGTERM at
// a time limit or a preemption, and the signal of `--signal` before it), ask `dsl run` to stop at the end of
// the step it is in, on every process at the same step, save a checkpoint of that step and exit with
// `stopped` (commands.hpp).
#pragma once

#include <string>

namespace dsl::cli {

// The environment variable with which dsl's launcher tells the processes it starts under mpirun that it
// passes a SIGTERM of its own on to them as SIGUSR2: mpirun ends its processes on a SIGTERM (with a SIGKILL
// a second later), but passes SIGUSR1 and SIGUSR2 on untouched.
inline constexpr const char* passed_on_sigterm = "DSL_SIGTERM_AS_SIGUSR2";

// From here on, SIGTERM and SIGUSR1 (and SIGUSR2 where the launcher passes SIGTERM on as it) are noted, not
// acted on: the run reads them at the end of each step. A second signal during a save is noted too, and
// changes nothing, so that the checkpoint is written whole.
void catch_stop_signals();

// The signal that asked this process to stop (SIGTERM or SIGUSR1), or 0.
int stop_signal();

// A signal's name, "SIGTERM"; "signal N" where it has none.
std::string signal_name(int signal);

}  // namespace dsl::cli
