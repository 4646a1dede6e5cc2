// bench_memory: the peak resident memory a training step adds, per network, against the sum that `dsl check`
// reports (activations and their gradients, and parameters) and Trainer::memory_bytes(). Each network runs
// in a child process of its own, since the peak (VmHWM, ru_maxrss) is a high-water mark that never falls.
#include "common.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/scheduler/pipeline.hpp>

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

namespace {

using namespace dsl;
using namespace dsl::bench;

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM").
double status_bytes(const std::string& field) {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind(field + ":", 0) == 0) return 1024.0 * std::stod(line.substr(field.size() + 1));
    return 0.0;
}

constexpr double mib = 1024.0 * 1024.0;

// One network, in this (child) process: prints one table row.
int measure(const std::string& path, std::int64_t batch, int steps) {
    const frontend::Network net = load(path);
    std::string error;
    auto data = backend::make_data_source(net, 0, "", "", error);
    backend::TrainConfig cfg;
    cfg.batch = batch;
    const double rss_before = status_bytes("VmRSS");
    backend::Trainer trainer(net, backend::cpu_kernels(), cfg, scheduler::Pipeline().plan(net, {}, cfg.batch, 0, 1));
    const double after_create = status_bytes("VmRSS");
    for (int i = 0; i < steps; ++i) trainer.step(*data, i * batch);
    const double peak = status_bytes("VmHWM") - rss_before;
    const double activations = static_cast<double>(net.total_activation_bytes() * batch);
    const double params = 4.0 * static_cast<double>(net.total_params());
    const double sum = 2 * activations + params;  // activations, their gradients, parameters
    const double held = static_cast<double>(trainer.memory_bytes());
    std::cout << fmt::format("{:<28} {:>5} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.1f} {:>8.2f} {:>8.2f}\n", path,
                             batch, activations / mib, params / mib, sum / mib, held / mib, peak / mib, peak / sum,
                             peak / held);
    std::cout << fmt::format("{:<28} {:>5} (RSS {:.1f} MiB before the Trainer, +{:.1f} MiB after its constructor)\n",
                             "", "", rss_before / mib, (after_create - rss_before) / mib)
              << std::flush;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const int steps = static_cast<int>(env_int("BENCH_STEPS", 2));
    if (argc == 4 && std::string(argv[1]) == "--child") return measure(argv[2], std::atoll(argv[3]), steps);
    std::vector<std::pair<std::string, std::string>> cases;
    for (int i = 1; i + 1 < argc; i += 2) cases.emplace_back(argv[i], argv[i + 1]);
    if (argc > 1 && argc % 2 == 0) {
        std::cerr << "usage: bench_memory [NET BATCH]...   (env BENCH_STEPS)\n";
        return 2;
    }
    if (cases.empty())
        cases = {{"samples/mesh_tiny.net", "8"},
                 {"bench/mesh_stack_256.net", "2"},
                 {"bench/mesh_stack_512.net", "1"},
                 {"bench/mesh_stack_512.net", "2"}};
    std::cout << fmt::format("bench_memory: {}; load average {}; {} steps each, each network in a process of its own\n",
                             cpu_model(), load_average(), steps);
    std::cout << "sum = activations x 2 (their gradients) + parameters, as `dsl check` reports them; peak = the rise\n"
                 "of VmHWM over VmRSS before the Trainer was made. MiB. Target: peak / sum <= 1.3\n";
    std::cout << fmt::format("{:<28} {:>5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>8} {:>8}\n", "network", "batch",
                             "activations", "params", "sum", "memory_bytes", "peak", "peak/sum", "peak/held");
    int failures = 0;
    for (const auto& [net, batch] : cases) {
        std::cout << std::flush;  // before the child writes to the same stdout
        const pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", argv[0], "--child", net.c_str(), batch.c_str(), static_cast<char*>(nullptr));
            _exit(127);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
    return failures ? 1 : 0;
}
