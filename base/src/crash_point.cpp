// Killing this process at a chosen crash_point, for the tests of what a killed save leaves.
#include <dsl/base/crash_point.hpp>

#include <csignal>
#include <cstdlib>

#include <unistd.h>

namespace dsl {

namespace {

long kill_at() {
    const char* v = std::getenv("DSL_TEST_KILL_AT");
    return v ? std::strtol(v, nullptr, 10) : 0;
}

}  // namespace

void crash_point() {
    static const long at = kill_at();
    static long calls = 0;
    if (at > 0 && ++calls == at) ::kill(::getpid(), SIGKILL);
}

}  // namespace dsl
