// `dsl predict NET [SCHED] --load CK --output OUT`: a layer's output for every sample of a data set, written
// to a .npy file or an HDF5 dataset, each process its own tiles: the prediction is never gathered.
#include "commands.hpp"
#include "data_options.hpp"
#include "evaluation.hpp"
#include "run_setup.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/prediction.hpp>
#include <dsl/backend/trainer.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>

namespace dsl::cli {

namespace {

struct PredictOptions {
    RunOptions run;
    std::optional<std::int64_t> samples;
    std::string output, layer;
    bool force = false;
};

// Layers with values to write: all but labels and losses.
bool has_output(const frontend::Layer& l) { return l.op != frontend::OpKind::label && !l.is_loss(); }

// The layer --layer names (default: the last with values), or -1 with the reason.
int chosen_layer(const frontend::Network& net, const std::string& name, std::string& error) {
    int last = -1;
    std::string names;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const frontend::Layer& l = net.layers[i];
        if (!has_output(l)) continue;
        last = static_cast<int>(i);
        if (!name.empty() && l.name == name) return last;
        names += (names.empty() ? "" : ", ") + l.name;
    }
    if (name.empty() && last >= 0) return last;
    for (const frontend::Layer& l : net.layers)
        if (l.name == name) {
            error = fmt::format("--layer '{}' is a {} and has no output to write; the layers that have: {}", name,
                                l.is_loss() ? "loss" : "label", names);
            return -1;
        }
    error = name.empty() ? "the network has no layer with an output"
                         : fmt::format("--layer: no layer '{}' in the network; its layers: {}", name, names);
    return -1;
}

int predict_on(const PredictOptions& p, const Checked& checked, const scheduler::Schedule& schedule,
               backend::Kernels kernels, backend::Comm& comm, Output& io) {
    const RunOptions& o = p.run;
    const auto& net = checked.net.net;
    std::string error;
    const int layer = chosen_layer(net, p.layer, error);
    if (layer < 0) {
        io.err() << "error: " << error << "\n";
        return user_error;
    }
    const auto path = backend::parse_output_path(p.output, error);
    if (!path) {
        io.err() << "error: --output " << error << "\n";
        return user_error;
    }
    const bool writable = comm.rank() != 0 || backend::can_write_output(*path, p.force, error);
    if (!agree(comm, writable, "error: --output " + error + "\n")) return user_error;
    DataOptions inputs = o.data;  // the labels are not needed: the loss is not asked for
    inputs.labels_optional = true;
    auto data = open_samples(net, o.seed, inputs, p.samples, error);
    if (!data) {
        io.err() << "error: " << error << "\n";
        return user_error;
    }
    const std::int64_t batch = run_batch(checked, o);
    auto trainer = load_trained(run_pipeline(o, io), net, schedule, batch, kernels, comm, o.load, io);
    if (!trainer) return user_error;

    const frontend::Layer& l = net.layers[static_cast<std::size_t>(layer)];
    std::vector<std::int64_t> shape{data->count};
    shape.insert(shape.end(), l.shape.dims.begin(), l.shape.dims.end());
    auto out = backend::create_output(*path, shape, p.force, comm, error);
    if (!agree(comm, out != nullptr, fmt::format("error: cannot write '{}': {}\n", path->str(), error)))
        return user_error;
    const auto t0 = std::chrono::steady_clock::now();
    // The time spent writing (and, for HDF5, waiting in the collective writes for the other processes).
    std::chrono::steady_clock::duration writing{};
    auto timed = [&](auto&& write) {
        const auto w0 = std::chrono::steady_clock::now();
        const bool done = write();
        writing += std::chrono::steady_clock::now() - w0;
        return done;
    };
    // Whole mini-batches; the last, where the samples end within it, reads past the end (the data wraps
    // around) and writes only the samples that are there.
    bool written = true;
    for (std::int64_t first = 0; first < data->count; first += batch) {
        trainer->evaluate(*data->source, first);
        backend::OutputTile t = trainer->output_tile(layer);
        const std::int64_t keep = t.leader ? std::clamp<std::int64_t>(data->count - first - t.n0, 0, t.dims.n) : 0;
        backend::Dims d = t.dims;
        d.n = keep;
        written = timed([&] { return out->write(first + t.n0, t.at, d, t.values.data(), error); }) && written;
    }
    // Not in place: the reason comes from the first process that has one (a part it could not write, or the
    // move into place), and what was under the name before is as it was.
    written = timed([&] { return out->close(written, error); });
    if (!agree(comm, written || error.empty(), fmt::format("error: writing '{}' failed: {}\n", path->str(), error)) ||
        !written)
        return user_error;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double write_seconds = comm.max(std::chrono::duration<double>(writing).count());
    std::string dims;
    for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
    io.out() << fmt::format(
        "wrote {} [{}] of layer '{}' for {} sample{} ({} process{}, batch {}) in {:.2f} s (writing {:.2f} s)\n",
        path->str(), dims, l.name, data->count, data->count == 1 ? "" : "s", comm.size(), comm.size() == 1 ? "" : "es",
        batch, seconds, write_seconds);
    return ok;
}

int run_predict(const PredictOptions& p) {
    return run_trained(
        p.run, [&](const Checked& checked, const scheduler::Schedule& schedule, backend::Kernels kernels,
                   backend::Comm& comm, Output& io) { return predict_on(p, checked, schedule, kernels, comm, io); });
}

}  // namespace

void setup_predict(CLI::App& app, Action& action) {
    auto p = std::make_shared<PredictOptions>();
    RunOptions& o = p->run;
    CLI::App* cmd = app.add_subcommand(
        "predict", "Write a trained network's output (or a layer's) for every sample to a .npy or HDF5 file");
    add_trained_options(*cmd, o, p->samples, "The checkpoint whose weights predict", "Predict");
    cmd->add_option("--output", p->output, "OUT.npy or OUT.h5:/dataset: an [S, ...] float32 array")->required();
    cmd->add_option("--layer", p->layer, "The layer whose output is written (default: the last that is not a loss)");
    cmd->add_flag("--force", p->force, "Replace the output file (or HDF5 dataset) if it exists");
    cmd->footer("Example:\n  dsl predict samples/mesh_tiny.net --load ckpt --data x=x.npy --output pred.npy");
    cmd->callback([p, &action] { action = [p] { return run_predict(*p); }; });
}

}  // namespace dsl::cli
