// mpirun and child processes of this program.
#include "launch.hpp"
#include "commands.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

namespace dsl::cli {

namespace {

std::string self_path() {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? program_arguments().front() : self.string();
}

// Runs argv (argv[0] found on PATH) and waits; `missing` is printed when it cannot be started.
int spawn(std::vector<std::string> argv, const std::map<std::string, std::string>& env, const std::string& out,
          const std::string& missing) {
    std::vector<char*> c_args;
    for (auto& a : argv) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    std::cout << std::flush;
    const pid_t child = ::fork();
    if (child == 0) {
        for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
        if (!out.empty()) {
            const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) ::dup2(fd, STDOUT_FILENO), ::close(fd);
        }
        ::execvp(c_args[0], c_args.data());
        std::cerr << fmt::format(fmt::runtime(missing), std::strerror(errno));
        std::_Exit(user_error);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : internal;
}

}  // namespace

int threads_per_process(std::int64_t procs) {
    const auto cores = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
    return static_cast<int>(std::max<std::int64_t>(1, cores / std::max<std::int64_t>(1, procs)));
}

int launch_mpi(std::int64_t procs, const std::vector<std::string>& args) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const int threads = threads_per_process(procs);
    // Quiet: a process that stops with an error has said why; mpirun's banner about it would only repeat it.
    std::vector<std::string> argv{"mpirun", "-q", "-np", std::to_string(procs)};
    if (procs > static_cast<std::int64_t>(cores)) argv.push_back("--oversubscribe");
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    // One process per core, bound to it; several threads per process share the machine unbound.
    argv.insert(argv.end(), {"--bind-to", threads == 1 && procs <= static_cast<std::int64_t>(cores) ? "core" : "none"});
    if (!std::getenv("OMP_NUM_THREADS")) argv.insert(argv.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", threads)});
    argv.push_back(self_path());
    argv.insert(argv.end(), args.begin(), args.end());
    return spawn(argv, {}, "",
                 fmt::format("error: cannot start mpirun ({{}}): install Open MPI (openmpi-bin), or start the run "
                             "with 'mpirun -np {} dsl ...'\n",
                             procs));
}

int launch_child(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                 const std::string& stdout_path) {
    std::vector<std::string> argv{self_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return spawn(argv, env, stdout_path, "error: cannot start dsl again ({})\n");
}

}  // namespace dsl::cli
