// `dsl eval NET [SCHED] --load CK`: a trained network's loss and figures (accuracy and mean IoU, or MSE and
// MAE) over a data set, in inference mode, on the processes the schedule has, as `dsl run` runs them.
#include "commands.hpp"
#include "data_options.hpp"
#include "evaluation.hpp"
#include "run_setup.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/trainer.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>

namespace dsl::cli {

namespace {

struct EvalOptions {
    RunOptions run;
    std::optional<std::int64_t> samples;
};

int evaluate_on(const EvalOptions& e, const Checked& checked, const scheduler::Schedule& schedule,
                backend::Kernels kernels, backend::Comm& comm, Output& io) {
    const RunOptions& o = e.run;
    const auto& net = checked.net.net;
    std::string error;
    auto data = open_samples(net, o.seed, o.data, e.samples, error);
    if (!data) {
        io.err() << "error: " << error << "\n";
        return user_error;
    }
    const std::int64_t batch = run_batch(checked, o);
    auto trainer = load_trained(run_pipeline(o, io), net, schedule, batch, kernels, comm, o.load, io);
    if (!trainer) return user_error;
    const auto t0 = std::chrono::steady_clock::now();
    const EvalFigures f = evaluate(*trainer, net, schedule, kernels, comm, *data->source, data->count);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.json) {
        nlohmann::json j = figures_json(f);
        j["network"] = o.net;
        j["checkpoint"] = o.load;
        j["processes"] = comm.size();
        j["batch"] = batch;
        io.out() << j.dump() << "\n";
    } else {
        io.out() << fmt::format(
                        "evaluated {} from {} on {} sample{} ({} process{}, batch {}) in {:.2f} s: loss {:.6f}\n",
                        o.net, o.load, f.samples, f.samples == 1 ? "" : "s", comm.size(), comm.size() == 1 ? "" : "es",
                        batch, seconds, f.loss)
                 << figures_text(f);
    }
    if (f.left_out > 0)
        io.err() << fmt::format(
            "note: the last {} sample{} left out: the schedule cannot split a mini-batch of {} (a --batch that "
            "divides the {} samples evaluates them all)\n",
            f.left_out, f.left_out == 1 ? " is" : "s are", f.left_out, f.samples + f.left_out);
    return ok;
}

int run_eval(const EvalOptions& e) {
    return run_trained(
        e.run, [&](const Checked& checked, const scheduler::Schedule& schedule, backend::Kernels kernels,
                   backend::Comm& comm, Output& io) { return evaluate_on(e, checked, schedule, kernels, comm, io); });
}

}  // namespace

void setup_eval(CLI::App& app, Action& action) {
    auto e = std::make_shared<EvalOptions>();
    RunOptions& o = e->run;
    CLI::App* cmd = app.add_subcommand(
        "eval", "Evaluate a trained network: its loss and figures over a data set, weights untouched");
    add_trained_options(*cmd, o, e->samples, "The checkpoint to evaluate", "Evaluate");
    cmd->add_flag("--json", o.json, "Print one JSON object");
    cmd->footer("Example:\n  dsl eval samples/mesh_tiny.net --load ckpt --data x=x.npy --data y=y.npy --json");
    cmd->callback([e, &action] { action = [e] { return run_eval(*e); }; });
}

}  // namespace dsl::cli
