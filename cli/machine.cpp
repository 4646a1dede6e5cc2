// This machine's identity and the per-user cache of its measured platform.
#include "machine.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#ifndef DSL_VERSION
#define DSL_VERSION "unknown"
#endif

namespace dsl::cli {

namespace fs = std::filesystem;

Machine current_machine() {
    Machine m;
    m.cpu = "unknown CPU";
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
            m.cpu = line.substr(std::min(line.size(), line.find(':') + 2));
            break;
        }
    m.cores = std::max(1u, std::thread::hardware_concurrency());
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    double kib = 0.0;
    while (meminfo >> key >> kib)
        if (key == "MemTotal:") {
            m.memory = kib * 1024.0;
            break;
        } else
            meminfo.ignore(1 << 10, '\n');
    m.version = DSL_VERSION;
    return m;
}

double load_average() {
    double load = 0.0;
    std::ifstream("/proc/loadavg") >> load;
    return load;
}

std::string machine_text(const Machine& m) {
    // Whole GiB: what the kernel reserves moves MemTotal by a few MiB between boots.
    return fmt::format("{}, {} core{}, {:.0f} GiB, dsl {}", m.cpu, m.cores, m.cores == 1 ? "" : "s",
                       std::round(m.memory / (1u << 30)), m.version);
}

fs::path cache_dir() {
    auto set = [](const char* name) -> const char* {
        const char* v = std::getenv(name);
        return v && *v ? v : nullptr;
    };
    if (const char* d = set("DSL_CACHE_DIR")) return d;
    if (const char* d = set("XDG_CACHE_HOME")) return fs::path(d) / "dsl";
    if (const char* d = set("HOME")) return fs::path(d) / ".cache" / "dsl";
    return fs::temp_directory_path() / fmt::format("dsl-cache-{}", ::getuid());
}

fs::path cache_file(const Machine& m) {
    // FNV-1a: the same name on every build, unlike std::hash.
    std::uint64_t h = 14695981039346656037ull;
    for (unsigned char c : machine_text(m)) h = (h ^ c) * 1099511628211ull;
    return cache_dir() / fmt::format("local-{:016x}.platform", h);
}

std::string written_at(const fs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return {};
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&st.st_mtime));
    return text;
}

}  // namespace dsl::cli
