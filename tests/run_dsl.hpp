// Running the `dsl` command from a test, capturing its exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

inline std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

struct Result {
    int exit_code;
    std::string out, err;
};

// The repository and the dsl binary the tests were built for, or, where the built tree has moved (to a
// GPU machine), those $DSL_SOURCE_DIR and $DSL_BINARY name.
inline std::string source_dir() {
    const char* env = std::getenv("DSL_SOURCE_DIR");
    return env && *env ? env : DSL_SOURCE_DIR;
}
inline std::string dsl_binary() {
    const char* env = std::getenv("DSL_BINARY");
    return env && *env ? env : DSL_BINARY;
}

// The setting that makes the platform `local` a fixture with fixed figures, not this machine measured (and
// kept in the user's cache): every test's dsl runs with it unless it says otherwise.
inline std::string fixture_local() {
    return "DSL_LOCAL_PLATFORM='" + source_dir() + "/tests/fixtures/local_epyc_2core.platform'";
}

// Runs `dsl ARGS` from the repository root, so that file names in messages are the relative ones, with
// fixture_local(); `env`, words before the command (`env -u DSL_LOCAL_PLATFORM DSL_CACHE_DIR=...`), replaces
// that.
inline Result run_dsl(const std::string& args, const std::string& env = "") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_diag_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string local = env.empty() ? fixture_local() : env;
    const std::string cmd = "cd '" + source_dir() + "' && NO_COLOR=1 " + local + " '" + dsl_binary() + "' " + args +
                            " >'" + (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
    const int status = std::system(cmd.c_str());
    Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(dir / "out"), read(dir / "err")};
    fs::remove_all(dir);
    return r;
}

}  // namespace
