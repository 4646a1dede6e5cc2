// Golden diagnostics: every tests/diag/fail_*.net, fail_*.sched and fail_*.platform is checked by the `dsl`
// command and its stderr compared with the .stderr file beside it. A .sched case is checked against
// samples/mesh_tiny.net; a .platform case by `dsl print`, which checks platform files. A warn_* case is
// one that `dsl check` accepts with warnings.
// DSL_UPDATE_GOLDEN=1 rewrites the .stderr files from the current output instead of comparing.
#include "run_dsl.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> cases() {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(fs::path(DSL_SOURCE_DIR) / "tests" / "diag")) {
        const std::string name = e.path().filename().string();
        const auto ext = e.path().extension();
        if ((name.rfind("fail_", 0) == 0 || name.rfind("warn_", 0) == 0) &&
            (ext == ".net" || ext == ".sched" || ext == ".platform"))
            out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("golden diagnostics: each failing input gives exactly the expected errors", "[diag]") {
    const auto all = cases();
    REQUIRE(all.size() >= 20);
    const bool update = std::getenv("DSL_UPDATE_GOLDEN") != nullptr;
    for (const fs::path& input : all) {
        const std::string rel = fs::relative(input, DSL_SOURCE_DIR).string();
        const std::string args = input.extension() == ".sched"      ? "check samples/mesh_tiny.net " + rel
                                 : input.extension() == ".platform" ? "print " + rel
                                                                    : "check " + rel;
        SECTION(rel) {
            const Result r = run_dsl(args);
            fs::path expected = input;
            expected.replace_extension(input.extension().string() + ".stderr");
            if (update) {
                std::ofstream(expected, std::ios::binary) << r.err;
            } else {
                INFO("dsl " << args);
                REQUIRE(fs::exists(expected));
                CHECK(r.err == read(expected));
            }
            CHECK(r.err.find("internal error") == std::string::npos);
            if (input.filename().string().rfind("warn_", 0) == 0) {
                // Accepted, with its report on stdout and only warnings on stderr.
                CHECK(r.exit_code == 0);
                CHECK(!r.out.empty());
                CHECK(r.err.find(": warning: ") != std::string::npos);
                CHECK(r.err.find("error: ") == std::string::npos);
            } else {
                // A user error: exit code 1, nothing on stdout.
                CHECK(r.exit_code == 1);
                CHECK(r.out.empty());
                CHECK(r.err.find(": error: ") != std::string::npos);
            }
        }
    }
}

TEST_CASE("a missing file is a user error, not a crash", "[diag]") {
    const Result net = run_dsl("check tests/diag/no_such_file.net");
    CHECK(net.exit_code == 1);
    CHECK(net.err.find("error: cannot read 'tests/diag/no_such_file.net'") != std::string::npos);
    const Result sched = run_dsl("check samples/mesh_tiny.net tests/diag/no_such_file.sched");
    CHECK(sched.exit_code == 1);
    CHECK(sched.err.find("error: cannot read 'tests/diag/no_such_file.sched'") != std::string::npos);
    const Result platform = run_dsl("print tests/diag/no_such_file.platform");
    CHECK(platform.exit_code == 1);
    CHECK(platform.err.find("error: cannot read 'tests/diag/no_such_file.platform'") != std::string::npos);
}

TEST_CASE("usage errors exit with 2", "[diag]") {
    CHECK(run_dsl("").exit_code == 2);
    CHECK(run_dsl("check").exit_code == 2);
    CHECK(run_dsl("frobnicate x.net").exit_code == 2);
    CHECK(run_dsl("--help").exit_code == 0);
}

TEST_CASE("a file of thousands of errors stops after the first 20, with a line that says so", "[diag]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_many_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // 20,000 lines that are each an error (beyond the first), in each kind of file: a setting given again
    // and again, a layer reading one that does not exist (each would look for a name to suggest among all the
    // others), an unknown platform setting.
    std::string sched, net = "input x [N, 3, 8, 8]\n", platform;
    for (int i = 0; i < 20000; ++i) {
        sched += "procs = 4\n";
        net += "l" + std::to_string(i) + " = relu from missing" + std::to_string(i) + "\n";
        platform += "bogus" + std::to_string(i) + " = 1\n";
    }
    std::ofstream(dir / "many.sched") << sched;
    std::ofstream(dir / "many.net") << net;
    std::ofstream(dir / "many.platform") << platform;
    for (const std::string& args :
         {"check samples/mesh_tiny.net " + (dir / "many.sched").string(), "check " + (dir / "many.net").string(),
          "print " + (dir / "many.platform").string()}) {
        const Result r = run_dsl(args);
        INFO("dsl " << args << "\n" << r.err.substr(0, 2000));
        CHECK(r.exit_code == 1);
        std::size_t located = 0;
        for (std::size_t at = r.err.find(": error: "); at != std::string::npos; at = r.err.find(": error: ", at + 1))
            ++located;
        CHECK(located == 20);
        const std::string last = "\nerror: too many errors, stopping after the first 20\n";
        CHECK(r.err.size() >= last.size());
        CHECK(r.err.compare(r.err.size() - last.size(), last.size(), last) == 0);
    }
    fs::remove_all(dir);
}
