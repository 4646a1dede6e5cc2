// User and internal errors: how a UserError renders, that the two kinds never mix, and the exit codes the
// command maps them to (1 for a user error, 3 for an internal one).
#include "run_dsl.hpp"
#include "skip.hpp"

#include <dsl/backend/gpu.hpp>
#include <dsl/base/error.hpp>
#include <dsl/base/source.hpp>

#include <catch2/catch.hpp>

#include <fstream>

using namespace dsl;

TEST_CASE("a user error without a place renders as 'error: message'", "[errors]") {
    const UserError e("-o: cannot write 'x'");
    CHECK(std::string(e.what()) == "-o: cannot write 'x'");
    CHECK_FALSE(e.location().known());
    CHECK(e.render() == "error: -o: cannot write 'x'\n");
}

TEST_CASE("a user error with a place renders as a diagnostic, with the source line and a caret", "[errors]") {
    SourceManager sources;
    const SourceFile* file = sources.add("tiny.net", "network tiny\nconv c1: x\n");
    const UserError e("no layer 'x'", Location{file, 2, 10, 1});
    CHECK(e.location().line == 2);
    CHECK(std::string(e.what()) == "no layer 'x'");
    CHECK(e.render() == "tiny.net:2:10: error: no layer 'x'\nconv c1: x\n         ^\n");
    // A span: the caret and a tilde under each further character.
    CHECK(UserError("bad", Location{file, 1, 9, 4}).render() ==
          "tiny.net:1:9: error: bad\nnetwork tiny\n        ^~~~\n");
    // Colour only when asked for.
    CHECK(e.render(true).find("\033[") != std::string::npos);
    CHECK(e.render(false).find("\033[") == std::string::npos);
}

TEST_CASE("user and internal errors are different types, and internal checks always run", "[errors]") {
    CHECK_THROWS_AS(throw UserError("x"), std::runtime_error);
    bool user_caught_as_internal = false;
    try {
        throw UserError("x");
    } catch (const InternalError&) {
        user_caught_as_internal = true;
    } catch (const UserError&) {
    }
    CHECK_FALSE(user_caught_as_internal);

    int checked = 0;
    auto count = [&] { return ++checked > 0; };
    DSL_INTERNAL_CHECK(count(), "never fails");
    CHECK(checked == 1);  // evaluated in every build type
    try {
        DSL_INTERNAL_CHECK(checked == 2, "the count is " + std::to_string(checked));
        FAIL("DSL_INTERNAL_CHECK did not throw");
    } catch (const UserError&) {
        FAIL("an internal check threw a user error");
    } catch (const InternalError& e) {
        const std::string what = e.what();
        CHECK(what.rfind("internal error at ", 0) == 0);
        CHECK(what.find("the count is 1 (checked == 2)") != std::string::npos);
    }
}

TEST_CASE("the command: a user error exits 1 with its message", "[errors][cli]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_errors_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path mine = dir / "mine.sched";
    std::ofstream(mine) << "procs = 2\n";

    // A UserError that reaches main: its message as `error: ...`, exit code 1, nothing on stdout.
    const Result user = run_dsl("schedule samples/mesh_tiny.net --procs 2 -o " + mine.string());
    CHECK(user.exit_code == 1);
    CHECK(user.out.empty());
    CHECK(user.err == "error: -o '" + mine.string() +
                          "' exists and was not written by dsl schedule; it is left as it is (choose another name)\n");
    fs::remove_all(dir);
}

TEST_CASE("the command: an internal error exits 3 with its place and a request to report it", "[errors][cli]") {
    // A measuring worker (the hidden --worker, which only `dsl calibrate` starts, after it has checked that
    // there is a GPU) asked for a GPU where there is none breaks an internal check: exit code 3. Where there is
    // a GPU, the check holds and nothing breaks.
    if (backend::gpu_devices() > 0) return test::skip("this machine has a GPU: a GPU worker breaks no internal check");
    const fs::path dir = fs::temp_directory_path() / ("dsl_internal_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const Result internal =
        run_dsl("calibrate samples/mesh_tiny.net -o " + (dir / "p.platform").string() +
                " --worker kernels --device gpu --keys /dev/null --results " + (dir / "results").string());
    fs::remove_all(dir);
    CHECK(internal.exit_code == 3);
    CHECK(internal.err.rfind("dsl: internal error at ", 0) == 0);
    CHECK(internal.err.find("This is a bug in dsl") != std::string::npos);
    CHECK(internal.err.find("\nerror: ") == std::string::npos);
}
