// `dsl run NET [SCHED]`: trains the network with its optimizer, printing the loss, learning rate and time of
// every step and a summary; writes a JSON line per step with --log, checkpoints with --save, resumes with
// --load.
#include "commands.hpp"
#include "evaluation.hpp"
#include "launch.hpp"
#include "paths_report.hpp"
#include "planning.hpp"
#include "report.hpp"
#include "run_setup.hpp"
#include "stop_signals.hpp"
#include "trace.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/comm.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/gpu.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/backend/watchdog.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <thread>

namespace dsl::cli {

namespace {

double peak_resident_bytes() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) * 1024.0;  // kilobytes on Linux
}

// A log may replace an earlier log, never a file of the user's: its first line must be one of our records.
bool safe_to_write_log(const std::string& path) {
    std::ifstream in(path);
    if (!in) return true;
    std::string first;
    if (!std::getline(in, first) || first.empty()) return true;
    const auto j = nlohmann::json::parse(first, nullptr, false);
    return j.is_object() && j.contains("step") && j.contains("loss");
}

// The --log file, a line per step written as the run goes (read while it runs, so written in place rather
// than whole at its end). Every write is checked: once one fails, error() names the file and the reason.
class LogFile {
public:
    explicit LogFile(const std::string& path) : path_(path) {
        fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd_ < 0) fail(errno);
    }
    ~LogFile() {
        if (fd_ >= 0) ::close(fd_);
    }
    void write(const std::string& line) {
        for (std::size_t done = 0; ok() && done < line.size();) {
            const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail(n < 0 ? errno : ENOSPC);
            if (n > 0) done += static_cast<std::size_t>(n);
        }
    }
    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }

private:
    void fail(int err) {
        if (ok()) error_ = fmt::format("cannot write --log '{}': {}", path_, std::strerror(err));
    }
    std::string path_, error_;
    int fd_ = -1;
};

// Why the run could not write an output it names (--save, --log), or empty: checked before anything is set
// up, so that no run trains only to find at its end that it cannot save.
std::string output_problem(const RunOptions& o) {
    namespace fs = std::filesystem;
    std::string why;
    if (!o.save.empty() && !backend::can_save_series(o.save, why))
        return fmt::format("cannot save to '{}': {}", o.save, why);
    if (!o.trace.empty()) {
        if (std::string bad = trace_output_problem(o.trace); !bad.empty()) return "--trace: " + bad;
        if (o.trace == o.log) return fmt::format("--trace and --log both name '{}'", o.trace);
    }
    if (o.log.empty()) return {};
    std::error_code log_ec, save_ec;
    const fs::path log_folder = fs::weakly_canonical(fs::absolute(o.log), log_ec).parent_path();
    if (!o.save.empty() && !log_ec && log_folder == fs::weakly_canonical(fs::absolute(o.save), save_ec) && !save_ec)
        return fmt::format("--log '{}' is in the --save folder, which holds the checkpoint alone", o.log);
    if (const std::string bad = unwritable(o.log); !bad.empty()) return "--log: " + bad;
    if (!safe_to_write_log(o.log))
        return fmt::format("--log '{}' exists and is not a dsl log; it is left as it is", o.log);
    if (!std::ofstream(o.log, std::ios::app))
        return fmt::format("cannot write --log '{}': {}", o.log, std::strerror(errno));
    return {};
}

int train(const RunOptions& o, const Checked& checked, const scheduler::Schedule& schedule, backend::Kernels kernels,
          backend::Comm& comm, Output& io);

// The end of a run stopped by `signal` after `steps` steps (`saved`: its checkpoint is written, where it has
// --save): said once, and the exit code that tells a job script to resume it.
// `folder`: the checkpoint of the series that holds the step (the first process knows it), else --save.
int stop_at(const RunOptions& o, int signal, std::int64_t steps, bool saved, const std::string& folder, Output& io) {
    if (!saved) return user_error;  // the save said why
    if (o.save.empty())
        io.err() << fmt::format("stopped by {} at step {}: not saved (the run has no --save), so its steps are lost\n",
                                signal_name(signal), steps);
    else
        io.err() << fmt::format("stopped by {} at step {}: saved '{}'\n", signal_name(signal), steps,
                                folder.empty() ? o.save : folder);
    return stopped;
}

// The --profile table: every layer's forward and backward milliseconds per step, and of those the wait for
// other processes, averaged over the profiled steps and the processes.
void print_profile(const frontend::Network& net, backend::Comm& comm, std::vector<backend::LayerTime> t, double update,
                   double update_wait, double steps, frontend::Optimizer optimizer, Output& io) {
    std::vector<double> all;
    for (const auto& l : t) all.insert(all.end(), {l.forward, l.forward_wait, l.backward, l.backward_wait});
    all.insert(all.end(), {update, update_wait});
    comm.allreduce(all.data(), static_cast<std::int64_t>(all.size()));
    const double scale = 1000.0 / (std::max(1.0, steps) * comm.size());
    for (double& v : all) v *= scale;
    std::ostream& out = io.out();
    out << fmt::format("\nper-layer time (ms per step; mean of {} step{} after the first{})\n", steps,
                       steps == 1 ? "" : "s", comm.size() > 1 ? " and of the processes" : "");
    out << fmt::format("{:<28} {:<16} {:>10} {:>10} {:>10} {:>10}\n", "layer", "kind", "forward", "(waiting)",
                       "backward", "(waiting)");
    double sums[4] = {0, 0, 0, 0};
    for (std::size_t i = 0; i < t.size(); ++i) {
        const double* v = &all[4 * i];
        for (int k = 0; k < 4; ++k) sums[k] += v[k];
        out << fmt::format("{:<28} {:<16} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f}\n", net.layers[i].name,
                           frontend::op_name(net.layers[i].op), v[0], v[1], v[2], v[3]);
    }
    const double u = all[4 * t.size()], uw = all[4 * t.size() + 1];
    out << fmt::format("{:<28} {:<16} {:>10} {:>10} {:>10.3f} {:>10.3f}\n", "(update)",
                       std::string("allreduce + ") + frontend::optimizer_name(optimizer), "", "", u, uw);
    out << fmt::format("{:<28} {:<16} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f}\n", "total", "", sums[0], sums[1],
                       sums[2] + u, sums[3] + uw);
}

// --trace: every process's traced steps, gathered on the first, which writes them as one file.
bool write_trace(const RunOptions& o, const frontend::Network& net, backend::Comm& comm,
                 const std::vector<TracedStep>& steps, double origin, Output& io) {
    const auto gathered = comm.gather(pack_steps(steps, origin));
    bool written = true;
    std::string why;
    if (comm.rank() == 0) {
        std::vector<std::vector<TracedStep>> processes;
        std::vector<std::string> names;
        for (std::size_t r = 0; r < gathered.size(); ++r) {
            processes.push_back(unpack_steps(gathered[r]));
            names.push_back(fmt::format("rank {}", r));
        }
        const nlohmann::json about{{"network", o.net},
                                   {"schedule", o.sched},
                                   {"processes", comm.size()},
                                   {"clock", "seconds from a barrier before the first step, on every process"}};
        written = replace_file(o.trace, trace_text(net, processes, names, "dsl run", about), why);
        if (!written) std::cerr << fmt::format("error: --trace: {}\n", why);
    }
    written = comm.all(written);
    if (written)
        io.out() << fmt::format("trace of {} step{} on {} process{} written to {}\n", steps.size(),
                                steps.size() == 1 ? "" : "s", comm.size(), comm.size() == 1 ? "" : "es", o.trace);
    return written;
}

// A step's losses by layer, for its line when there are several (the line shows their sum first).
std::string each_loss(const std::vector<backend::LossValue>& losses) {
    std::string out;
    for (const auto& l : losses) out += fmt::format("{}{} {:.6f}", out.empty() ? " (" : ", ", l.name, l.value);
    return losses.size() > 1 ? out + ")" : "";
}

nlohmann::json losses_json(const std::vector<backend::LossValue>& losses) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& l : losses) out[l.name] = l.value;
    return out;
}

int run_training(const RunOptions& o) {
    // From here a SIGTERM or SIGUSR1 stops the run at the end of a step, with a checkpoint of it (or, in the
    // process that starts the others under mpirun, is passed on to them).
    catch_stop_signals();
    return run_trained(o,
                       [&](const Checked& checked, const scheduler::Schedule& schedule, backend::Kernels kernels,
                           backend::Comm& comm, Output& io) { return train(o, checked, schedule, kernels, comm, io); });
}

// The learning-rate schedule for the run's first line: ", warmup 100, cosine over 1000 steps"; empty when
// the rate is constant.
std::string lr_schedule_text(const frontend::LrSchedule& s) {
    std::string out;
    if (s.warmup > 0) out += fmt::format(", warmup {}", s.warmup);
    if (s.kind == frontend::LrSchedule::Kind::cosine) out += fmt::format(", cosine over {} steps", s.steps);
    if (s.kind == frontend::LrSchedule::Kind::step) out += fmt::format(", x{} every {} steps", s.gamma, s.every);
    return out;
}

int train(const RunOptions& o, const Checked& checked, const scheduler::Schedule& schedule, backend::Kernels kernels,
          backend::Comm& comm, Output& io) {
    // A process that makes no progress (or waits for one that stopped) ends the run rather than hang it.
    const auto& net = checked.net.net;
    std::vector<std::string> layer_names;
    for (const auto& l : net.layers) layer_names.push_back(l.name);
    backend::Watchdog watchdog(comm, o.timeout, machine_fit(checked, o, schedule).step, layer_names, user_error);
    backend::TrainConfig cfg;
    cfg.batch = run_batch(checked, o);
    // PyTorch's defaults where neither the command line nor the train line says: lr 0.001 for adam and
    // adamw (sgd's is dsl's 0.01), weight decay 0.01 for adamw.
    cfg.optimizer = !o.optimizer              ? net.train.optimizer
                    : *o.optimizer == "adam"  ? frontend::Optimizer::adam
                    : *o.optimizer == "adamw" ? frontend::Optimizer::adamw
                                              : frontend::Optimizer::sgd;
    const bool sgd = cfg.optimizer == frontend::Optimizer::sgd;
    cfg.lr = o.lr.value_or(net.train.lr.value_or(sgd ? 0.01 : 0.001));
    cfg.momentum = o.momentum.value_or(net.train.momentum.value_or(0.9));
    cfg.weight_decay = o.weight_decay.value_or(
        net.train.weight_decay.value_or(cfg.optimizer == frontend::Optimizer::adamw ? 0.01 : 0.0));
    cfg.beta1 = net.train.beta1.value_or(0.9);
    cfg.beta2 = net.train.beta2.value_or(0.999);
    cfg.eps = net.train.eps.value_or(1e-8);
    cfg.schedule = net.train.schedule;
    cfg.seed = o.seed;
    // float16's 5 bits of exponent: gradients that would underflow in it are scaled up first (PyTorch
    // GradScaler's initial scale).
    bool float16 = false;
    for (const scheduler::Distribution& d : schedule.layers)
        float16 = float16 || d.precision == scheduler::Precision::float16;
    cfg.loss_scale = o.loss_scale.value_or(float16 ? 65536.0 : 0.0);

    // Every check before the first step runs on every process alike (the same files, the same answer), so
    // they all stop together; where one could differ (a file that one process cannot read), they agree first.
    // The outputs come first: the first process writes them.
    std::string error = comm.rank() == 0 ? output_problem(o) : "";
    // One writer per checkpoint folder, from before the first step to the end: a second run refuses at once.
    std::unique_ptr<backend::SaveLock> save_lock;
    if (error.empty() && comm.rank() == 0 && !o.save.empty())
        save_lock = backend::lock_checkpoint_folder(o.save, error);
    if (!agree(comm, error.empty(), "error: " + error + "\n")) return user_error;
    auto data = make_data(o.data, net, o.seed, cfg.batch, error);
    if (!data) {
        io.err() << "error: " << error << "\n";
        return user_error;
    }
    // --eval-every: the evaluation set, checked with the rest before the first step.
    std::optional<Samples> eval_set;
    if (o.eval_every > 0) {
        DataOptions eval_data;
        eval_data.data = o.eval_data;
        eval_data.normalize = o.data.normalize;  // as the training data is
        eval_data.transforms = o.data.transforms;
        eval_data.layouts = o.data.layouts;
        if (o.eval_data.empty() && !o.eval_samples)
            error = "synthetic data has no end: give the evaluation set (--eval-data NAME=FILE), or --eval-samples K";
        else
            eval_set = open_samples(net, o.seed, eval_data, o.eval_samples, error);
        if (!eval_set) {
            io.err() << (o.eval_data.empty() ? "error: --eval-every: " : "error: --eval-data: ") << error << "\n";
            return user_error;
        }
    }
    std::unique_ptr<backend::Trainer> trainer;
    try {
        trainer = make_trainer(run_pipeline(o, io), net, schedule, kernels, cfg, comm);
    } catch (const UserError& e) {
        io.err() << fmt::format("error: {} (--batch, or 'batch' in the schedule)\n", e.what());
        return user_error;
    }
    std::int64_t first_step = 0;
    bool loaded = true;
    if (!o.load.empty()) {
        auto checkpoint = load_shared(comm, o.load, error);
        loaded = checkpoint && backend::restore(*trainer, *checkpoint, first_step, error);
    }
    if (!agree(comm, loaded, fmt::format("error: cannot resume from '{}': {}\n", o.load, error))) return user_error;
    // --prefetch: the files' blocks of the next mini-batches read on a thread while the step computes (synthetic
    // data, made where it is used, is not read ahead).
    if (o.prefetch > 0 && data->samples() >= 0) {
        backend::ReadAhead ahead;
        ahead.depth = static_cast<int>(o.prefetch);
        ahead.batch = cfg.batch;
        ahead.first_step = first_step;
        ahead.end_step = first_step + o.steps;
        if (!kernels.mem().host())
            ahead.allocate = backend::gpu_allocate_pinned, ahead.release = backend::gpu_free_pinned;
        data = backend::read_ahead(std::move(data), ahead);
    }
    // Step k trains on samples k·N to k·N+N-1: the last of them must be a count.
    constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
    if (first_step > most - o.steps || first_step + o.steps > most / cfg.batch) {
        io.err() << fmt::format("error: {}{} steps of {} samples would number the samples beyond 2^63-1\n",
                                o.load.empty() ? "" : fmt::format("'{}' is at step {}: ", o.load, first_step), o.steps,
                                cfg.batch);
        return user_error;
    }

    std::unique_ptr<LogFile> log;
    if (!o.log.empty() && io.on) {
        log = std::make_unique<LogFile>(o.log);
        if (!log->ok()) std::cerr << "error: " << log->error() << "\n";
    }
    if (!comm.all(o.log.empty() || !io.on || log->ok())) return user_error;
    // A line the log could not take stops the run on every process (a full disk, a quota): a run whose record
    // is lost is not one to go on with unawares.
    auto logged = [&](const nlohmann::json& j) {
        if (log) log->write(j.dump() + "\n");
        if (o.log.empty() || comm.all(!log || log->ok())) return true;
        if (log) std::cerr << "error: " << log->error() << "\n";
        return false;
    };
    // Every process takes part in gathering the parameters to the first (F and C parts split them), which
    // writes them into the series.
    std::string saved_folder;  // the last checkpoint written, on the first process
    auto save = [&](std::int64_t steps_done) {
        const backend::Watchdog::Between saving;
        bool saved = true;
        const auto state = trainer->saved_state();
        if (comm.rank() == 0) {
            backend::SeriesSave report;
            saved = backend::save_to_series(*trainer, state, o.save, steps_done, o.seed, o.net,
                                            static_cast<int>(o.keep), error, &report);
            saved_folder = report.folder;
            if (!saved) std::cerr << fmt::format("error: cannot save to '{}': {}\n", o.save, error);
            for (const std::string& folder : report.removed)
                std::cerr << fmt::format("note: removed '{}', left by a save that was killed\n", folder);
        }
        saved = comm.all(saved);
        if (saved) io.out() << fmt::format("saved checkpoint to {} at step {}\n", o.save, steps_done);
        return saved;
    };

    // The threads of the processes' kernels, on the CPU: "(2 threads each)", "(1 to 2 threads each)".
    const double threads = backend::compute_threads(), most_threads = comm.max(threads),
                 least_threads = -comm.max(-threads);
    const std::string each =
        fmt::format(" ({}{} thread{}{})", least_threads < most_threads ? fmt::format("{} to ", least_threads) : "",
                    most_threads, most_threads == 1 ? "" : "s", comm.size() > 1 ? " each" : "");
    if (sgd)
        io.out() << fmt::format(
            "training {} on {} process{}{}: batch {}, lr {}{}, momentum {}, weight decay {}, seed {}\n", o.net,
            comm.size(), comm.size() == 1 ? "" : "es", kernels.mem().host() ? each : "", cfg.batch, cfg.lr,
            lr_schedule_text(cfg.schedule), cfg.momentum, cfg.weight_decay, cfg.seed);
    else
        io.out() << fmt::format(
            "training {} on {} process{}{}: batch {}, {}, lr {}{}, betas ({}, {}), eps {}, weight decay {}, seed {}\n",
            o.net, comm.size(), comm.size() == 1 ? "" : "es", kernels.mem().host() ? each : "", cfg.batch,
            frontend::optimizer_name(cfg.optimizer), cfg.lr, lr_schedule_text(cfg.schedule), cfg.beta1, cfg.beta2,
            cfg.eps, cfg.weight_decay, cfg.seed);
    // The fast paths that are off, once, where the kernels run on this run's tiles: a step slower than it could
    // be is said, not left to be found.
    if (const std::string off = paths_off_text(net, trainer->paths(), "  "); !off.empty())
        io.err() << "note: fast paths off ('dsl explain' shows every layer's):\n" << off;
    if (cfg.loss_scale > 0.0)
        io.out() << fmt::format(
            "loss scaling from {:g}: a step whose gradients overflow is skipped and halves it; {} in a row that do "
            "not double it\n",
            trainer->loss_scale().scale, cfg.loss_scale_interval);
    // precision=bfloat16's (float16's) convolutions multiply in 16 bits where the kernels can: say so where
    // they cannot.
    for (const scheduler::Precision p : {scheduler::Precision::bfloat16, scheduler::Precision::float16}) {
        std::int64_t convs = 0;
        for (std::size_t i = 0; i < net.layers.size(); ++i)
            convs += schedule.layers[i].products16(net.layers[i].op) == p;
        if (convs > 0 && !kernels.conv16(p))
            io.out() << fmt::format(
                "note: {} convolution{} of precision {} multipl{} in float32 here ({}); {} outputs are still kept "
                "in 16 bits\n",
                convs, convs == 1 ? "" : "s", scheduler::precision_name(p), convs == 1 ? "ies" : "y",
                p == scheduler::Precision::float16 ? "only a GPU's kernels multiply in float16"
                                                   : "this CPU has no AVX-512 BF16 instructions",
                convs == 1 ? "its" : "their");
    }
    // --profile: per-layer seconds summed over the steps after the first (which creates kernels and touches
    // memory for the first time), then averaged over steps and processes.
    trainer->profile(o.profile || !o.trace.empty());
    // --trace: the events of the last --trace-steps steps (every step by default), on a clock whose zero every
    // process reads at once, after a barrier.
    std::deque<TracedStep> traced;
    const std::int64_t trace_steps = o.trace_steps.value_or(o.steps);
    double trace_origin = 0.0;
    if (!o.trace.empty()) {
        comm.all(true);
        trace_origin = backend::profile_clock();
    }
    std::vector<backend::LayerTime> profiled(net.layers.size());
    double profiled_update = 0.0, profiled_update_wait = 0.0, profiled_steps = 0.0, profiled_read_wait = 0.0;
    using clock = std::chrono::steady_clock;
    // On a GPU: the most memory in use on the device after a step (by every process that shares it).
    const bool on_gpu = !kernels.mem().host();
    double gpu_peak = 0.0;
    const auto start = clock::now();
    double last_loss = 0.0;
    const std::int64_t every = o.steps <= 50 ? 1 : o.steps / 25;
    const bool progress = o.steps > 50 && stderr_color() && io.on;
    for (std::int64_t step = first_step; step < first_step + o.steps; ++step) {
        const auto t0 = clock::now();
        const double loss_scale = trainer->loss_scale().scale;
        last_loss = trainer->step(*data, step * cfg.batch);
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        watchdog.step_done(seconds);
        const backend::Awaiting step_end(
            "the other processes at the end of the step (its log, the agreement on a stop)", -1);
        if (on_gpu) gpu_peak = std::max(gpu_peak, static_cast<double>(backend::gpu_memory_in_use()));
        if (!o.trace.empty()) {
            const backend::StepProfile& p = trainer->last_profile();
            traced.push_back(TracedStep{step + 1, p.start, p.end, p.events});
            if (static_cast<std::int64_t>(traced.size()) > trace_steps) traced.pop_front();
        }
        if (o.profile && (step > first_step || o.steps == 1)) {
            const backend::StepProfile& p = trainer->last_profile();
            for (std::size_t i = 0; i < profiled.size(); ++i) {
                profiled[i].forward += p.layers[i].forward;
                profiled[i].forward_wait += p.layers[i].forward_wait;
                profiled[i].backward += p.layers[i].backward;
                profiled[i].backward_wait += p.layers[i].backward_wait;
            }
            profiled_update += p.update, profiled_update_wait += p.update_wait, profiled_steps += 1;
            profiled_read_wait += p.read_wait;
        }
        // Halo and redistribution traffic of the step, summed over the processes (a log field).
        double sent = static_cast<double>(trainer->halo_bytes());
        if (!o.log.empty()) comm.allreduce(&sent, 1);
        if (!std::isfinite(last_loss)) {  // the same loss on every process: they all stop here
            io.err() << fmt::format("error: the loss is {} at step {}: lower the learning rate (--lr)\n", last_loss,
                                    step + 1);
            return user_error;
        }
        // The time left at the pace of the steps so far (every process has the same figure: the first's is
        // said). Long runs print every `every`-th step, and on a terminal a progress line between them.
        const bool skipped = trainer->last_step_skipped();
        if (skipped)
            io.out() << fmt::format(
                "step {:>5}  skipped: its gradients overflowed at loss scale {:g}, which is now {:g}\n", step + 1,
                loss_scale, trainer->loss_scale().scale);
        const std::int64_t done = step + 1 - first_step;
        const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
        const double left = elapsed / static_cast<double>(done) * static_cast<double>(o.steps - done);
        if (done % every == 0 || done == o.steps || done == 1)
            io.out() << fmt::format("step {:>5}  loss {:.6f}{}  lr {:.6g}  {:.3f} s  {:.1f} samples/s  {} left\n",
                                    step + 1, last_loss, each_loss(trainer->last_losses()), trainer->last_lr(), seconds,
                                    static_cast<double>(cfg.batch) / seconds, duration_text(left))
                     << std::flush;
        if (progress && done < o.steps)
            std::cerr << fmt::format("\r{:>5}/{} steps, {} left ", done, o.steps, duration_text(left)) << std::flush;
        nlohmann::json line{{"step", step + 1},
                            {"loss", last_loss},
                            {"losses", losses_json(trainer->last_losses())},
                            {"lr", trainer->last_lr()},
                            {"seconds", seconds},
                            {"seconds_left", left},
                            {"halo_bytes", static_cast<std::int64_t>(sent)},
                            {"samples_per_second", static_cast<double>(cfg.batch) / seconds}};
        if (cfg.loss_scale > 0.0) line["loss_scale"] = loss_scale, line["skipped"] = skipped;
        if (!logged(line)) return user_error;
        // --eval-every: the figures over the evaluation set, at every K-th step (counted as --save-every's).
        if (eval_set && (step + 1) % o.eval_every == 0) {
            const backend::Watchdog::Between evaluating;
            const EvalFigures f = evaluate(*trainer, net, schedule, kernels, comm, *eval_set->source, eval_set->count);
            io.out() << fmt::format("eval  {:>5}  loss {:.6f} on {} samples\n", step + 1, f.loss, f.samples)
                     << figures_text(f) << std::flush;
            nlohmann::json j{{"eval", step + 1}};
            j.update(figures_json(f));
            if (!logged(j)) return user_error;
        }
        // --save-every: a checkpoint at every K-th step (counted from the first, so across resumptions); the
        // last step's is the one at the end.
        const bool saved_here = o.save_every > 0 && (step + 1) % o.save_every == 0 && done < o.steps;
        if (saved_here && !save(step + 1)) return user_error;
        // Preemption: a SIGTERM or SIGUSR1 to any process stops every one here, at the end of the same step. Each
        // says the signal it has had (0: none) in one allreduce of a number, and the largest names the stop.
        if (done < o.steps) {
            const int by = comm.size() > 1 ? static_cast<int>(comm.max(stop_signal())) : stop_signal();
            if (by != 0) {
                if (progress) std::cerr << "\r" << std::string(40, ' ') << "\r";
                const bool saved = saved_here || o.save.empty() || save(step + 1);
                return stop_at(o, by, step + 1, saved, saved_folder, io);
            }
        }
    }
    if (progress) std::cerr << "\r" << std::string(40, ' ') << "\r";
    const backend::Watchdog::Between ending;
    const double total = std::chrono::duration<double>(clock::now() - start).count();
    const double peak = comm.max(peak_resident_bytes());
    gpu_peak = comm.max(gpu_peak);
    io.out() << fmt::format("{} steps in {:.2f} s: {:.2f} steps/s, {:.1f} samples/s; peak memory {:.1f} MiB{}{}\n",
                            o.steps, total, static_cast<double>(o.steps) / total,
                            static_cast<double>(o.steps * cfg.batch) / total, peak / (1 << 20),
                            comm.size() > 1 ? " per process (the largest)" : "",
                            on_gpu ? fmt::format(", {:.1f} MiB in use on the GPU", gpu_peak / (1 << 20)) : "");

    if (o.profile)
        print_profile(net, comm, profiled, profiled_update, profiled_update_wait, profiled_steps, cfg.optimizer, io);
    if (o.profile && data->reads_ahead()) {  // the same on every process
        comm.allreduce(&profiled_read_wait, 1);
        io.out() << fmt::format(
            "reads ahead of the step (--prefetch {}): {:.3f} ms per step waiting for late ones "
            "(in the layers' waiting above)\n",
            o.prefetch, 1000.0 * profiled_read_wait / (std::max(1.0, profiled_steps) * comm.size()));
    }
    if (!o.trace.empty() && !write_trace(o, net, comm, {traced.begin(), traced.end()}, trace_origin, io))
        return user_error;

    if (!o.save.empty() && !save(first_step + o.steps)) return user_error;
    return ok;
}

// An option that sets an optimizer's parameter (`name` on the train line, `what` in words), held to the train
// line's rule.
CLI::Validator optimizer_value(const std::string& name, const std::string& what) {
    return CLI::Validator(
        [name, what](std::string& s) {
            const char* rule = frontend::optimizer_value_rule(name, std::strtod(s.c_str(), nullptr));
            return rule ? fmt::format("{} must be {}, not {}", what, rule, s) : std::string();
        },
        "X");
}
}  // namespace

void setup_run(CLI::App& app, Action& action) {
    auto o = std::make_shared<RunOptions>();
    o->stops_at_step = true;
    CLI::App* run = app.add_subcommand("run", "Train a network, on one process or under a schedule on many");
    run->add_option("NET", o->net, "The network (.net)")->required();
    run->add_option("SCHED", o->sched, "A schedule (.sched); without one, one process");
    run->add_option("--steps", o->steps, "Training steps (default 10)")->check(positive_count());
    run->add_option("--batch", o->batch, "Mini-batch size N (default: the schedule's, else 4)")
        ->check(positive_count());
    run->add_option("--lr", o->lr, "Learning rate, 0 or more (default: the network's 'train' line, else 0.01)")
        ->check(optimizer_value("lr", "the learning rate"));
    run->add_option("--optimizer", o->optimizer,
                    "sgd, adam or adamw (default: the network's 'train' line, else sgd); its other parameters, the "
                    "warmup and the schedule come from the train line")
        ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
    run->add_option("--momentum", o->momentum, "SGD momentum (default: the network's, else 0.9)")
        ->check(optimizer_value("momentum", "the momentum"));
    run->add_option("--weight-decay", o->weight_decay, "Weight decay (default: the network's, else 0)")
        ->check(optimizer_value("weight_decay", "the weight decay"));
    run->add_option("--loss-scale", o->loss_scale,
                    "Dynamic loss scaling's initial scale, by PyTorch GradScaler's rules (a step whose gradients "
                    "overflow is skipped and halves it; 2000 in a row that do not double it); 0: none (default: "
                    "65536 where a layer is float16, else 0)")
        ->check(CLI::Validator(
            [](std::string& s) {
                const double v = std::strtod(s.c_str(), nullptr);
                return std::isfinite(v) && v >= 0.0 ? std::string()
                                                    : "a loss scale is a finite number from 0, not " + s;
            },
            "SCALE"));
    run->add_option("--seed", o->seed, "Seed for initialization and synthetic data (default 0)")
        ->check(nonnegative_count());
    run->add_option("--log", o->log, "Write one JSON object per step to this file")->check(file_name());
    CLI::Option* save = run->add_option("--save", o->save,
                                        "Write a checkpoint at the end into the series in this folder "
                                        "(DIR/step-N, and DIR/latest naming the newest)")
                            ->check(folder_name());
    run->add_option("--save-every", o->save_every,
                    "With --save: a checkpoint every K steps as well, so that a killed run resumes from the last "
                    "(--load)")
        ->check(positive_count())
        ->needs(save);
    run->add_option("--keep", o->keep,
                    "With --save: keep the K newest whole checkpoints of the series (default 2), removing older ones "
                    "once a newer one is whole")
        ->check(positive_count(1000000))
        ->needs(save);
    run->add_option("--load", o->load,
                    "Resume from a checkpoint: a --save folder (the one its 'latest' names), or one checkpoint "
                    "folder (DIR/step-N)")
        ->check(folder_name());
    run->add_option("--timeout", o->timeout,
                    "Seconds a process may make no progress (waiting for another that stopped, say) before the run "
                    "ends with an error that names it; 4 times as long for the first step and between steps "
                    "(default: 5 minutes or 10 times the longest step, whichever is longer)")
        ->check(CLI::Validator(
            [](std::string& s) {
                char* end = nullptr;
                const double v = std::strtod(s.c_str(), &end);
                return std::isfinite(v) && v > 0.0 && end && *end == '\0'
                           ? std::string()
                           : "a timeout is a positive number of seconds, not " + s;
            },
            "SECONDS"));
    add_data_options(*run, o->data);
    run->add_option("--augment", o->data.augment,
                    "flip, transpose or flip,transpose: each sample of each epoch flipped along each spatial axis "
                    "and its equal-sized spatial axes permuted at random, from the seed, the epoch and the sample "
                    "(the same under every schedule; pixel and voxel labels move with their inputs)")
        ->check(CLI::IsMember({"flip", "transpose", "flip,transpose", "transpose,flip"}));
    run->add_option("--prefetch", o->prefetch,
                    "Read the data files' tiles of the next K mini-batches on a thread of each process while the "
                    "step computes (default 2; 0: read each when the step asks for it). The values are the same "
                    "either way; synthetic data is made when asked for")
        ->check(nonnegative_count(1000));
    CLI::Option* eval_every =
        run->add_option("--eval-every", o->eval_every,
                        "Evaluate every K steps (as 'dsl eval' does) on --eval-data, printing the figures and "
                        "logging them as their own JSON lines {\"eval\": STEP, ...}")
            ->check(positive_count());
    run->add_option("--eval-data", o->eval_data,
                    "NAME=FILE for each input and label, as --data: the evaluation set (normalized as --normalize "
                    "says); without it, the first --eval-samples synthetic samples")
        ->needs(eval_every);
    run->add_option("--eval-samples", o->eval_samples, "Evaluate the first K samples of the evaluation set")
        ->check(positive_count())
        ->needs(eval_every);
    run->add_option("--kernels", o->kernels, "cpu (oneDNN and Halide; default) or reference (plain loops)")
        ->check(CLI::IsMember({"cpu", "reference"}));
    run->add_option("--procs", o->procs, "Processes, where the schedule leaves the count open")
        ->check(positive_count());
    run->add_flag("--auto-schedule", o->auto_schedule,
                  "Fill what the schedule leaves open (everything, without one) with the auto-scheduler");
    run->add_option("--platform", o->platform,
                    "With --auto-schedule: the platform it plans for, whose device the run uses unless --device "
                    "says otherwise (default: the schedule's, else 'local')");
    CLI::Option* trace =
        run->add_option(
               "--trace", o->trace,
               "Write a timeline of the steps (Chrome trace-event JSON: open it in Perfetto or chrome://tracing): a "
               "track per process, each layer's kernels, halo exchanges, shuffles, sums, allreduces and waits")
            ->check(file_name());
    run->add_option("--trace-steps", o->trace_steps, "With --trace: only the last K steps (default: every step)")
        ->check(positive_count())
        ->needs(trace);
    add_dump_after(*run, o->dump_after);
    run->add_flag("--profile", o->profile,
                  "Print each layer's forward and backward time per step, and the part spent waiting for others");
    run->add_option("--device", o->device,
                    "cpu or gpu: where every layer runs (default: with --auto-schedule the platform's device, else "
                    "cpu); on a GPU, one process per GPU by local rank, or several sharing one")
        ->check(CLI::IsMember({"cpu", "gpu"}));
    run->add_option("--gpu-comm", o->gpu_comm,
                    "With --device gpu: nccl (a GPU per process), mpi (through host memory) or auto (default: nccl "
                    "when every process has a GPU of its own)")
        ->check(CLI::IsMember({"auto", "nccl", "mpi"}));
    run->add_flag("--tf32", o->tf32, "With --device gpu: let convolutions use TF32 tensor cores (faster, ~1e-3 error)");
    run->footer("Example:\n  dsl run samples/mesh_tiny.net --steps 20 --batch 4 --log steps.jsonl --save ckpt");
    run->callback([o, &action] { action = [o] { return run_training(*o); }; });
}

}  // namespace dsl::cli
