// The `dsl` command: parses the command line and runs one verb, mapping its result to an exit code.
#include "commands.hpp"

#include <dsl/base/diagnostics.hpp>
#include <dsl/base/error.hpp>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>

namespace dsl::cli {

namespace {
std::vector<std::string> arguments;
}

const std::vector<std::string>& program_arguments() { return arguments; }

// no-color.org: NO_COLOR turns colour off when it is set and not empty.
bool stderr_color() {
    const char* no_color = std::getenv("NO_COLOR");
    return ::isatty(STDERR_FILENO) && (no_color == nullptr || *no_color == '\0');
}

namespace {

CLI::Validator whole_number(std::int64_t least, std::int64_t most, const char* name) {
    return CLI::Validator(
        [least, most](std::string& text) -> std::string {
            std::int64_t value = 0;
            const char* end = text.data() + text.size();
            const auto [stop, ec] = std::from_chars(text.data(), end, value);
            if (ec == std::errc::result_out_of_range || (ec == std::errc() && stop == end && value > most))
                return fmt::format("{} is too large (at most {})", text, most);
            if (ec != std::errc() || stop != end || text.empty())
                return fmt::format("'{}' is not a whole number{}", text,
                                   text.find(',') != std::string::npos ? " (give one number)" : "");
            if (value < least) return fmt::format("{} is not {}", text, least == 1 ? "positive" : "0 or more");
            return {};
        },
        name);
}

}  // namespace

CLI::Validator positive_count(std::int64_t most) { return whole_number(1, most, "POSITIVE"); }
CLI::Validator nonnegative_count(std::int64_t most) { return whole_number(0, most, "NON-NEGATIVE"); }

CLI::Validator folder_name() {
    return CLI::Validator(
        [](std::string& text) -> std::string { return text.empty() ? "an empty name names no folder" : ""; }, "DIR");
}

CLI::Validator file_name() {
    return CLI::Validator(
        [](std::string& text) -> std::string { return text.empty() ? "an empty name names no file" : ""; }, "FILE");
}

}  // namespace dsl::cli

namespace {

// SIGBUS: a memory-mapped file (a .npy input or checkpoint tensor) cut short while it was read, between the
// check of its size before a read and the read. Said as the user's error it is, never as a crash of dsl.
extern "C" void on_bus_error(int) {
    static const char text[] =
        "error: a memory-mapped data file was cut short while the run read it (SIGBUS): an input file "
        "changed under the run\n";
    [[maybe_unused]] const ssize_t n = ::write(2, text, sizeof text - 1);
    ::_exit(1);
}

// What the command printed must have reached the standard output: data that did not (`dsl print NET > F` on
// a full disk) is a failure, never a quiet exit 0.
int written(int code) {
    using namespace dsl::cli;
    errno = 0;
    std::cout.flush();
    if (std::fflush(stdout) == 0 && !std::ferror(stdout) && std::cout) return code;
    std::cerr << fmt::format("error: cannot write the standard output: {}\n", std::strerror(errno != 0 ? errno : EIO));
    return code == ok ? user_error : code;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace dsl::cli;
    std::signal(SIGBUS, on_bus_error);
    arguments.assign(argv, argv + argc);
    CLI::App app{
        "dsl: train convolutional networks whose samples are too big for one processor.\n"
        "A network is written in a .net file and how to parallelize it in a .sched file.",
        "dsl"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "dsl 0.1.0");
    app.footer(
        "Examples:\n"
        "  dsl check samples/mesh_tiny.net samples/mesh_tiny_hybrid_4.sched\n"
        "  dsl print stdlib/resnet50.net\n"
        "  dsl schedule samples/mesh_tiny.net --procs 4 --batch 4 -o tiny_4.sched\n"
        "  dsl run samples/mesh_tiny.net --auto-schedule --procs 2\n"
        "  dsl export samples/mesh_tiny.net --load ckpt -o mesh_tiny.pt\n"
        "Run 'dsl VERB --help' for a verb's options. Exit codes: 0 ok, 1 error in the input, 2 usage,\n"
        "3 internal error, 4 a process of a run was killed (by a signal: the out-of-memory killer, say).");

    Action action;
    setup_check(app, action);
    setup_print(app, action);
    setup_run(app, action);
    setup_eval(app, action);
    setup_predict(app, action);
    setup_schedule(app, action);
    setup_explain(app, action);
    setup_compare(app, action);
    setup_calibrate(app, action);
    setup_export(app, action);

    // CLI11 would say only that the word was not expected.
    if (argc > 1 && argv[1][0] != '-') {
        std::vector<std::string> verbs;
        for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
            verbs.push_back(sub->get_name());
        if (std::find(verbs.begin(), verbs.end(), argv[1]) == verbs.end()) {
            const std::string near = dsl::closest_match(argv[1], verbs);
            std::string list;
            for (const auto& v : verbs) list += (list.empty() ? "" : ", ") + v;
            std::cerr << fmt::format("error: unknown verb '{}'{}; the verbs are {} (see 'dsl --help')\n", argv[1],
                                     near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near), list);
            return usage;
        }
    }
    app.failure_message(
        [](const CLI::App* a, const CLI::Error& e) { return "error: " + CLI::FailureMessage::simple(a, e); });
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? ok : usage;
    }
    try {
        return action ? written(action()) : usage;
    } catch (const dsl::OutOfMemory& e) {  // with how much was asked, and what needs less
        std::cerr << dsl::UserError(e.what()).render(stderr_color());
        return user_error;
    } catch (const std::bad_alloc&) {
        std::cerr << "error: out of memory; a schedule that splits the samples' rows and columns over several "
                     "processes divides the activations among them (see 'dsl check NET SCHED')\n";
        return user_error;
    } catch (const dsl::UserError& e) {
        std::cerr << e.render(stderr_color());
        return user_error;
    } catch (const dsl::InternalError& e) {
        std::cerr << "dsl: " << e.what() << "\nThis is a bug in dsl; please report it with the input files.\n";
        return internal;
    } catch (const std::exception& e) {
        std::cerr << "dsl: internal error: " << e.what() << "\nThis is a bug in dsl; please report it.\n";
        return internal;
    }
}
