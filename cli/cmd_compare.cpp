// `dsl compare NET A.sched B.sched...`: schedules side by side, per layer and in total, as the performance
// model predicts them; with --measure, also as measured by training a few steps under each (the step, and
// each layer's forward and backward from the run's trace), and the model's error for each.
#include "commands.hpp"
#include "launch.hpp"
#include "planning.hpp"

#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

namespace dsl::cli {

namespace {

struct CompareOptions {
    std::string net, platform, dump_after;
    std::vector<std::string> scheds;
    std::optional<std::int64_t> batch;
    std::int64_t steps = 10;
    bool json = false, measure = false;
};

struct Column {
    std::string file;
    scheduler::Schedule schedule;
    std::int64_t procs = 1, batch = 1;
    bool filled = false;
    scheduler::Prediction prediction;
    std::optional<double> measured;  // median seconds per step
    std::string measure_error;
    // Measured seconds per step: each layer's forward and backward (2i, 2i + 1), then the update with its wait
    // for the allreduces; empty without a trace.
    std::vector<double> measured_layers;
};

// A layer's predicted forward and backward, as the timelines of `explain --trace` lay them out: compute,
// exposed halos, sums, and half the shuffles' time each way.
double predicted_forward(const scheduler::LayerPrediction& lp) {
    return lp.cost.forward_time() + lp.shuffle.seconds / 2.0;
}
double predicted_backward(const scheduler::LayerPrediction& lp) {
    return lp.cost.backward_time() + lp.shuffle.seconds / 2.0;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Trains `steps` steps under the schedule (written out, so that the run uses exactly what was predicted) and
// returns the median step time after the warm-up steps.
// The steps of a measured run not counted: the first create kernels and touch memory for the first time.
std::size_t warmup_steps(std::size_t steps) { return steps >= 4 ? 2 : steps >= 2 ? 1 : 0; }

// Each layer's forward and backward from a run's trace (`dsl run --trace`): its compute events and waits
// summed per step and process, the median over the steps after `warmup`, the mean over the processes.
std::vector<double> layer_times(const std::filesystem::path& trace, const frontend::Network& net, std::size_t warmup) {
    std::ifstream in(trace);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object() || !j.contains("traceEvents")) return {};
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < net.layers.size(); ++i) index[net.layers[i].name] = i;
    const std::size_t slots = 2 * net.layers.size() + 1;
    std::map<int, std::map<std::int64_t, std::vector<double>>> sums;  // process, step: seconds per slot
    for (const auto& e : j["traceEvents"]) {
        if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("args")) continue;
        const std::string cat = e.value("cat", "");
        if (cat != "compute" && cat != "wait") continue;
        const auto& args = e["args"];
        const std::int64_t step = args.value("step", std::int64_t{0});
        if (step <= static_cast<std::int64_t>(warmup)) continue;
        std::vector<double>& v = sums[e.value("pid", 0)][step];
        v.resize(slots, 0.0);
        const double seconds = e.value("dur", 0.0) / 1e6;
        const std::string phase = args.value("phase", "");
        if (phase == "update") {
            v[slots - 1] += seconds;
            continue;
        }
        const auto it = index.find(args.value("layer", ""));
        if (it != index.end()) v[2 * it->second + (phase == "backward" ? 1 : 0)] += seconds;
    }
    std::vector<double> out(slots, 0.0);
    if (sums.empty()) return {};
    for (const auto& [process, steps] : sums)
        for (std::size_t k = 0; k < slots; ++k) {
            std::vector<double> per_step;
            for (const auto& [step, v] : steps) per_step.push_back(v[k]);
            out[k] += median(per_step) / static_cast<double>(sums.size());
        }
    return out;
}

void measure(const CompareOptions& o, const frontend::Network& net, const PlatformChoice& platform, Column& c) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / fmt::format("dsl_compare_{}", ::getpid());
    fs::create_directories(dir);
    const fs::path sched = dir / "schedule.sched", log = dir / "steps.jsonl", out = dir / "out.txt",
                   trace = dir / "trace.json";
    if (std::string why; !replace_file(
            sched.string(), scheduler::schedule_text(net, c.schedule, "measured by dsl compare", platform.text), why))
        throw UserError(why);
    const int code = launch_child({"run", o.net, sched.string(), "--steps", std::to_string(o.steps), "--batch",
                                   std::to_string(c.batch), "--log", log.string(), "--trace", trace.string()},
                                  {}, out.string());
    std::vector<double> seconds;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("seconds")) seconds.push_back(j["seconds"].get<double>());
    }
    const std::size_t warmup = warmup_steps(seconds.size());
    seconds.erase(seconds.begin(), seconds.begin() + static_cast<std::ptrdiff_t>(warmup));
    if (code != 0 || seconds.empty())
        c.measure_error = fmt::format("the run failed (exit code {})", code);
    else
        c.measured = median(seconds);
    if (c.measured) c.measured_layers = layer_times(trace, net, warmup);
    std::error_code ec;
    fs::remove_all(dir, ec);
}

int run_compare(const CompareOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    std::vector<Column> columns;
    std::optional<PlatformChoice> platform;
    // The network once; each schedule parsed and applied to it.
    const scheduler::Pipeline pipeline(stage_dump(o.dump_after));
    const auto loaded = pipeline.check(o.net, "", sources, diags);
    bool good = loaded.has_value();
    for (const std::string& file : o.scheds) {
        const auto sched = scheduler::load_sched(file, sources, diags);
        std::optional<scheduler::Schedule> s;
        if (sched && loaded) s = pipeline.schedule(loaded->net.net, *sched, diags);
        if (!s) {
            good = false;
            continue;
        }
        if (!platform) platform = resolve_platform(o.platform, s, sources, diags);
        Column c;
        c.file = file;
        c.schedule = *s;
        c.batch = report_batch(s, o.batch);
        columns.push_back(std::move(c));
    }
    diags.render(std::cerr, stderr_color());
    if (!good || !platform) return user_error;
    const auto& net = loaded->net.net;
    std::map<std::int64_t, std::vector<std::int64_t>> procs_by_batch;  // what `local` must have measured
    for (const Column& c : columns)
        if (c.schedule.procs) procs_by_batch[c.batch].push_back(*c.schedule.procs);
    for (const auto& [batch, procs] : procs_by_batch)
        if (std::string why; !measure_local(*platform, o.net, net, procs, batch, why)) {
            throw UserError(why);
        }
    for (Column& c : columns) {
        if (!c.schedule.procs) {
            std::cerr << fmt::format("error: {} leaves 'procs' open; compare needs schedules for a process count\n",
                                     c.file);
            return usage;
        }
        c.procs = *c.schedule.procs;
        std::string why;
        auto planned = plan(net, platform->platform, c.schedule, c.batch, why);
        if (!planned) {
            throw UserError(fmt::format("{}: {}", c.file, why));
        }
        c.schedule = std::move(planned->schedule);
        c.prediction = std::move(planned->prediction);
        c.filled = planned->filled;
        pipeline.filled(net, c.schedule,
                        fmt::format("{}{}", c.file, c.filled ? ", open fields filled by the auto-scheduler" : ""),
                        platform->text);
        pipeline.show_plan(net, c.schedule, c.batch, static_cast<int>(c.procs));
    }
    if (o.measure)
        for (Column& c : columns) {
            std::cerr << fmt::format("measuring {} ({} steps on {} process{})...\n", c.file, o.steps, c.procs,
                                     c.procs == 1 ? "" : "es");
            measure(o, net, *platform, c);
        }

    auto error_of = [](const Column& c) { return (c.prediction.step - *c.measured) / *c.measured; };
    if (o.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const Column& c : columns) {
            nlohmann::json j{{"schedule", c.file},
                             {"procs", c.procs},
                             {"batch", c.batch},
                             {"filled_by_auto_scheduler", c.filled},
                             {"prediction", explain_json(net, c.prediction, c.batch)}};
            if (c.measured) {
                j["measured_step_seconds"] = *c.measured;
                j["model_error"] = error_of(c);
            } else if (!c.measure_error.empty()) {
                j["measure_error"] = c.measure_error;
            }
            // Per layer: predicted forward and backward, and with --measure the measured ones.
            nlohmann::json layers = nlohmann::json::array();
            const bool measured = !c.measured_layers.empty();
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                if (net.layers[i].op == frontend::OpKind::label) continue;
                const auto& lp = c.prediction.layers[i];
                nlohmann::json row{{"layer", net.layers[i].name},
                                   {"kind", frontend::op_name(net.layers[i].op)},
                                   {"predicted_forward_seconds", predicted_forward(lp)},
                                   {"predicted_backward_seconds", predicted_backward(lp)}};
                if (measured) {
                    row["measured_forward_seconds"] = c.measured_layers[2 * i];
                    row["measured_backward_seconds"] = c.measured_layers[2 * i + 1];
                }
                layers.push_back(std::move(row));
            }
            j["layers"] = std::move(layers);
            j["update"] = {{"predicted_seconds", c.prediction.update + c.prediction.allreduce_exposed}};
            if (measured) j["update"]["measured_seconds"] = c.measured_layers.back();
            out.push_back(std::move(j));
        }
        std::cout << json_text(
            nlohmann::json{{"network", o.net}, {"platform", platform->platform.path}, {"schedules", out}});
        return ok;
    }
    // Per layer: predicted ms (compute, halos, sums and shuffles), one column per schedule.
    std::size_t name_w = 5;
    for (const auto& l : net.layers) name_w = std::max(name_w, l.name.size());
    std::vector<std::string> names;
    std::size_t col_w = 10;
    for (std::size_t k = 0; k < columns.size(); ++k) {
        names.push_back(std::filesystem::path(columns[k].file).stem().string());
        col_w = std::max(col_w, names.back().size());
    }
    std::string head = fmt::format("{:<{}}", "layer (ms)", name_w);
    for (const auto& n : names) head += fmt::format("  {:>{}}", n, col_w);
    std::cout << head << "\n";
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (net.layers[i].op == frontend::OpKind::label) continue;
        std::string line = fmt::format("{:<{}}", net.layers[i].name, name_w);
        for (const Column& c : columns) {
            const auto& lp = c.prediction.layers[i];
            line += fmt::format("  {:>{}}", milliseconds(lp.seconds()), col_w);
        }
        std::cout << line << "\n";
    }
    auto total_row = [&](const std::string& label, auto value) {
        std::string line = fmt::format("{:<{}}", label, name_w);
        for (const Column& c : columns) line += fmt::format("  {:>{}}", value(c), col_w);
        std::cout << line << "\n";
    };
    std::cout << "\n";
    total_row("processes", [](const Column& c) { return std::to_string(c.procs); });
    total_row("batch", [](const Column& c) { return std::to_string(c.batch); });
    total_row("allreduce exposed", [](const Column& c) { return milliseconds(c.prediction.allreduce_exposed); });
    total_row("step, predicted", [](const Column& c) { return milliseconds(c.prediction.step); });
    if (o.measure) {
        total_row("step, measured", [](const Column& c) { return c.measured ? milliseconds(*c.measured) : "failed"; });
        total_row("model error", [&](const Column& c) {
            return c.measured ? fmt::format("{:+.1f}%", 100.0 * error_of(c)) : std::string("-");
        });
    }
    total_row("memory/process", [](const Column& c) { return human_bytes(c.prediction.memory); });
    std::cout << fmt::format(
        "\n(platform '{}'; per-layer: compute, halos, sums and shuffles on the busiest process{})\n", platform->text,
        o.measure ? fmt::format("; measured: median of steps {}-{} of dsl run", warmup_steps(o.steps) + 1, o.steps)
                  : "");
    for (const Column& c : columns) {
        if (c.filled) std::cout << fmt::format("{}: open fields filled by the auto-scheduler\n", c.file);
        if (!c.measure_error.empty()) std::cout << fmt::format("{}: {}\n", c.file, c.measure_error);
    }
    // --measure: each layer predicted against measured, one table per schedule.
    for (std::size_t k = 0; k < columns.size(); ++k) {
        const Column& c = columns[k];
        if (c.measured_layers.empty()) continue;
        std::cout << fmt::format("\n{}: per layer, predicted against measured (ms per step)\n", c.file);
        std::cout << fmt::format("{:<{}}  {:>10} {:>10} {:>8}  {:>10} {:>10} {:>8}\n", "layer", name_w, "forward",
                                 "measured", "error", "backward", "measured", "error");
        auto error = [](double predicted, double measured) {
            return measured > 0.0 ? fmt::format("{:+.0f}%", 100.0 * (predicted - measured) / measured)
                                  : std::string("-");
        };
        auto row = [&](const std::string& name, double pf, double mf, double pb, double mb) {
            std::cout << fmt::format("{:<{}}  {:>10} {:>10} {:>8}  {:>10} {:>10} {:>8}\n", name, name_w,
                                     milliseconds(pf), milliseconds(mf), error(pf, mf), milliseconds(pb),
                                     milliseconds(mb), error(pb, mb));
        };
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (net.layers[i].op == frontend::OpKind::label) continue;
            const auto& lp = c.prediction.layers[i];
            row(net.layers[i].name, predicted_forward(lp), c.measured_layers[2 * i], predicted_backward(lp),
                c.measured_layers[2 * i + 1]);
        }
        const double pu = c.prediction.update + c.prediction.allreduce_exposed, mu = c.measured_layers.back();
        std::cout << fmt::format("{:<{}}  {:>10} {:>10} {:>8}  {:>10} {:>10} {:>8}\n", "(update)", name_w, "", "", "",
                                 milliseconds(pu), milliseconds(mu), error(pu, mu));
    }
    if (o.measure)
        std::cout << "\n(measured per layer: its kernels and waits in the run's trace, the median of the counted "
                     "steps, the mean of the processes; the update with its wait for the allreduces)\n";
    return ok;
}

}  // namespace

void setup_compare(CLI::App& app, Action& action) {
    auto o = std::make_shared<CompareOptions>();
    CLI::App* sub =
        app.add_subcommand("compare", "Compare schedules side by side, predicted and (with --measure) measured");
    sub->add_option("NET", o->net, "The network (.net)")->required();
    sub->add_option("SCHEDS", o->scheds, "Two or more schedules")->required()->expected(2, -1);
    sub->add_option("--platform", o->platform,
                    "Platform name (stdlib/platforms) or file (default: the first schedule's, else 'local': this "
                    "machine, measured on first use)");
    sub->add_option("--batch", o->batch, "Mini-batch size N (default: each schedule's, or one sample per process)")
        ->check(positive_count());
    sub->add_flag("--measure", o->measure, "Also train a few steps under each and show the model's error");
    sub->add_option("--steps", o->steps, "Steps to measure (default 10; the first two are not counted)")
        ->check(positive_count());
    sub->add_flag("--json", o->json, "Print the comparison as JSON");
    add_dump_after(*sub, o->dump_after);
    sub->footer(
        "Example:\n  dsl compare samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched "
        "samples/mesh_tiny_spatial_h_2.sched --measure");
    sub->callback([o, &action] { action = [o] { return run_compare(*o); }; });
}

}  // namespace dsl::cli
