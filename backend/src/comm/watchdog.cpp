// The watchdog (watchdog.hpp): a thread that compares the time since this process last made progress with its
// allowance, and a table in the node's shared memory where each process's watchdog says, every period, that it
// runs; a process stopped or hung outside dsl (SIGSTOP, a debugger, a lost node) stops saying so, and the
// watchdogs of the processes waiting for it name it.
#include <dsl/backend/watchdog.hpp>

#include "node_memory.hpp"

#include <dsl/backend/comm.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>

namespace dsl::backend {

namespace {

// CLOCK_MONOTONIC: one clock for every process of a node, so that one reads another's times in the table.
std::int64_t now_ns() {
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

double seconds(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// What the trainer reports, read by the watchdog's thread: plain atomics, so that reporting costs a store.
struct Reports {
    std::atomic<bool> watched{false};
    std::atomic<std::int64_t> progress_ns{0};
    std::atomic<const char*> awaited{nullptr};
    std::atomic<int> awaited_layer{-1}, working_layer{-1}, between{0};
    std::atomic<bool> stepped{false};
    std::atomic<double> longest_step{0.0};
    // The processes whose messages a wait still misses (the first `peers.size()` of them), where it knows them.
    std::atomic<int> peer_count{0};
    std::array<std::atomic<int>, 16> peers{};
};
Reports reports;

// A process of the run: who it is, for a message that names it.
struct Who {
    std::int64_t pid;
    char host[64];
};

// A process's row in the node's table: when its watchdog last ran.
struct Row {
    std::int64_t heartbeat_ns;  // 0 until the process has written its row
};

std::string host_name() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return host;
}

}  // namespace

void watchdog_progress() {
    if (reports.watched.load(std::memory_order_relaxed)) reports.progress_ns.store(now_ns(), std::memory_order_relaxed);
}

void watchdog_peers(const std::vector<int>& peers) {
    if (!reports.watched.load(std::memory_order_relaxed)) return;
    const std::size_t n = std::min(peers.size(), reports.peers.size());
    for (std::size_t i = 0; i < n; ++i) reports.peers[i].store(peers[i], std::memory_order_relaxed);
    reports.peer_count.store(static_cast<int>(peers.size()), std::memory_order_release);
}

void watchdog_layer(int layer) {
    if (!reports.watched.load(std::memory_order_relaxed)) return;
    reports.working_layer.store(layer, std::memory_order_relaxed);
    reports.progress_ns.store(now_ns(), std::memory_order_relaxed);
}

Awaiting::Awaiting(const char* what, int layer)
    : outer_what_(reports.awaited.load(std::memory_order_relaxed)),
      outer_layer_(reports.awaited_layer.load(std::memory_order_relaxed)) {
    if (!reports.watched.load(std::memory_order_relaxed)) return;
    reports.awaited_layer.store(layer, std::memory_order_relaxed);
    reports.awaited.store(what, std::memory_order_release);
}

Awaiting::~Awaiting() {
    if (!reports.watched.load(std::memory_order_relaxed)) return;
    reports.awaited_layer.store(outer_layer_, std::memory_order_relaxed);
    reports.awaited.store(outer_what_, std::memory_order_release);
    reports.progress_ns.store(now_ns(), std::memory_order_relaxed);
}

Watchdog::Between::Between() {
    reports.between.fetch_add(1);
    watchdog_progress();
}

Watchdog::Between::~Between() {
    reports.between.fetch_sub(1);
    watchdog_progress();
}

namespace {

// The thread and what it knows of the run; one per process at most.
struct Watch {
    double timeout = 0.0;    // --timeout, or 0 for the default rule
    double predicted = 0.0;  // the model's step, seconds (0: none)
    std::vector<std::string> layers;
    int exit_code = 1, rank = 0, size = 1;
    std::string host;
    std::unique_ptr<NodeMemory> table;  // the Row of every process of this node, where they share memory
    std::vector<Who> everyone;          // every process of the run, by rank
    std::mutex mutex;
    std::condition_variable wake;
    bool ending = false;
    std::thread thread;

    Row& row(int process) const { return static_cast<Row*>(table->data())[process]; }

    // The seconds of no progress allowed in a step after the first.
    double allowance_base() const {
        if (timeout > 0.0) return timeout;
        return std::max(300.0, 10.0 * std::max(predicted, reports.longest_step.load(std::memory_order_relaxed)));
    }
    // The seconds of no progress allowed now.
    double allowance() const {
        const double base = allowance_base();
        const bool longer = !reports.stepped.load(std::memory_order_relaxed) || reports.between.load() > 0;
        return longer ? 4.0 * base : base;
    }
    // How often the thread looks: often enough to fire within a tenth of a short timeout, at most once a second.
    std::chrono::milliseconds period() const {
        const double base = timeout > 0.0 ? timeout : 300.0;
        return std::chrono::milliseconds(static_cast<std::int64_t>(1000.0 * std::clamp(base / 10.0, 0.05, 1.0)));
    }

    void beat() const {
        if (table) std::atomic_ref<std::int64_t>(row(rank).heartbeat_ns).store(now_ns(), std::memory_order_release);
    }

    std::string layer_name(int layer) const {
        return layer >= 0 && static_cast<std::size_t>(layer) < layers.size() ? layers[static_cast<std::size_t>(layer)]
                                                                             : std::string();
    }

    // "process 3 of 4 (host h, pid 7)".
    std::string named(int process) const {
        if (process < 0 || static_cast<std::size_t>(process) >= everyone.size())
            return fmt::format("process {} of {}", process, size);
        const Who& w = everyone[static_cast<std::size_t>(process)];
        return fmt::format("process {} of {} (host {}, pid {})", process, size,
                           std::string(w.host, strnlen(w.host, sizeof w.host)), w.pid);
    }

    // The processes a wait still misses messages from or to, on any node: " with process 3 of 4 (host h, pid 7)".
    std::string peers() const {
        const int count = reports.peer_count.load(std::memory_order_acquire);
        if (count <= 0) return "";
        const int shown = std::min<int>(count, static_cast<int>(reports.peers.size()));
        std::string out = " with ";
        for (int i = 0; i < shown; ++i)
            out += (i ? ", " : "") + named(reports.peers[static_cast<std::size_t>(i)].load(std::memory_order_relaxed));
        return count > shown ? out + fmt::format(" and {} more", count - shown) : out;
    }

    // What this process was doing when it stopped making progress.
    std::string doing() const {
        if (const char* what = reports.awaited.load(std::memory_order_acquire)) {
            const std::string layer = layer_name(reports.awaited_layer.load(std::memory_order_relaxed));
            return fmt::format("it waited for {}{}{}", what, layer.empty() ? "" : fmt::format(" of layer '{}'", layer),
                               peers());
        }
        if (reports.between.load() > 0) return "it was between steps (saving, evaluating, or checking with the others)";
        if (!reports.stepped.load()) return "it was in the first step (or setting it up)";
        const std::string layer = layer_name(reports.working_layer.load(std::memory_order_relaxed));
        return layer.empty() ? "it was computing" : fmt::format("it was computing layer '{}'", layer);
    }

    // The processes of this node whose watchdog has not run for a while: stopped, or hung where no thread runs.
    std::string stopped_processes(std::int64_t now) const {
        if (!table)
            return size > 1 ? "; the other processes are on other nodes, where this one cannot see whether they run"
                            : "";
        const std::int64_t stale = suspended_ns();
        std::string out;
        for (int p = 0; p < size; ++p) {
            if (p == rank) continue;
            const Row& r = row(p);
            const std::int64_t beat = std::atomic_ref<std::int64_t>(const_cast<Row&>(r).heartbeat_ns).load();
            if (beat == 0 || now - beat < stale) continue;
            out += fmt::format("; {} has not run for {:.0f} s: it is stopped (SIGSTOP, a debugger) or its node is lost",
                               named(p), seconds(now - beat));
        }
        return out.empty() && size > 1 ? "; every other process of the run is running" : out;
    }

    [[noreturn]] void fire(std::int64_t now, double allowed) const {
        const std::string message = fmt::format(
            "error: process {} of {} (host {}, pid {}) made no progress for {:.0f} s, past its limit of {:g} s "
            "(--timeout{}): {}{}; the run ends rather than hang\n",
            rank, size, host, ::getpid(), seconds(now - reports.progress_ns.load()), allowed,
            allowed > allowance_base() ? ", times 4 for the first step and between steps" : "", doing(),
            stopped_processes(now));
        // The step lines printed so far, unless the main thread holds the standard output (blocked in a write).
        if (::ftrylockfile(stdout) == 0) {
            std::fflush(stdout);
            ::funlockfile(stdout);
        }
        for (std::size_t done = 0; done < message.size();) {
            const ssize_t n = ::write(STDERR_FILENO, message.data() + done, message.size() - done);
            if (n <= 0) break;
            done += static_cast<std::size_t>(n);
        }
        // The main thread is blocked in MPI or a read: nothing is left to unwind that matters, and exit's
        // destructors could wait on it.
        ::_exit(exit_code);
    }

    // A gap between two looks longer than this: the process itself was stopped (SIGSTOP, a job suspended by
    // its scheduler) and continued.
    std::int64_t suspended_ns() const { return std::max<std::int64_t>(2000000000, 3 * period().count() * 1000000); }

    void run() {
        std::unique_lock<std::mutex> lock(mutex);
        std::int64_t looked = now_ns();
        while (!wake.wait_for(lock, period(), [&] { return ending; })) {
            beat();
            const std::int64_t now = now_ns();
            // The time this process was stopped is no time it failed to use: its allowance starts again (a job
            // that Slurm suspends and resumes stops and continues every process).
            if (now - looked > suspended_ns()) reports.progress_ns.store(now);
            looked = now;
            const double allowed = allowance();
            if (seconds(now - reports.progress_ns.load()) > allowed) fire(now, allowed);
        }
    }
};

std::unique_ptr<Watch> watch;

}  // namespace

Watchdog::Watchdog(Comm& comm, double timeout, double predicted_step, std::vector<std::string> layers, int exit_code) {
    auto w = std::make_unique<Watch>();
    w->timeout = timeout;
    w->predicted = predicted_step;
    w->layers = std::move(layers);
    w->exit_code = exit_code;
    w->rank = comm.rank();
    w->size = comm.size();
    w->host = host_name();
    if (const auto handle = comm.mpi_handle(); handle && comm.size() > 1) {
        Who me{::getpid(), {}};
        std::strncpy(me.host, w->host.c_str(), sizeof me.host - 1);
        w->everyone.resize(static_cast<std::size_t>(comm.size()));
        MPI_Allgather(&me, sizeof me, MPI_BYTE, w->everyone.data(), sizeof me, MPI_BYTE, MPI_Comm_f2c(*handle));
        w->table =
            NodeMemory::map(MPI_Comm_f2c(*handle), sizeof(Row) * static_cast<std::size_t>(comm.size()), "watchdog");
        if (w->table) w->beat();
    }
    reports.stepped = false;
    reports.longest_step = 0.0;
    reports.between = 0;
    reports.awaited = nullptr;
    reports.working_layer = -1;
    reports.peer_count = 0;
    reports.progress_ns = now_ns();
    reports.watched = true;
    watch = std::move(w);
    watch->thread = std::thread([] { watch->run(); });
}

Watchdog::~Watchdog() {
    {
        const std::lock_guard<std::mutex> lock(watch->mutex);
        watch->ending = true;
    }
    watch->wake.notify_all();
    watch->thread.join();
    reports.watched = false;
    watch.reset();
}

void Watchdog::step_done(double seconds) {
    reports.longest_step = std::max(reports.longest_step.load(), seconds);
    reports.stepped = true;
    watchdog_progress();
}

}  // namespace dsl::backend
