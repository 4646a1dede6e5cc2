// `local`: the machine dsl runs on, as a platform whose times are measured on demand and kept in a per-user
// cache, one file per machine and dsl version.
#pragma once

#include <filesystem>
#include <string>

namespace dsl::cli {

// What the cache is keyed by: the processor, its cores, the memory, and dsl's version.
struct Machine {
    std::string cpu;      // /proc/cpuinfo's model name
    unsigned cores = 1;   // hardware threads
    double memory = 0.0;  // bytes, /proc/meminfo's MemTotal
    std::string version;  // dsl's
};
Machine current_machine();

// The load average over the last minute (/proc/loadavg); 0 where it cannot be read.
double load_average();

// "AMD EPYC 7B13, 2 cores, 23 GiB, dsl 0.1.0".
std::string machine_text(const Machine& m);

// The folder of measured platforms: $DSL_CACHE_DIR, else $XDG_CACHE_HOME/dsl, else ~/.cache/dsl.
std::filesystem::path cache_dir();

// The file of `m`'s measured times in the cache: "local-<hash of its key>.platform" (it may not exist).
std::filesystem::path cache_file(const Machine& m);

// When a file was last written, as "2026-11-23 20:15 UTC"; empty when it cannot be read.
std::string written_at(const std::filesystem::path& p);

}  // namespace dsl::cli
