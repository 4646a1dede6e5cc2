// `dsl run NET [SCHED]`: trains the network with SGD, printing the loss and time of every step and a
// summary; writes a JSON line per step with --log, checkpoints with --save, resumes with --load.
#include "commands.hpp"
#include "report.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/trainer.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sys/resource.h>

namespace dsl::cli {

namespace {

struct RunOptions {
    std::string net, sched;
    std::int64_t steps = 10;
    std::optional<std::int64_t> batch, procs;
    std::optional<double> lr, momentum, weight_decay;
    std::uint64_t seed = 0;
    std::string log, save, load, inputs, labels, kernels = "cpu", device = "cpu";
    bool auto_schedule = false;
};

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

// Where one process's run stands: the schedule must keep everything on one process until distributed
// training lands.
std::string single_process_problem(const Checked& c, const RunOptions& o) {
    if (o.procs && *o.procs != 1) return fmt::format("--procs {}", *o.procs);
    if (!c.schedule) return {};
    const auto& s = *c.schedule;
    if (s.procs && *s.procs != 1) return fmt::format("the schedule's procs = {}", *s.procs);
    for (const auto& d : s.layers)
        if (d.split && d.split->procs() != 1) return fmt::format("the split {}", d.split->str());
    return {};
}

int run_training(const RunOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    auto checked = load_and_check(o.net, o.sched, sources, diags, "");
    diags.render(std::cerr, stderr_color());
    if (!checked) return user_error;
    const auto& net = checked->net.net;

    if (const std::string why = single_process_problem(*checked, o); !why.empty()) {
        std::cerr << fmt::format("error: {} asks for several processes, but this version of dsl trains on one "
                                 "only; run 'dsl check' to see the distribution\n",
                                 why);
        return usage;
    }
    if (o.device != "cpu") {
        std::cerr << "error: --device gpu: this build has no GPU backend\n";
        return usage;
    }
    if (o.auto_schedule) std::cerr << "note: --auto-schedule: on one process there is nothing to schedule\n";

    backend::TrainConfig cfg;
    cfg.batch = o.batch.value_or(checked->schedule && checked->schedule->batch ? *checked->schedule->batch : 4);
    cfg.lr = o.lr.value_or(net.train.lr.value_or(0.01));
    cfg.momentum = o.momentum.value_or(net.train.momentum.value_or(0.9));
    cfg.weight_decay = o.weight_decay.value_or(net.train.weight_decay.value_or(0.0));
    cfg.seed = o.seed;

    std::string error;
    auto data = backend::make_data_source(net, o.seed, o.inputs, o.labels, error);
    if (!data) {
        std::cerr << "error: " << error << "\n";
        return user_error;
    }

    backend::Trainer trainer(net, o.kernels == "reference" ? backend::reference_kernels() : backend::cpu_kernels(),
                             cfg);
    std::int64_t first_step = 0;
    if (!o.load.empty()) {
        auto loaded = backend::load_checkpoint(o.load, error);
        if (!loaded || !backend::restore(trainer, *loaded, first_step, error)) {
            std::cerr << fmt::format("error: cannot resume from '{}': {}\n", o.load, error);
            return user_error;
        }
    }

    std::unique_ptr<std::ofstream> log;
    if (!o.log.empty()) {
        if (!safe_to_write_log(o.log)) {
            std::cerr << fmt::format("error: --log '{}' exists and is not a dsl log; it is left as it is\n", o.log);
            return user_error;
        }
        log = std::make_unique<std::ofstream>(o.log, std::ios::trunc);
        if (!*log) {
            std::cerr << fmt::format("error: cannot write --log '{}'\n", o.log);
            return user_error;
        }
    }

    std::cout << fmt::format("training {} on 1 process: batch {}, lr {}, momentum {}, weight decay {}, seed {}\n",
                             o.net, cfg.batch, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.seed);
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    double last_loss = 0.0;
    const std::int64_t every = o.steps <= 50 ? 1 : o.steps / 25;
    const bool progress = o.steps > 50 && stderr_color();
    for (std::int64_t step = first_step; step < first_step + o.steps; ++step) {
        const auto t0 = clock::now();
        last_loss = trainer.step(*data, step * cfg.batch);
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        if (!std::isfinite(last_loss)) {
            std::cerr << fmt::format("error: the loss is {} at step {}: lower the learning rate (--lr)\n", last_loss,
                                     step + 1);
            return user_error;
        }
        // Long runs print every `every`-th step, and on a terminal a progress line with the time left.
        const std::int64_t done = step + 1 - first_step;
        if (done % every == 0 || done == o.steps || done == 1)
            std::cout << fmt::format("step {:>5}  loss {:.6f}  {:.3f} s  {:.1f} samples/s\n", step + 1, last_loss,
                                     seconds, static_cast<double>(cfg.batch) / seconds)
                      << std::flush;
        if (progress && done < o.steps) {
            const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
            std::cerr << fmt::format("\r{:>5}/{} steps, {:.0f} s left ", done, o.steps,
                                     elapsed / static_cast<double>(done) * static_cast<double>(o.steps - done))
                      << std::flush;
        }
        if (log)
            *log << nlohmann::json{{"step", step + 1},
                                   {"loss", last_loss},
                                   {"seconds", seconds},
                                   {"samples_per_second", static_cast<double>(cfg.batch) / seconds}}
                        .dump()
                 << "\n"
                 << std::flush;
    }
    if (progress) std::cerr << "\r" << std::string(40, ' ') << "\r";
    const double total = std::chrono::duration<double>(clock::now() - start).count();
    std::cout << fmt::format("{} steps in {:.2f} s: {:.2f} steps/s, {:.1f} samples/s; peak memory {:.1f} MiB\n",
                             o.steps, total, static_cast<double>(o.steps) / total,
                             static_cast<double>(o.steps * cfg.batch) / total, peak_resident_bytes() / (1 << 20));

    if (!o.save.empty()) {
        if (!backend::save(trainer, o.save, first_step + o.steps, o.seed, o.net, error)) {
            std::cerr << fmt::format("error: cannot save to '{}': {}\n", o.save, error);
            return user_error;
        }
        std::cout << fmt::format("saved checkpoint to {}\n", o.save);
    }
    return ok;
}

}  // namespace

void setup_run(CLI::App& app, Action& action) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* run = app.add_subcommand("run", "Train a network, on one process or under a schedule on many");
    run->add_option("NET", o->net, "The network (.net)")->required();
    run->add_option("SCHED", o->sched, "A schedule (.sched); without one, one process");
    run->add_option("--steps", o->steps, "Training steps (default 10)")->check(CLI::PositiveNumber);
    run->add_option("--batch", o->batch, "Mini-batch size N (default: the schedule's, else 4)")
        ->check(CLI::PositiveNumber);
    run->add_option("--lr", o->lr, "Learning rate (default: the network's 'train' line, else 0.01)");
    run->add_option("--momentum", o->momentum, "SGD momentum (default: the network's, else 0.9)");
    run->add_option("--weight-decay", o->weight_decay, "Weight decay (default: the network's, else 0)");
    run->add_option("--seed", o->seed, "Seed for initialization and synthetic data (default 0)");
    run->add_option("--log", o->log, "Write one JSON object per step to this file");
    run->add_option("--save", o->save, "Write a checkpoint to this folder at the end");
    run->add_option("--load", o->load, "Resume from the checkpoint in this folder");
    run->add_option("--inputs", o->inputs, "Inputs from a .npy file [S, C, H, W] (default: synthetic data)");
    run->add_option("--labels", o->labels, "Labels from a .npy file [S] or [S, H, W] (with --inputs)");
    run->add_option("--kernels", o->kernels, "cpu (oneDNN and Halide; default) or reference (plain loops)")
        ->check(CLI::IsMember({"cpu", "reference"}));
    run->add_option("--procs", o->procs, "Processes, where the schedule leaves the count open");
    run->add_flag("--auto-schedule", o->auto_schedule, "Fill what the schedule leaves open with the auto-scheduler");
    run->add_option("--device", o->device, "cpu or gpu")->check(CLI::IsMember({"cpu", "gpu"}));
    run->footer("Example:\n  dsl run samples/mesh_tiny.net --steps 20 --batch 4 --log steps.jsonl --save ckpt");
    run->callback([o, &action] { action = [o] { return run_training(*o); }; });
}

}  // namespace dsl::cli
