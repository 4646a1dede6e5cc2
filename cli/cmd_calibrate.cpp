// `dsl calibrate NET -o FILE`: measures what the performance model needs on this machine and writes it into
// a platform file: forward, backward-data and backward-weights convolution (and every other layer's kernels)
// on the local tiles that the candidate schedules of the network give, for each process count and the
// threads a process has at that count (warm-up runs, then ten timed, as the reference paper does, of which the median);
// point-to-point exchanges and allreduces over MPI for a range of message sizes. Each thread count is
// measured in a process of its own (oneDNN sizes its thread team when it creates a primitive), the
// communication under mpirun. Times already in FILE that were not measured again are kept. Without -o, FILE
// is this machine's `local` in the cache, which measure_local (below) also fills, on demand, with what a
// command needs.
#include "commands.hpp"
#include "launch.hpp"
#include "machine.hpp"
#include "planning.hpp"

#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/comm.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/gpu.hpp>
#include <dsl/backend/kinds.hpp>
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
#include <set>
#include <sstream>
#include <thread>

namespace dsl::cli {

namespace {

namespace fs = std::filesystem;

struct CalibrateOptions {
    std::string net, output, platform;
    std::vector<std::int64_t> procs, batches{4};
    int reps = 10, warmup = 2;
    std::int64_t max_message = 64 << 20;
    // A measuring process of its own (hidden): "kernels" or "comm", the keys to time and where results go.
    std::string worker, keys, results;
    bool exchanges = false, in_situ = true;
    bool bfloat16 = false;  // the convolutions' kernels with bfloat16 products too (precision=bfloat16)
    bool float16 = false;   // and with float16 products (precision=float16: the GPU's)
    std::string device = "cpu";
    std::int64_t gpu_workspace = 0;  // a worker's: the convolutions' scratch limit (the platform's workspace)

    bool gpu() const { return device == "gpu"; }
    // What every worker is told beyond its job.
    std::vector<std::string> worker_args() const {
        if (!gpu()) return {};
        return {"--device", "gpu", "--gpu-workspace", std::to_string(gpu_workspace)};
    }
};

// The kernels a worker times and trains with: the CPU's, or those of the GPU of its local rank.
backend::Kernels worker_kernels(const CalibrateOptions& o) {
    if (!o.gpu()) return backend::cpu_kernels();
    backend::gpu_select(backend::gpu_for_local_rank(backend::launched_local_rank(), backend::gpu_devices()));
    backend::GpuOptions options;
    if (o.gpu_workspace > 0) options.workspace = o.gpu_workspace;
    return backend::gpu_kernels(options);
}

// A worker's communicator over MPI: on a GPU, over NCCL where each process has a GPU of its own.
std::unique_ptr<backend::Comm> worker_comm(const CalibrateOptions& o) {
    auto comm = backend::mpi_world();
    if (!o.gpu()) return comm;
    return backend::gpu_comm(std::move(comm), backend::launched_local_size() <= backend::gpu_devices());
}

// The kernels the model would look up for every candidate distribution of every layer; with `seconds`, each
// key's time per call as the model has it now (measured, or analytic): its layer's compute under that
// distribution, shared among the layer's kernels.
std::map<int, std::set<std::string>> keys_by_threads(const frontend::Network& net, const scheduler::Platform& base,
                                                     const CalibrateOptions& o,
                                                     std::map<std::string, double>* seconds = nullptr) {
    std::map<int, std::set<std::string>> out;
    // The 16-bit precisions whose products there are kernels for: the GPU's (bfloat16, float16), the CPU's
    // with AVX-512 BF16 (bfloat16).
    std::vector<scheduler::Precision> sixteen;
    if (o.bfloat16 && (o.gpu() || backend::cpu_kernels().conv_bfloat16))
        sixteen.push_back(scheduler::Precision::bfloat16);
    if (o.float16 && o.gpu()) sixteen.push_back(scheduler::Precision::float16);
    for (std::int64_t procs : o.procs)
        for (std::int64_t batch : o.batches) {
            scheduler::Model model(net, base, procs, batch, backend::kind_costs());
            auto& keys = out[model.threads()];
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                const auto& l = net.layers[i];
                if (l.op == frontend::OpKind::label) continue;
                // An input takes its reader's split: any that fits its tiles. The channel and filter splits the
                // auto-scheduler tries too.
                const scheduler::Distribution open{std::nullopt, std::nullopt, scheduler::BatchNormStats::batch,
                                                   std::nullopt};
                for (const auto& d : scheduler::candidates(net, static_cast<int>(i), open, procs, batch,
                                                           scheduler::channel_parts_on(base))) {
                    std::vector<std::string> layer_keys = model.kernel_keys(static_cast<int>(i), d);
                    // And its convolution's with 16-bit products (precision=bfloat16, float16).
                    for (const scheduler::Precision p : sixteen) {
                        scheduler::Distribution b = d;
                        b.precision = p;
                        if (b.products16(l.op))
                            for (std::string& k : model.kernel_keys(static_cast<int>(i), b))
                                layer_keys.push_back(std::move(k));
                    }
                    if (seconds && !layer_keys.empty()) {
                        const scheduler::LayerCost c = model.layer(static_cast<int>(i), d);
                        const double each =
                            (c.forward + c.backward_data + c.backward_weights) / static_cast<double>(layer_keys.size());
                        for (const std::string& k : layer_keys) (*seconds)[k] = std::max((*seconds)[k], each);
                    }
                    for (std::string& k : layer_keys) keys.insert(std::move(k));
                }
            }
            keys.insert(scheduler::time_key(
                net.train.optimizer == frontend::Optimizer::sgd ? scheduler::sgd_kernel : scheduler::adam_kernel,
                {{"params", {net.total_params()}}, {"threads", {model.threads()}}}));
        }
    return out;
}

// A worker's measured times, for the command that started it: whole, or an error naming the file.
int results_written(const CalibrateOptions& o, const std::string& text) {
    std::string why;
    if (replace_file(o.results, text, why)) return ok;
    std::cerr << "error: " << why << "\n";
    return user_error;
}

int kernel_worker(const CalibrateOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    auto net = scheduler::Pipeline().network(o.net, sources, diags);
    if (!net) return user_error;
    std::string error;
    auto data = backend::make_data_source(net->net, 0, "", "", error);
    const frontend::Layer* input = nullptr;
    for (const auto& l : net->net.layers)
        if (l.op == frontend::OpKind::input && !input) input = &l;
    if (!data || !input) {
        throw UserError("calibration needs a network with an input");
    }
    std::ifstream in(o.keys);
    std::ostringstream out;
    const backend::TimingRuns runs{o.warmup, o.reps};
    const backend::Kernels kernels = worker_kernels(o);
    std::vector<std::string> keys;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) keys.push_back(line);
    std::size_t done = 0;
    for (const std::string& key : keys) {
        std::string why;
        if (auto s = backend::time_kernel(key, kernels, *data, *input, runs, why))
            out << key << "\t" << *s << "\n";
        else
            std::cerr << fmt::format("warning: cannot time '{}': {}\n", key, why);
        if (++done % 25 == 0 && stderr_color())
            std::cerr << fmt::format("\r  {}/{} kernels", done, keys.size()) << std::flush;
    }
    if (stderr_color()) std::cerr << "\r" << std::string(30, ' ') << "\r";
    return results_written(o, out.str());
}

int comm_worker(const CalibrateOptions& o) {
    const backend::Kernels kernels = worker_kernels(o);
    auto comm = worker_comm(o);
    const auto times =
        backend::time_communication(*comm, o.max_message, {o.warmup, o.reps}, o.exchanges, kernels.mem());
    int code = ok;
    if (comm->rank() == 0) {
        std::ostringstream out;
        for (const auto& [key, seconds] : times) out << key << "\t" << seconds << "\n";
        code = results_written(o, out.str());
    }
    comm.reset();
    backend::mpi_finalize();
    return code;
}

// This machine as the model sees it during calibration: its cores (or GPUs), one node.
scheduler::Platform this_machine(scheduler::Platform p, bool gpu) {
    p.device = gpu ? scheduler::Device::gpu : scheduler::Device::cpu;
    p.procs_per_node = gpu ? std::max(1, backend::gpu_devices()) : std::max(1u, std::thread::hardware_concurrency());
    p.nodes = 1, p.planar_why = gpu ? "" : this_cpu_planar_why();
    return p;
}

// Training steps under every split of the run's processes (overlap off and on where it matters), each layer's
// compute profiled and keyed as the model looks it up. A layer that a split cannot run takes its first
// candidate instead. Collective over the processes mpirun started.
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
    const auto& net = loaded->net;
    const backend::Kernels kernels = worker_kernels(o);
    auto comm = worker_comm(o);
    const std::int64_t procs = comm->size(), batch = o.batches.front();
    std::string error;
    auto data = backend::make_data_source(net, 0, "", "", error);
    if (!data) {
        throw UserError(error);
    }
    // Only kernels and communication: what this worker measures is not taken from an earlier calibration.
    for (auto it = measured_so_far->times.begin(); it != measured_so_far->times.end();) {
        const std::string& k = it->first;
        const auto key = scheduler::parse_time_key(k);
        const bool derived =
            k.rfind(scheduler::factor_prefix, 0) == 0 ||
            (key && (key->kernel == scheduler::drift_kernel || key->kernel == scheduler::shuffle_kernel ||
                     key->kernel == scheduler::update_kernel));
        it = derived ? measured_so_far->times.erase(it) : std::next(it);
    }
    const scheduler::Model model(net, this_machine(*measured_so_far, o.gpu()), procs, batch, backend::kind_costs());
    scheduler::Model kernels_alone(net, this_machine(*measured_so_far, o.gpu()), procs, batch, backend::kind_costs());
    kernels_alone.use_raw_kernels(true);
    // Per layer kind, direction and tile size: training's time and the kernels' alone, summed over every
    // layer of every run, so that the factor reproduces the runs' totals.
    std::map<std::string, std::pair<double, double>> sums;
    std::vector<double> drifts;   // per schedule: the waits for other processes over the compute
    std::vector<double> updates;  // the update, allreduces' wait included
    // What a process holds beyond what the model counts (runtimes, kernels' scratch): the least over the runs.
    // On a GPU the resident host memory says nothing of the device's: the platform's workspace stays.
    double workspace = -1.0;
    // Per layer and split: its compute and waits in the uniform runs, to compare the alternating run with.
    std::map<std::pair<std::size_t, std::string>, double> uniform;
    auto profile = [&](const scheduler::Schedule& s) {
        const auto step = backend::profile_layers(net, s, batch, kernels, *comm, *data, {o.warmup, o.reps});
        if (o.gpu()) return step;
        const scheduler::Prediction p = model.predict(s);
        const double beyond = std::max(0.0, step.resident - (p.memory - p.workspace));
        workspace = workspace < 0 ? beyond : std::min(workspace, beyond);
        return step;
    };
    for (const scheduler::Split& split : scheduler::splits_of(procs, batch, net.spatial_rank())) {
        for (bool overlap : split.spatial() ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
            scheduler::Schedule s;
            s.procs = procs;
            s.batch = batch;
            s.layers.resize(net.layers.size());
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                if (net.layers[i].is_data()) continue;
                scheduler::Distribution d{split, overlap, scheduler::BatchNormStats::batch, std::nullopt};
                if (!scheduler::split_problem(net, net.layers[i], split, batch).empty())
                    d = scheduler::candidates(net, static_cast<int>(i), {std::nullopt, overlap, d.bn, std::nullopt},
                                              procs, batch)
                            .front();
                s.layers[i] = d;
            }
            scheduler::place_data(net, s);
            const auto step = profile(s);
            const auto& times = step.layers;
            double waited = 0.0, computed = 0.0;
            for (const auto& t : times) waited += t.forward_wait + t.backward_wait, computed += t.forward + t.backward;
            if (procs > 1 && computed > 0) drifts.push_back(waited / computed);
            updates.push_back(step.update);
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                const auto op = net.layers[i].op;
                if (op == frontend::OpKind::label) continue;
                const scheduler::LayerCost k = kernels_alone.layer(static_cast<int>(i), s.layers[i]);
                const int size =
                    scheduler::Model::size_class(model.tile_bytes(static_cast<int>(i), *s.layers[i].split));
                const double kb = k.backward_data + k.backward_weights;
                // A ReLU that ran in the pass of the layer before it has no forward of its own to compare.
                if (k.forward > 0 && times[i].forward > 0 && !model.relu_fused(i, s))
                    sums[model.factor_key(op, true, size)].first += times[i].forward,
                        sums[model.factor_key(op, true, size)].second += k.forward;
                if (kb > 0 && times[i].backward > 0)
                    sums[model.factor_key(op, false, size)].first += times[i].backward,
                        sums[model.factor_key(op, false, size)].second += kb;
                if (!overlap || s.layers[i].split->spatial())
                    uniform[{i, s.layers[i].split->str()}] =
                        times[i].forward + times[i].backward + times[i].forward_wait + times[i].backward_wait;
            }
        }
    }
    // What a shuffle costs beyond the model's estimate of its transfer: layers alternate between two splits,
    // so that every layer reads its input through a shuffle, and the run is compared with the same layers
    // in the uniform runs.
    double shuffle_extra = -1.0;
    if (procs > 1) {
        scheduler::Schedule s;
        s.procs = procs;
        s.batch = batch;
        s.layers.resize(net.layers.size());
        int parity = 0;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (net.layers[i].is_data()) continue;
            const auto cands = scheduler::candidates(
                net, static_cast<int>(i), {std::nullopt, false, scheduler::BatchNormStats::batch, std::nullopt}, procs,
                batch);
            s.layers[i] = cands[static_cast<std::size_t>(parity++ % 2) % cands.size()];
        }
        scheduler::place_data(net, s);
        double expected = 0.0, shuffles = 0.0, modelled = 0.0;
        bool known = true;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (net.layers[i].is_data()) continue;
            auto it = uniform.find({i, s.layers[i].split->str()});
            if (it == uniform.end())
                known = false;
            else
                expected += it->second;
            for (std::size_t j = 0; j < net.layers[i].inputs.size(); ++j) {
                const auto p = static_cast<std::size_t>(net.layers[i].inputs[j]);
                if (net.layers[p].is_data()) continue;
                const auto cost =
                    model.shuffle(static_cast<int>(i), static_cast<int>(j), *s.layers[p].split, *s.layers[i].split);
                if (cost.bytes > 0) shuffles += 1.0, modelled += cost.seconds;
            }
        }
        if (known && shuffles > 0) {
            const auto step = profile(s);
            double total = 0.0;
            for (const auto& t : step.layers) total += t.forward + t.backward + t.forward_wait + t.backward_wait;
            shuffle_extra = std::max(0.0, (total - expected - modelled) / shuffles);
        }
    }
    int code = ok;
    if (comm->rank() == 0) {
        std::ostringstream out;
        for (const auto& [key, sum] : sums)
            out << key << "\t" << sum.first / sum.second * 1e-3 << "\n";  // a factor, as a time per millisecond
        if (workspace >= 0) out << "workspace\t" << workspace << "\n";
        std::sort(updates.begin(), updates.end());
        if (!updates.empty()) out << model.update_key() << "\t" << updates[updates.size() / 2] << "\n";
        if (!drifts.empty()) {
            std::sort(drifts.begin(), drifts.end());
            out << scheduler::time_key(scheduler::drift_kernel, {{"compute", {1000}}, {"procs", {procs}}}) << "\t"
                << drifts[drifts.size() / 2] * 1e-3 << "\n";
        }
        if (shuffle_extra >= 0)
            out << scheduler::time_key(scheduler::shuffle_kernel, {{"procs", {procs}}}) << "\t"
                << std::max(1e-9, shuffle_extra) << "\n";
        code = results_written(o, out.str());
    }
    comm.reset();
    backend::mpi_finalize();
    return code;
}

std::map<std::string, double> read_results(const std::string& path) {
    std::map<std::string, double> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        const std::size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        out[line.substr(0, tab)] = std::stod(line.substr(tab + 1));
    }
    return out;
}

// The FLOP/s a convolution key's time shows: 2 * outputs * channels * kernel area per call.
std::optional<double> conv_rate(const std::string& key, double seconds) {
    const auto k = scheduler::parse_time_key(key);
    if (!k || k->kernel != "conv.forward" || k->field("threads") != std::vector<std::int64_t>{1}) return std::nullopt;
    const auto &x = k->field("x"), &y = k->field("y"), &w = k->field("k");
    if (x.size() != 4 || y.size() != 4 || w.size() != 2) return std::nullopt;
    const double outputs = static_cast<double>(y[0] * y[1] * y[2] * y[3]);
    return 2.0 * outputs * static_cast<double>(x[1] * w[0] * w[1]) / seconds;
}

// What a calibration measures: kernels by thread count, communication on process counts (exchanges on the
// first), and training steps under every split for pairs of process count and mini-batch.
struct Needed {
    std::map<int, std::set<std::string>> kernels;
    std::vector<std::int64_t> comm;
    bool exchanges = false;
    std::vector<std::pair<std::int64_t, std::int64_t>> profiles;
    bool empty() const { return kernels.empty() && comm.empty() && profiles.empty(); }

    // How long each part takes, roughly (estimate() below): by thread count, by process count of `comm`, by
    // pair of `profiles`.
    std::map<int, double> kernel_seconds;
    std::map<std::int64_t, double> comm_seconds;
    std::vector<double> profile_seconds;
    double seconds() const {
        double sum = 0.0;
        for (const auto& [threads, t] : kernel_seconds) sum += t;
        for (const auto& [procs, t] : comm_seconds) sum += t;
        for (double t : profile_seconds) sum += t;
        return sum;
    }
};

// A measuring process's start, and mpirun's (its daemon, MPI's setup), in seconds: what a tiny measurement
// takes on this project's two-core test machine.
constexpr double process_start = 0.1, mpirun_start = 0.4;

// How long measuring `n` takes, from the model's times now (measured where the platform has them, else its
// analytic figures): a kernel timed alone runs `warmup` calls, then `reps`, more until the timed ones add up
// to TimingRuns::min_seconds (at most 100 times as many); each message size of the communication, `warmup +
// reps` calls; the training steps, `warmup + reps` under each split (overlap off and on where it splits the
// rows and columns), and a run that alternates splits.
void estimate(Needed& n, const frontend::Network& net, const scheduler::Platform& platform, const CalibrateOptions& o,
              const std::map<std::string, double>& per_call) {
    const double runs = o.warmup + o.reps, least = backend::TimingRuns{}.min_seconds;
    for (const auto& [threads, keys] : n.kernels) {
        double t = process_start;
        for (const std::string& k : keys) {
            const auto it = per_call.find(k);
            const double call = it == per_call.end() ? 0.0 : it->second;
            t += o.warmup * call + std::max(o.reps * call, std::min(least, 100.0 * o.reps * call));
        }
        n.kernel_seconds[threads] = t;
    }
    for (std::int64_t procs : n.comm) {
        const scheduler::Model model(net, platform, procs, 1, backend::kind_costs());
        double t = mpirun_start;
        // The sizes of backend::time_communication: 8 bytes, 4 times more each, and the largest.
        std::vector<double> sizes;
        for (double b = 8; b <= static_cast<double>(o.max_message); b *= 4) sizes.push_back(b);
        if (sizes.empty() || sizes.back() != static_cast<double>(o.max_message))
            sizes.push_back(static_cast<double>(o.max_message));
        for (double bytes : sizes) {
            t += runs * model.allreduce(procs, bytes, false);
            if (n.exchanges && procs == n.comm.front()) t += runs * model.sendrecv(bytes, false);
        }
        n.comm_seconds[procs] = t;
    }
    for (const auto& [procs, batch] : n.profiles) {
        const scheduler::Model model(net, platform, procs, batch, backend::kind_costs());
        // A step under the first split each layer can run, as a measure of every split's.
        double step = 0.0;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (net.layers[i].is_data()) continue;
            const auto c = scheduler::candidates(net, static_cast<int>(i),
                                                 {std::nullopt, false, scheduler::BatchNormStats::batch, std::nullopt},
                                                 procs, batch);
            if (!c.empty()) step += model.layer(static_cast<int>(i), c.front()).time();
        }
        double schedules = procs > 1 ? 1 : 0;  // the alternating run
        for (const scheduler::Split& split : scheduler::splits_of(procs, batch, net.spatial_rank()))
            schedules += split.spatial() ? 2 : 1;
        n.profile_seconds.push_back(mpirun_start + schedules * (process_start + runs * step));
    }
}

// Everything `o` asks for; with `missing_only`, what `platform` lacks of it: kernel times, allreduces on a
// process count, exchanges, and the training steps of a count and mini-batch whose kernels are new to it or
// whose update it has not measured.
Needed needed(const frontend::Network& net, const scheduler::Platform& platform, const CalibrateOptions& o,
              bool missing_only) {
    auto has = [&](const std::string& key) { return missing_only && platform.times.count(key) > 0; };
    auto has_any = [&](const std::string& prefix, const std::string& suffix) {
        for (auto it = platform.times.lower_bound(prefix);
             missing_only && it != platform.times.end() && it->first.rfind(prefix, 0) == 0; ++it)
            if (it->first.ends_with(suffix)) return true;
        return false;
    };
    Needed n;
    std::map<std::string, double> per_call;
    for (std::int64_t procs : o.procs) {
        for (std::int64_t batch : o.batches) {
            CalibrateOptions one = o;
            one.procs = {procs};
            one.batches = {batch};
            bool fresh = false;
            for (const auto& [threads, keys] : keys_by_threads(net, platform, one, &per_call))
                for (const std::string& k : keys)
                    if (!has(k)) n.kernels[threads].insert(k), fresh = true;
            const scheduler::Model model(net, platform, procs, batch, backend::kind_costs());
            if (o.in_situ && (fresh || !has(model.update_key()))) n.profiles.emplace_back(procs, batch);
        }
        if (procs > 1 && !has_any(scheduler::allreduce_kernel + std::string(" "), fmt::format(" procs={}", procs)))
            n.comm.push_back(procs);
    }
    const auto first = std::find_if(o.procs.begin(), o.procs.end(), [](std::int64_t p) { return p > 1; });
    n.exchanges = first != o.procs.end() && !has_any(scheduler::sendrecv_kernel + std::string(" "), "");
    if (n.exchanges && (n.comm.empty() || n.comm.front() != *first)) n.comm.insert(n.comm.begin(), *first);
    estimate(n, net, platform, o, per_call);
    return n;
}

int measure(const CalibrateOptions& o, const Needed& n, scheduler::Platform& platform, std::size_t& measured);
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
    auto checked = scheduler::Pipeline().check(o.net, "", sources, diags, {}, o.in_situ);
    // Times already in the output file are kept: it must be a platform file, or not exist.
    std::optional<PlatformChoice> base;
    std::error_code ec;
    if (o.output.empty() && o.gpu()) {
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
    if (o.gpu() && backend::gpu_devices(&no_gpu) == 0) {
        throw UserError("cannot calibrate a GPU (--device gpu): " + no_gpu);
    }
    if (o.float16 && !o.gpu())
        throw UserError(
            "--float16: only a GPU's convolutions multiply in float16 (--device gpu); a CPU's layers of "
            "precision=float16 multiply in float32");
    if (const std::string why = unwritable(o.output); !why.empty()) {  // before anything is measured
        throw UserError("-o: " + why);
    }
    // Processors: this machine's cores, or its GPUs.
    const unsigned cores =
        o.gpu() ? static_cast<unsigned>(backend::gpu_devices()) : std::max(1u, std::thread::hardware_concurrency());
    if (o.procs.empty()) {
        for (std::int64_t p = 1; p <= static_cast<std::int64_t>(cores); p *= 2) o.procs.push_back(p);
        if (o.procs.back() != static_cast<std::int64_t>(cores)) o.procs.push_back(cores);
    }
    if (o.gpu()) o.gpu_workspace = static_cast<std::int64_t>(base->platform.workspace);
    std::sort(o.procs.begin(), o.procs.end());
    o.procs.erase(std::unique(o.procs.begin(), o.procs.end()), o.procs.end());
    scheduler::Platform platform = this_machine(base->platform, o.gpu());
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t measured = 0;
    if (const int code = measure(o, needed(net, platform, o, false), platform, measured); code != ok) return code;
    std::string procs_list, batch_list, why;
    for (auto p : o.procs) procs_list += fmt::format(" {}", p);
    for (auto b : o.batches) batch_list += fmt::format(" {}", b);
    const std::string run = fmt::format("Calibrated by 'dsl calibrate {} --procs{} --batch{}{}{}'", o.net, procs_list,
                                        batch_list, o.in_situ ? "" : " --kernels-only", o.gpu() ? " --device gpu" : "");
    const std::string machine = o.gpu() ? fmt::format("{}, {} GPU{}", backend::gpu_name(), cores, cores == 1 ? "" : "s")
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
int measure(const CalibrateOptions& o, const Needed& n, scheduler::Platform& platform, std::size_t& measured) {
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
        for (const auto& [k, s] : read_results(results.string())) platform.times[k] = s, ++measured;
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
        for (const auto& [k, s] : read_results(results.string())) {
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
        for (const auto& [k, s] : read_results(results.string())) {
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
        if (auto r = conv_rate(k, s)) rates.push_back(*r);
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
                    "in the cache)");
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
    sub->add_option("--worker", o->worker)->group("");  // hidden: a measuring process of its own
    sub->add_option("--gpu-workspace", o->gpu_workspace)->group("");
    sub->add_option("--keys", o->keys)->group("");
    sub->add_option("--results", o->results)->group("");
    sub->add_flag("--exchanges", o->exchanges)->group("");
    sub->footer(
        "Example:\n  dsl calibrate samples/mesh_tiny.net --procs 1 2 4 --batch 4 -o my.platform\n"
        "  dsl calibrate samples/mesh_tiny.net --procs 2 --batch 8   (measures 'local' again)");
    sub->callback([o, &action] { action = [o] { return run_calibrate(*o); }; });
}

namespace {

// The first layer whose tiles cannot fit this machine's memory (`memory` bytes, all of it) under any schedule,
// with the reason, or null: every process holds a layer's weights whole, with their gradient and the
// optimizer's state beside them, and a sample's output of a layer, however split, is held by the machine's
// processes together. Measuring such a layer would only run out of memory, or run for ever.
const frontend::Layer* unfit_layer(const frontend::Network& net, double memory, std::string& reason) {
    if (memory <= 0.0) return nullptr;
    for (const frontend::Layer& l : net.layers) {
        const double weights = 4.0 * 4.0 * static_cast<double>(l.params);  // weights, gradient, two moments
        const double output = static_cast<double>(l.activation_bytes);
        if (weights <= memory && output <= memory) continue;
        const bool by_weights = weights > memory;
        reason = fmt::format(
            "layer '{}' cannot fit this machine's memory ({:.1f} GiB) under any schedule: {} ({:.3g} GiB) {}; "
            "nothing is measured for it",
            l.name, memory / (1 << 30),
            by_weights ? fmt::format("its {} parameters with their gradients and optimizer state", l.params)
                       : "the output of one sample",
            (by_weights ? weights : output) / (1 << 30),
            by_weights ? "are held whole by every process" : "must be held by the machine's processes together");
        return &l;
    }
    return nullptr;
}

}  // namespace

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
    if (std::string reason; const frontend::Layer* l = unfit_layer(net, current_machine().memory, reason)) {
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
    const Needed n = needed(net, p.platform, o, true);
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
