// mpirun and child processes of this program.
#include "launch.hpp"
#include "commands.hpp"
#include "stop_signals.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <regex>
#include <thread>

namespace dsl::cli {

namespace {

std::string self_path() {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? program_arguments().front() : self.string();
}

// mpirun while it runs, to which a signal asking this process to end is passed on, and the last such signal.
// Where the processes stop at the end of a step (`dsl run`), SIGTERM goes on as SIGUSR2, which mpirun passes
// on untouched (a SIGTERM would make it kill them a second later), and SIGUSR1 as itself; a stop is not an
// end of this process: it returns the processes' exit code.
volatile sig_atomic_t waited_child = 0, ended_by = 0, stops = 0;

void pass_on(int signal) {
    const bool stop = stops && (signal == SIGTERM || signal == SIGUSR1);
    if (!stop) ended_by = signal;
    if (waited_child > 0) ::kill(static_cast<pid_t>(waited_child), stop && signal == SIGTERM ? SIGUSR2 : signal);
}

// Runs argv (argv[0] found on PATH) and waits; `missing` is printed when it cannot be started. With a `filter`
// (mpirun), its stderr goes there, and while it runs SIGINT, SIGTERM and SIGHUP are passed on to it: it ends
// its processes, then launch_mpi ends this one by the signal (`ended_by`), once it has tidied up. With
// `stops` set, SIGTERM and SIGUSR1 are passed on as signals that stop the processes at the end of a step.
int spawn(std::vector<std::string> argv, const std::map<std::string, std::string>& env, const std::string& out,
          const std::string& missing, MpirunOutput* filter = nullptr) {
    std::vector<char*> c_args;
    for (auto& a : argv) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    std::cout << std::flush;
    int err[2] = {-1, -1};
    if (filter && ::pipe2(err, O_CLOEXEC) != 0) filter = nullptr;
    const pid_t child = ::fork();
    if (child == 0) {
        for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
        if (!out.empty()) {
            const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) ::dup2(fd, STDOUT_FILENO), ::close(fd);
        }
        if (filter) ::dup2(err[1], STDERR_FILENO);
        ::execvp(c_args[0], c_args.data());
        std::cerr << fmt::format(fmt::runtime(missing), std::strerror(errno));
        std::_Exit(user_error);
    }
    struct sigaction pass = {}, old_int = {}, old_term = {}, old_hup = {}, old_usr1 = {};
    pass.sa_handler = pass_on;
    // A signal ignored when this process started (SIGHUP under nohup) stays ignored.
    auto take = [&](int signal, struct sigaction* old) {
        ::sigaction(signal, nullptr, old);
        if (old->sa_handler != SIG_IGN) ::sigaction(signal, &pass, nullptr);
    };
    if (filter) {
        waited_child = child;
        take(SIGINT, &old_int);
        take(SIGTERM, &old_term);
        take(SIGHUP, &old_hup);
        if (stops) take(SIGUSR1, &old_usr1);
        ::close(err[1]);
        char buffer[4096];
        for (;;) {
            const ssize_t n = ::read(err[0], buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            filter->add(std::string_view(buffer, static_cast<std::size_t>(n)));
        }
        filter->finish();
        ::close(err[0]);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (filter) {
        waited_child = 0;
        ::sigaction(SIGINT, &old_int, nullptr);
        ::sigaction(SIGTERM, &old_term, nullptr);
        ::sigaction(SIGHUP, &old_hup, nullptr);
        if (stops) ::sigaction(SIGUSR1, &old_usr1, nullptr);
        if (WIFSIGNALED(status)) filter->mpirun_signal = WTERMSIG(status);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : internal;
}

}  // namespace

int threads_per_process(std::int64_t procs) {
    const auto cores = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
    return static_cast<int>(std::max<std::int64_t>(1, cores / std::max<std::int64_t>(1, procs)));
}

void MpirunOutput::add(std::string_view bytes) {
    for (const char c : bytes) {
        partial_ += c;
        line_ += c;
        if (c == '\n') {
            watchdog_ended_ = watchdog_ended_ || line_.find("; the run ends rather than hang") != std::string::npos;
            line_.clear();
        }
        if (c == '\n') {
            line(partial_);
            partial_.clear();
            passed_ = false;
        }
    }
    // The start of a line that is not mpirun's (a notice starts with dashes, a note about notices with
    // '[', its word that it passed a signal on with "mpirun: "): passed on at once, as a process wrote it.
    static constexpr std::string_view forwarding = "mpirun: Forwarding signal";
    const bool maybe_forwarding = forwarding.substr(0, std::min(forwarding.size(), partial_.size())) ==
                                  std::string_view(partial_).substr(0, forwarding.size());
    if (!partial_.empty() && !in_notice_ && partial_[0] != '-' && partial_[0] != '[' && !maybe_forwarding) {
        std::cerr << partial_ << std::flush;
        partial_.clear();
        passed_ = true;
    }
}

void MpirunOutput::finish() {
    if (!partial_.empty()) line(partial_ + "\n");
    partial_.clear();
    if (in_notice_) {  // never closed: said as it is
        for (const auto& l : notice_) std::cerr << l;
        notice_.clear();
        in_notice_ = false;
    }
    if (!death && !watchdog_ended_)
        for (const auto& l : held_) std::cerr << l;
    held_.clear();
    std::cerr << std::flush;
}

void MpirunOutput::line(const std::string& text) {
    if (passed_) {  // the rest of a line passed on in part
        std::cerr << text << std::flush;
        return;
    }
    const bool dashes = text.size() > 20 && text.find_first_not_of('-') == text.size() - 1;
    // "mpirun: Forwarding signal 12 to job": dsl passed the signal on itself, or the user sent it.
    if (!in_notice_ && text.rfind("mpirun: Forwarding signal", 0) == 0) return;
    if (!in_notice_) {
        if (dashes) {
            in_notice_ = true;
            notice_.assign(1, text);
            return;
        }
        // "[host:pid] 1 more process has sent help message ...", "[host:pid] Set MCA parameter ...": about
        // notices held back. Other lines of Open MPI's own ("[host:pid] Read -1, expected 9216, errno = 3"
        // from a process whose peer died) wait for the end: after a death they only repeat it.
        static const std::regex aggregated(
            R"(^\[[^\]]*\] (\d+ more process|Set MCA parameter "orte_base_help_aggregate"))");
        static const std::regex open_mpi(R"(^\[[^\] ]+:\d+\] )");
        if (std::regex_search(text, aggregated)) return;
        if (std::regex_search(text, open_mpi))
            held_.push_back(text);
        else
            std::cerr << text << std::flush;
        return;
    }
    notice_.push_back(text);
    if (!dashes) return;
    in_notice_ = false;
    std::string all;
    for (const auto& l : notice_) all += l;
    notice_.clear();
    // "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."
    static const std::regex died(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+))");
    std::smatch m;
    if (std::regex_search(all, m, died)) {
        if (!death) death = Death{std::stoi(m[1].str()), std::stoi(m[3].str()), m[2].str()};
        return;
    }
    // What the processes said already: one ended with an error, or called MPI_Abort having said why.
    for (const char* known : {"non-zero exit code", "non-zero status", "MPI_ABORT was invoked"})
        if (all.find(known) != std::string::npos) return;
    std::cerr << all << std::flush;
}

namespace {

// A folder of this launch's own for mpirun's session directory (its files for the job), removed when the
// launch ends. Open MPI 4 keeps every job of a user under one /tmp/ompi.HOST.UID and removes it as a job
// ends, so a run starting meanwhile (two dsl runs at once, or the test suite's) could fail to make its own
// there (open-mpi/ompi#8510). Empty where one could not be made, or the user chose the place.
class SessionFolder {
public:
    SessionFolder() {
        if (std::getenv("OMPI_MCA_orte_tmpdir_base")) return;
        const char* tmp = std::getenv("TMPDIR");
        std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dsl-mpi-XXXXXX";
        if (::mkdtemp(pattern.data())) path_ = pattern;
    }
    ~SessionFolder() {
        std::error_code ignored;
        if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
    }
    SessionFolder(const SessionFolder&) = delete;
    SessionFolder& operator=(const SessionFolder&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace

int launch_mpi(std::int64_t procs, const std::vector<std::string>& args, bool stop_at_step) {
    stops = stop_at_step;
    // A stop asked for before the processes start: nothing is done, and nothing is to be saved.
    if (stop_at_step && stop_signal() != 0) {
        std::cerr << fmt::format("stopped by {} before the first step: nothing to save\n", signal_name(stop_signal()));
        return stopped;
    }
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const int threads = threads_per_process(procs);
    // mpirun's notices go through MpirunOutput: most repeat what a process that stopped with an error has
    // said; the one that names a process killed by a signal is said in one line.
    std::vector<std::string> argv{"mpirun", "-np", std::to_string(procs)};
    if (procs > static_cast<std::int64_t>(cores)) argv.push_back("--oversubscribe");
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    // One process per core, bound to it; several threads per process share the machine unbound.
    argv.insert(argv.end(), {"--bind-to", threads == 1 && procs <= static_cast<std::int64_t>(cores) ? "core" : "none"});
    if (!std::getenv("OMP_NUM_THREADS")) argv.insert(argv.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", threads)});
    if (stop_at_step) argv.insert(argv.end(), {"-x", fmt::format("{}=1", passed_on_sigterm)});
    MpirunOutput output;
    int code = 0;
    {
        const SessionFolder session;
        if (!session.path().empty()) argv.insert(argv.end(), {"--mca", "orte_tmpdir_base", session.path()});
        argv.push_back(self_path());
        argv.insert(argv.end(), args.begin(), args.end());
        code = spawn(argv, {}, "",
                     fmt::format("error: cannot start mpirun ({{}}): install Open MPI (openmpi-bin), or start "
                                 "the run with 'mpirun -np {} dsl ...'\n",
                                 procs),
                     &output);
    }
    if (ended_by) ::raise(ended_by);  // as if it had come now, the run having ended
    if (output.death) {
        const auto& d = *output.death;
        const std::string who = fmt::format("process {} of {} (on host {})", d.rank, procs, d.host);
        if (d.signal == SIGSEGV || d.signal == SIGBUS || d.signal == SIGFPE || d.signal == SIGILL ||
            d.signal == SIGABRT) {
            std::cerr << fmt::format(
                "dsl: internal error: {} crashed with signal {} ({})\nThis is a bug in dsl; please report it.\n", who,
                d.signal, signal_name(d.signal));
            return internal;
        }
        std::cerr << fmt::format("error: {} was killed by signal {} ({}){}\n", who, d.signal, signal_name(d.signal),
                                 d.signal == SIGKILL ? ", perhaps by the out-of-memory killer (a schedule that splits "
                                                       "the rows and columns more ways needs less memory per process)"
                                                     : "");
        return killed;
    }
    if (output.mpirun_signal) {
        std::cerr << fmt::format("error: mpirun, which ran the processes, was killed by signal {} ({})\n",
                                 output.mpirun_signal, signal_name(output.mpirun_signal));
        return killed;
    }
    if (code > 128) {  // mpirun's way of saying that a process died of signal code - 128, unnamed
        std::cerr << fmt::format("error: a process of the run was killed by signal {} ({})\n", code - 128,
                                 signal_name(code - 128));
        return killed;
    }
    return code;
}

int launch_child(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                 const std::string& stdout_path) {
    std::vector<std::string> argv{self_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return spawn(argv, env, stdout_path, "error: cannot start dsl again ({})\n");
}

}  // namespace dsl::cli
