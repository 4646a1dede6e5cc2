// `dsl calibrate NET -o FILE`: measures what the performance model needs on this machine and writes it into
// a platform file: forward, backward-data and backward-weights convolution (and every other layer's kernels)
// on the local tiles that the candidate schedules of the network give, for each process count and the
// threads a process has at that count (warm-up runs, then ten timed, as the reference paper does, of which the median);
// point-to-point exchanges and allreduces over MPI for a range of message sizes. Each thread count is
// measured in a process of its own (oneDNN sizes its thread team when it creates a primitive), the
// communication under mpirun. Times already in FILE that were not measured again are kept. Without -o, FILE
// is this machine's `local` in the cache, which measure_local (below) also fills, on demand, with what a
// command needs. What is measured, and the measuring in those processes, are the backend's
// (dsl/backend/calibrate.hpp); here are the command, the processes' start and the file.
#include "commands.hpp"
#include "launch.hpp"
#include "machine.hpp"
#include "planning.hpp"
#include "report.hpp"

#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/comm.hpp>
#include <dsl/backend/gpu.hpp>
#include <dsl/scheduler/kernel_names.hpp>

#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

namespace dsl::cli {

namespace {

namespace fs = std::filesystem;

// The command's options: what is measured, and how (backend::CalibrationSettings), and where it goes.
struct CalibrateOptions : backend::CalibrationSettings {
    std::string net, output, platform, dump_after;
    // A measuring process of its own (hidden): "kernels", "comm" or "profile", the keys to time and where
    // results go.
    std::string worker, keys, results;
    std::string device = "cpu";  // the option as given: `gpu` says whether it names the GPU

    // What every worker is told beyond its job.
    std::vector<std::string> worker_args() const {
        if (!gpu) return {};
        return {"--device", "gpu", "--gpu-workspace", std::to_string(gpu_workspace)};
    }
};

// A worker's measured times, for the command that started it: whole, or an error naming the file.
int results_written(const CalibrateOptions& o, const std::string& text) {
    std::string why;
    if (replace_file(o.results, text, why)) return ok;
    std::cerr << "error: " << why << "\n";
    return user_error;
}

// A kernel worker: the keys its file lists, timed on this process's threads (or its GPU), with progress on
// a terminal.
int kernel_worker(const CalibrateOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    auto net = scheduler::Pipeline().network(o.net, sources, diags);
    if (!net) return user_error;
    backend::KernelTimer timer(net->net, o);
    std::ifstream in(o.keys);
    std::vector<std::string> keys;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) keys.push_back(line);
    std::vector<std::pair<std::string, double>> times;
    std::size_t done = 0;
    for (const std::string& key : keys) {
        std::string why;
        if (auto s = timer.time(key, why))
            times.emplace_back(key, *s);
        else
            std::cerr << fmt::format("warning: cannot time '{}': {}\n", key, why);
        if (++done % 25 == 0 && stderr_color())
            std::cerr << fmt::format("\r  {}/{} kernels", done, keys.size()) << std::flush;
    }
    if (stderr_color()) std::cerr << "\r" << std::string(30, ' ') << "\r";
    return results_written(o, backend::results_text(times));
}

// The end of a worker over MPI: process 0 hands back the times, then MPI ends.
int collective_results(const CalibrateOptions& o, std::unique_ptr<backend::Comm> comm,
                       const std::vector<std::pair<std::string, double>>& times) {
    int code = ok;
    if (comm->rank() == 0) code = results_written(o, backend::results_text(times));
    comm.reset();
    backend::mpi_finalize();
    return code;
}

// A communication worker: allreduces (and exchanges) over the processes mpirun started.
int comm_worker(const CalibrateOptions& o) {
    const backend::Kernels kernels = backend::measuring_kernels(o);
    auto comm = backend::measuring_comm(o);
    const auto times = backend::time_communication(*comm, o.max_message, o.runs(), o.exchanges, kernels.mem());
    return collective_results(o, std::move(comm), times);
}

// A profile worker: training steps under every split of the processes mpirun started (step_profiles).
int profile_worker(const CalibrateOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    auto loaded = scheduler::Pipeline().network(o.net, sources, diags);
    // The platform measured so far (kernels, communication), for the model's own shuffle estimates.
    auto measured_so_far = scheduler::load_platform(o.platform, sources, diags);
    if (!loaded || !measured_so_far) {
        diags.render(std::cerr, stderr_color());
        return user_error;
    }
    const backend::Kernels kernels = backend::measuring_kernels(o);
    auto comm = backend::measuring_comm(o);
    const auto times = backend::step_profiles(loaded->net, std::move(*measured_so_far), o, kernels, *comm);
    return collective_results(o, std::move(comm), times);
}

int measure(const CalibrateOptions& o, const backend::CalibrationPlan& n, scheduler::Platform& platform,
            std::size_t& measured);
constexpr const char* local_note =
    ".\nIt is 'local' there: a command that needs times not here yet measures them and adds them here";
bool write_platform(const CalibrateOptions& o, const scheduler::Platform& platform, const std::string& machine,
                    const std::string& run, std::string& why);

int run_calibrate(CalibrateOptions o) {
    if (o.worker == "kernels") return kernel_worker(o);
    if (o.worker == "comm") return comm_worker(o);
    if (o.worker == "profile") return profile_worker(o);

    SourceManager sources;
    Diagnostics diags;
    auto checked = scheduler::Pipeline(stage_dump(o.dump_after)).check(o.net, "", sources, diags, {}, o.in_situ);
    // Times already in the output file are kept: it must be a platform file, or not exist.
    std::optional<PlatformChoice> base;
    std::error_code ec;
    if (o.output.empty() && o.gpu) {
        std::cerr << "error: --device gpu needs -o FILE (without it, calibrate refreshes this machine's 'local')\n";
        return usage;
    }
    if (o.output.empty()) {
        // This machine's `local` in the cache: what it has is measured again, the rest kept.
        if (checked) base = machine_platform(sources, diags);
        if (base) o.output = base->cache, fs::create_directories(fs::path(o.output).parent_path(), ec);
    } else if (fs::exists(o.output, ec)) {
        auto existing = scheduler::load_platform(o.output, sources, diags);
        if (!existing) {
            diags.render(std::cerr, stderr_color());
            throw UserError(fmt::format("-o '{}' exists and is not a platform file; it is left as it is", o.output));
        }
        base = PlatformChoice{std::move(*existing), o.output, {}};
    } else if (checked) {
        base = resolve_platform(o.platform, std::nullopt, sources, diags);
        if (base) base->platform.times.clear(), base->cache.clear();  // its settings, not another file's times
    }
    diags.render(std::cerr, stderr_color());
    if (!checked || !base) return user_error;
    const auto& net = checked->net.net;
    std::string no_gpu;
    if (o.gpu && backend::gpu_devices(&no_gpu) == 0) {
        throw UserError("cannot calibrate a GPU (--device gpu): " + no_gpu);
    }
    if (o.float16 && !o.gpu)
        throw UserError(
            "--float16: only a GPU's convolutions multiply in float16 (--device gpu); a CPU's layers of "
            "precision=float16 multiply in float32");
    if (const std::string why = unwritable(o.output); !why.empty()) {  // before anything is measured
        throw UserError("-o: " + why);
    }
    // Processors: this machine's cores, or its GPUs.
    const unsigned cores =
        o.gpu ? static_cast<unsigned>(backend::gpu_devices()) : std::max(1u, std::thread::hardware_concurrency());
    if (o.procs.empty()) {
        for (std::int64_t p = 1; p <= static_cast<std::int64_t>(cores); p *= 2) o.procs.push_back(p);
        if (o.procs.back() != static_cast<std::int64_t>(cores)) o.procs.push_back(cores);
    }
    if (o.gpu) o.gpu_workspace = static_cast<std::int64_t>(base->platform.workspace);
    std::sort(o.procs.begin(), o.procs.end());
    o.procs.erase(std::unique(o.procs.begin(), o.procs.end()), o.procs.end());
    scheduler::Platform platform = backend::calibrated_machine(base->platform, o.gpu);
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t measured = 0;
    if (const int code = measure(o, backend::plan_calibration(net, platform, o, false), platform, measured); code != ok)
        return code;
    std::string procs_list, batch_list, why;
    for (auto p : o.procs) procs_list += fmt::format(" {}", p);
    for (auto b : o.batches) batch_list += fmt::format(" {}", b);
    const std::string run = fmt::format("Calibrated by 'dsl calibrate {} --procs{} --batch{}{}{}'", o.net, procs_list,
                                        batch_list, o.in_situ ? "" : " --kernels-only", o.gpu ? " --device gpu" : "");
    const std::string machine = o.gpu ? fmt::format("{}, {} GPU{}", backend::gpu_name(), cores, cores == 1 ? "" : "s")
                                      : machine_text(current_machine()) + (base->cache.empty() ? "" : local_note);
    if (!write_platform(o, platform, machine, run, why)) {
        throw UserError(why);
    }
    std::cout << fmt::format("wrote {}: {} times measured in {:.0f} s ({} in the file)\n", o.output, measured,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                             platform.times.size());
    return ok;
}

// Measures what `n` names on this machine into `platform` (this machine's), with progress on stderr, and counts
// the times in `measured`. Not ok (having said why) when a measuring process failed.
int measure(const CalibrateOptions& o, const backend::CalibrationPlan& n, scheduler::Platform& platform,
            std::size_t& measured) {
    std::error_code ec;
    const std::vector<std::string> extra = o.worker_args();
    auto with_extra = [&](std::vector<std::string> args) {
        args.insert(args.end(), extra.begin(), extra.end());
        return args;
    };

    const fs::path dir = fs::temp_directory_path() / fmt::format("dsl_calibrate_{}", ::getpid());
    fs::create_directories(dir);
    // The time left, said as each part starts: the estimate of the parts not done, scaled by how long those
    // done took against theirs (a machine slower or busier than the model's figures).
    const auto start = std::chrono::steady_clock::now();
    double estimated_left = n.seconds(), estimated_done = 0.0;
    auto left = [&](double part) {
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double scale = estimated_done > 0.0 && took > 0.0 ? took / estimated_done : 1.0;
        const std::string text = duration_text(estimated_left * scale);
        estimated_left -= part;
        estimated_done += part;
        return text;
    };
    for (const auto& [threads, keys] : n.kernels) {
        std::cerr << fmt::format("timing {} kernels on {} thread{} ({} runs each after {} warm-up; about {} left)...\n",
                                 keys.size(), threads, threads == 1 ? "" : "s", o.reps, o.warmup,
                                 left(n.kernel_seconds.at(threads)));
        const fs::path keys_file = dir / fmt::format("keys_{}", threads),
                       results = dir / fmt::format("times_{}", threads);
        std::string list, why;
        for (const auto& k : keys) list += k + "\n";
        if (!replace_file(keys_file.string(), list, why)) {
            std::cerr << "error: " << why << "\n";
            fs::remove_all(dir, ec);
            return user_error;
        }
        const int code = launch_child(with_extra({"calibrate", o.net, "-o", o.output, "--worker", "kernels", "--keys",
                                                  keys_file.string(), "--results", results.string(), "--reps",
                                                  std::to_string(o.reps), "--warmup", std::to_string(o.warmup)}),
                                      {{"OMP_NUM_THREADS", std::to_string(threads)}});
        if (code != ok) {
            std::cerr << "error: timing the kernels failed\n";
            fs::remove_all(dir, ec);
            return code;
        }
        for (const auto& [k, s] : backend::read_results(results.string())) platform.times[k] = s, ++measured;
    }
    // Communication under each process count of its own, so that each is measured as a run of that many
    // processes has it (more processes than cores share them); exchanges with the fewest.
    std::vector<std::pair<double, double>> points;
    for (std::int64_t procs : n.comm) {
        const bool exchanges = n.exchanges && procs == n.comm.front();
        std::cerr << fmt::format("timing {}allreduces on {} processes (about {} left)...\n",
                                 exchanges ? "exchanges and " : "", procs, left(n.comm_seconds.at(procs)));
        const fs::path results = dir / fmt::format("comm_{}", procs);
        std::vector<std::string> args{"calibrate",
                                      o.net,
                                      "-o",
                                      o.output,
                                      "--worker",
                                      "comm",
                                      "--results",
                                      results.string(),
                                      "--reps",
                                      std::to_string(o.reps),
                                      "--warmup",
                                      std::to_string(o.warmup),
                                      "--max-message",
                                      std::to_string(o.max_message)};
        if (exchanges) args.push_back("--exchanges");
        const int code = launch_mpi(procs, with_extra(args));
        if (code != ok) {
            std::cerr << fmt::format("error: timing the communication on {} processes failed\n", procs);
            fs::remove_all(dir, ec);
            return code;
        }
        for (const auto& [k, s] : backend::read_results(results.string())) {
            platform.times[k] = s;
            ++measured;
            if (const auto key = scheduler::parse_time_key(k);
                key && key->kernel == scheduler::sendrecv_kernel && key->field("bytes").size() == 1)
                points.emplace_back(static_cast<double>(key->field("bytes").at(0)), s);
        }
    }
    if (!points.empty()) {
        const auto [latency, bandwidth] = backend::fit_link(points);
        platform.node = {latency, bandwidth};
        platform.network = platform.node;
    }
    // Each layer in training steps, under every split of each process count; and the memory a process holds
    // beyond what the model counts (the largest seen: processes of every count have it). The workers read
    // what is measured so far.
    double workspace = 0.0;
    const fs::path so_far = dir / "so_far.platform";
    if (std::string why; !replace_file(so_far.string(), scheduler::print_platform(platform, "measured so far"), why)) {
        std::cerr << "error: " << why << "\n";
        fs::remove_all(dir, ec);
        return user_error;
    }
    for (std::size_t p = 0; p < n.profiles.size(); ++p) {
        const auto [procs, batch] = n.profiles[p];
        const std::string time_left = left(n.profile_seconds.at(p));
        std::cerr << fmt::format(
            "profiling training steps under every split of {} process{}, batch {} (about {} left)...\n", procs,
            procs == 1 ? "" : "es", batch, time_left);
        const fs::path results = dir / fmt::format("layers_{}_{}", procs, batch);
        const int code = launch_mpi(
            procs, with_extra({"calibrate", o.net, "-o", o.output, "--worker", "profile", "--platform", so_far.string(),
                               "--results", results.string(), "--batch", std::to_string(batch), "--reps",
                               std::to_string(o.reps), "--warmup", std::to_string(o.warmup)}));
        if (code != ok) {
            std::cerr << fmt::format("error: profiling training on {} processes failed\n", procs);
            fs::remove_all(dir, ec);
            return code;
        }
        for (const auto& [k, s] : backend::read_results(results.string())) {
            if (k == "workspace")
                workspace = std::max(workspace, s);
            else
                platform.times[k] = s, ++measured;
        }
    }
    if (workspace > 0) platform.workspace = workspace;
    fs::remove_all(dir, ec);
    // The analytic fallback for shapes not measured: the median rate convolutions reached on one thread.
    std::vector<double> rates;
    for (const auto& [k, s] : platform.times)
        if (auto r = backend::conv_rate(k, s)) rates.push_back(*r);
    if (!rates.empty()) {
        std::sort(rates.begin(), rates.end());
        platform.flops = rates[rates.size() / 2] / platform.efficiency;
    }
    return ok;
}

// Writes `platform` to o.output after a comment: the `machine`, what its figures are, and which runs measured
// them (those the file lists, then `run`, dated). False with `why` when it cannot.
bool write_platform(const CalibrateOptions& o, const scheduler::Platform& platform, const std::string& machine,
                    const std::string& run, std::string& why) {
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    std::string runs;
    if (std::ifstream old(o.output); old)
        for (std::string line; std::getline(old, line);)
            if (line.rfind("# Calibrated by ", 0) == 0 || line.rfind("# Measured for ", 0) == 0)
                runs += line.substr(2) + "\n";
    runs += fmt::format("{} on {}.", run, date);
    const std::string comment = fmt::format(
        "This machine: {}.\n"
        "Kernel times (conv.forward, ...) are the median of {} calls after {} warm-up calls; factors\n"
        "(factor.conv.forward, ...) the time in training steps (under every split, without the waits for other\n"
        "processes) of every layer of that kind and tile size over the time of its kernels alone; drift those\n"
        "waits per millisecond of compute; shuffle what a redistribution costs beyond its transfer; latency and\n"
        "bandwidth a linear fit to the measured exchanges; flops the median rate of the measured convolutions\n"
        "over efficiency; workspace the resident memory of those steps beyond what the model counts. Run dsl\n"
        "calibrate again, with other networks, to add their shapes.\n{}",
        machine, o.reps, o.warmup, runs);
    return replace_file(o.output, scheduler::print_platform(platform, comment), why);
}

}  // namespace

void setup_calibrate(CLI::App& app, Action& action) {
    auto o = std::make_shared<CalibrateOptions>();
    CLI::App* sub = app.add_subcommand("calibrate", "Measure kernel and communication times for the performance model");
    sub->add_option("NET", o->net, "The network whose candidate schedules' tiles are timed (.net)")->required();
    sub->add_option("-o,--output", o->output,
                    "The platform file to write (its times are kept and added to; default: this machine's 'local', "
                    "in the cache)")
        ->check(file_name());
    sub->add_option("--procs", o->procs,
                    "Process counts to calibrate for (default: 1, 2, 4, ... up to this machine's cores)")
        ->delimiter(',')
        ->check(positive_count());
    sub->add_option("--batch", o->batches, "Mini-batch sizes (default 4)")->delimiter(',')->check(positive_count());
    sub->add_option("--platform", o->platform,
                    "The platform whose other settings the file starts from when it does not exist (default 'local')");
    sub->add_option("--reps", o->reps,
                    "Timed runs of each kernel (default 10; more, up to 100 times as many, until they add up to 50 ms)")
        ->check(positive_count(std::numeric_limits<int>::max()));
    sub->add_option("--warmup", o->warmup, "Runs before timing (default 2)")
        ->check(nonnegative_count(std::numeric_limits<int>::max()));
    sub->add_option("--max-message", o->max_message, "Largest message timed, bytes (default 64 MiB)")
        ->check(positive_count());
    sub->add_flag_callback(
        "--kernels-only", [o] { o->in_situ = false; },
        "Time kernels alone only, not each layer in training steps under every split as well");
    sub->add_flag("--bfloat16", o->bfloat16,
                  "Also time the convolutions with bfloat16 products (precision=bfloat16), where the kernels have "
                  "them (a CPU with AVX-512 BF16, a GPU)");
    sub->add_flag("--float16", o->float16,
                  "Also time the convolutions with float16 products (precision=float16), where the kernels have "
                  "them (a GPU)");
    sub->add_option("--device", o->device,
                    "cpu or gpu: whose kernels and communication are measured (default cpu); on a GPU, the file "
                    "says device = gpu and its processors are the GPUs")
        ->check(CLI::IsMember({"cpu", "gpu"}));
    add_dump_after(*sub, o->dump_after, scheduler::Stage::shapes);  // it reads no schedule: it tries them
    sub->add_option("--worker", o->worker)->group("");  // hidden: a measuring process of its own
    sub->add_option("--gpu-workspace", o->gpu_workspace)->group("");
    sub->add_option("--keys", o->keys)->group("");
    sub->add_option("--results", o->results)->group("");
    sub->add_flag("--exchanges", o->exchanges)->group("");
    sub->footer(
        "Example:\n  dsl calibrate samples/mesh_tiny.net --procs 1 2 4 --batch 4 -o my.platform\n"
        "  dsl calibrate samples/mesh_tiny.net --procs 2 --batch 8   (measures 'local' again)");
    sub->callback([o, &action] {
        o->gpu = o->device == "gpu";
        action = [o] { return run_calibrate(*o); };
    });
}

bool multiplies_in_bfloat16(const frontend::Network& net, const std::optional<scheduler::Schedule>& s) {
    if (!s) return false;
    for (std::size_t i = 0; i < net.layers.size() && i < s->layers.size(); ++i) {
        scheduler::Distribution d = s->layers[i];
        d.precision = d.precision.value_or(scheduler::Precision::bfloat16);  // open: it may be
        if (d.products16(net.layers[i].op) == scheduler::Precision::bfloat16) return true;
    }
    return false;
}

bool measure_local(PlatformChoice& p, const std::string& net_path, const frontend::Network& net,
                   std::vector<std::int64_t> procs, std::int64_t batch, std::string& why, bool bfloat16) {
    if (p.cache.empty()) return true;
    // Refused before anything is measured, at the layer, rather than a measurement that never ends.
    if (std::string reason; const frontend::Layer* l = backend::unfit_layer(net, current_machine().memory, reason)) {
        Diagnostics diags;
        diags.error(l->loc, reason);
        diags.render(std::cerr, stderr_color());
        why = fmt::format(
            "'{}' does not fit this machine: 'local' cannot be measured for it (--platform names "
            "another machine's figures)",
            net_path);
        return false;
    }
    CalibrateOptions o;
    o.net = net_path;
    o.output = p.cache;
    std::sort(procs.begin(), procs.end());
    procs.erase(std::unique(procs.begin(), procs.end()), procs.end());
    // Processes beyond the cores share them, and thousands would never start: counts past the cores (or 4, as
    // the tests' oversubscribed runs) are predicted from the analytic figures instead.
    const std::int64_t most = std::max<std::int64_t>(4, current_machine().cores);
    if (procs.back() > most) {
        std::cerr << fmt::format(
            "note: 'local' is measured for up to {} processes on this machine; for {} the model uses its analytic "
            "figures\n",
            most, procs.back());
        while (!procs.empty() && procs.back() > most) procs.pop_back();
        if (procs.empty()) return true;
    }
    o.procs = procs;
    o.batches = {batch};
    o.bfloat16 = bfloat16;
    // Messages up to the largest a step sends: a gradient, or a whole activation in a shuffle.
    double largest = 8.0;
    for (const auto& l : net.layers)
        largest = std::max({largest, 4.0 * static_cast<double>(l.params),
                            static_cast<double>(l.activation_bytes) * static_cast<double>(batch)});
    o.max_message = static_cast<std::int64_t>(std::min(largest, static_cast<double>(o.max_message)));
    const backend::CalibrationPlan n = backend::plan_calibration(net, p.platform, o, true);
    if (n.empty()) return true;
    std::string procs_text, procs_flag;  // "1, 2" and "1 2"
    for (auto c : procs)
        procs_text += fmt::format("{}{}", procs_text.empty() ? "" : ", ", c), procs_flag += fmt::format(" {}", c);
    const std::string what = fmt::format("{} on {} process{}, mini-batch {}", net_path, procs_text,
                                         procs.size() == 1 && procs[0] == 1 ? "" : "es", batch);
    if (backend::under_mpi()) {  // mpirun cannot start the measuring processes from within a run
        if (backend::launched_rank() == 0)
            std::cerr << fmt::format(
                "note: 'local' has no times measured for {} yet: the model falls back on its analytic figures (run "
                "'dsl calibrate {} --procs{} --batch {}' once, outside mpirun)\n",
                what, net_path, procs_flag, batch);
        return true;
    }
    std::cerr << fmt::format("measuring this machine for {} (once: kept in {}; about {})...\n", what, p.cache,
                             duration_text(n.seconds()));
    if (const Machine m = current_machine(); load_average() > m.cores)
        std::cerr << fmt::format(
            "note: the machine is busy (load average {:.1f} on {} cores): what is measured now may be off; run 'dsl "
            "calibrate {} --procs{} --batch {}' again when it is idle\n",
            load_average(), m.cores, net_path, procs_flag, batch);
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t measured = 0;
    if (measure(o, n, p.platform, measured) != ok) {
        why = "measuring this machine for 'local' failed (name another platform with --platform)";
        return false;
    }
    std::error_code ec;
    std::string unkept;
    fs::create_directories(fs::path(p.cache).parent_path(), ec);
    if (write_platform(o, p.platform, machine_text(current_machine()) + local_note,
                       fmt::format("Measured for {}", what), unkept))
        p.platform.path = p.cache;
    else
        std::cerr << fmt::format("warning: the times are not kept for later commands: {}\n", unkept);
    std::cerr << fmt::format("measured {} times in {:.0f} s\n", measured,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return true;
}

}  // namespace dsl::cli
