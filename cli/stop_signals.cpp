// The signals that stop a run at the end of a step (stop_signals.hpp).
#include "stop_signals.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

namespace dsl::cli {

namespace {

volatile sig_atomic_t noted = 0;

extern "C" void note_stop(int signal) {
    // The first signal names the stop; a later one (a second SIGTERM while the checkpoint is written) does not
    // change it, nor anything else.
    if (noted == 0) noted = signal == SIGUSR2 ? SIGTERM : signal;
}

void note(int signal) {
    struct sigaction a = {};
    a.sa_handler = note_stop;
    // Calls that the signal interrupts (a write of the checkpoint) go on as if it had not come.
    a.sa_flags = SA_RESTART;
    sigemptyset(&a.sa_mask);
    ::sigaction(signal, &a, nullptr);
}

}  // namespace

void catch_stop_signals() {
    note(SIGTERM);
    note(SIGUSR1);
    if (std::getenv(passed_on_sigterm)) note(SIGUSR2);
}

int stop_signal() { return noted; }

std::string signal_name(int signal) {
    const char* abbrev = ::sigabbrev_np(signal);
    return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

}  // namespace dsl::cli
