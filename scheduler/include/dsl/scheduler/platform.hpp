// Platforms: the machine a schedule runs on, as the performance model sees it. A `.platform` file gives the
// processors per node, memory per processor, latency and bandwidth within and between nodes, and how compute
// time is known: measured kernel times (`dsl calibrate` writes them) or, where none is measured, an analytic
// fallback from peak FLOP/s and memory bandwidth.
#pragma once

#include <dsl/base/diagnostics.hpp>
#include <dsl/frontend/platform_ast.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dsl::scheduler {

// The linear model of a message of n bytes: latency + n / bandwidth (full duplex, no interference).
struct Link {
    double latency = 0.0;    // seconds
    double bandwidth = 0.0;  // bytes per second
};

enum class Device { cpu, gpu };

struct Platform {
    std::string path;                     // the file it was read from; empty when made in code
    Device device = Device::cpu;          // on a CPU platform a process may use several cores (threads)
    std::int64_t procs_per_node = 1;      // processors per node: GPUs, or cores on a CPU platform
    std::int64_t nodes = 0;               // nodes there are; 0: as many as a run needs
    double memory = 0.0;                  // bytes per processor
    double flops = 0.0;                   // peak FLOP/s of one processor (one core on a CPU platform)
    // Peak FLOP/s of products in bfloat16 and in float16, summed in float32 (a GPU's tensor cores), for the
    // convolutions that multiply in them where no time is measured; 0: none given (float32's figures).
    double bfloat16_flops = 0.0, float16_flops = 0.0;
    double efficiency = 0.5;              // the fraction of `flops` convolutions reach where no time is measured
    double memory_bandwidth = 0.0;        // bytes per second one processor reads and writes
    double kernel_latency = 0.0;          // seconds every kernel call costs beyond its work
    std::int64_t compute_units = 0;       // a GPU's SMs, over which convolutions' tiles run in waves; 0: no waves
    double workspace = 0.0;               // bytes per process for kernel scratch and runtimes
    // Bytes per second one process reads of the data set's files (its input and label tiles); 0: not given,
    // default_io_bandwidth.
    double io_bandwidth = 0.0;
    Link node;                            // between processes of one node
    Link network;                         // between nodes
    std::map<std::string, double> times;  // measured seconds, by time_key()
    // Empty where a CPU platform's kernels run tiles kept in blocks of 16 channels (AVX-512's); else why they
    // do not. Not a file's: set for `local`, this machine, from its kernels.
    std::string planar_why;
};

// The read rate a platform without `io_bandwidth` is taken to have, per process: 1 GB/s, a stated assumption
// (not a measurement): about one SATA SSD's sequential reads, or a share of a parallel file system's.
inline constexpr double default_io_bandwidth = 1e9;

// One field of a measured time: `x=1x18x65x65` is {"x", {1, 18, 65, 65}}.
using TimeField = std::pair<std::string, std::vector<std::int64_t>>;

// The canonical key of a measured time: the kernel name, then its fields sorted by name, separated by
// single spaces: "conv.forward k=3x3 s=2x2 threads=1 x=1x18x65x65 y=1x16x32x32". A `time` line of a file is
// stored under this key, and the model looks times up by it.
std::string time_key(const std::string& kernel, std::vector<TimeField> fields);

// A time key read back: its kernel name and fields. `field` is empty for one the key does not have.
struct TimeKey {
    std::string kernel;
    std::map<std::string, std::vector<std::int64_t>> fields;
    const std::vector<std::int64_t>& field(const std::string& name) const;
};
std::optional<TimeKey> parse_time_key(const std::string& key);  // nullopt for text that is not one

// The platform a `.sched` file or a command line names: a stdlib name ("local" is
// stdlib/platforms/local.platform) or a path to something that exists. Empty when there is none.
std::string platform_path(const std::string& name_or_path);
std::vector<std::string> stdlib_platforms();  // the names under stdlib/platforms, sorted

// Checks a parsed file's settings (known keys, units of the right kind, values in range, required ones
// present) and its times; every independent error is reported. nullopt when there were errors.
std::optional<Platform> platform_from_file(const frontend::PlatformFile& file, Diagnostics& diags);

// Reads, parses and checks a `.platform` file.
std::optional<Platform> load_platform(const std::string& path, SourceManager& sources, Diagnostics& diags);

// The canonical text of a platform (settings in a fixed order with readable units, then every time sorted
// by key), after `comment` (each of its lines prefixed with "# "). It loads back to the same platform, up to
// the rounding of printed numbers to 6 significant digits.
std::string print_platform(const Platform& platform, const std::string& comment);

}  // namespace dsl::scheduler
