// The `dsl` command: parses the command line and runs one verb, mapping its result to an exit code.
#include "commands.hpp"

#include <dsl/frontend/diagnostics.hpp>

#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdlib>
#include <iostream>
#include <new>

namespace dsl::cli {

namespace {
std::vector<std::string> arguments;
}

const std::vector<std::string>& program_arguments() { return arguments; }

bool stderr_color() { return ::isatty(STDERR_FILENO) && std::getenv("NO_COLOR") == nullptr; }

}  // namespace dsl::cli

int main(int argc, char** argv) {
    using namespace dsl::cli;
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
        "Run 'dsl VERB --help' for a verb's options. Exit codes: 0 ok, 1 error in the input, 2 usage,\n"
        "3 internal error, 4 a process of a run was killed (by a signal: the out-of-memory killer, say).");

    Action action;
    setup_check(app, action);
    setup_print(app, action);
    setup_run(app, action);
    setup_schedule(app, action);
    setup_explain(app, action);
    setup_compare(app, action);
    setup_calibrate(app, action);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? ok : usage;
    }
    try {
        return action ? action() : usage;
    } catch (const std::bad_alloc&) {
        std::cerr << "error: out of memory; a schedule that splits the samples' rows and columns over several "
                     "processes divides the activations among them (see 'dsl check NET SCHED')\n";
        return user_error;
    } catch (const dsl::InternalError& e) {
        std::cerr << "dsl: " << e.what() << "\nThis is a bug in dsl; please report it with the input files.\n";
        return internal;
    } catch (const std::exception& e) {
        std::cerr << "dsl: internal error: " << e.what() << "\nThis is a bug in dsl; please report it.\n";
        return internal;
    }
}
