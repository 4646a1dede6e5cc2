// `dsl predict NET [SCHED] --load CK --output OUT`: a layer's output for every sample of a data set, written
// to a .npy file or an HDF5 dataset (or one per file of a collection, `--output 'out/{stem}.npy'`), each
// process its own tiles: the prediction is never gathered.
#include "commands.hpp"
#include "data_options.hpp"
#include "evaluation.hpp"
#include "run_setup.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/prediction.hpp>
#include <dsl/backend/trainer.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

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

// Where the predictions go: the samples [first, first + count) of the data set into one output.
struct Target {
    backend::OutputPath path;
    std::int64_t first = 0, count = 0;
    std::unique_ptr<backend::OutputArray> out;
};

constexpr std::string_view stem_field = "{stem}";

// The outputs of `--output` for `count` samples: one, or with "{stem}" one per file that the first input's
// collection reads (each with that file's samples, as far as `count` goes), the field replaced by the file's
// name without its folder and extension. Empty with the reason when they cannot be.
std::vector<Target> output_targets(const std::string& output, const frontend::Network& net,
                                   const backend::DataSource& data, std::int64_t count, std::string& error) {
    std::vector<Target> out;
    const auto named = [&](const std::string& spec) {
        auto path = backend::parse_output_path(spec, error);
        if (!path) error = "--output " + error;
        return path;
    };
    if (output.find(stem_field) == std::string::npos) {
        auto path = named(output);
        if (path) out.push_back(Target{*path, 0, count, nullptr});
        return out;
    }
    const auto input = std::find_if(net.layers.begin(), net.layers.end(),
                                    [](const frontend::Layer& l) { return l.op == frontend::OpKind::input; });
    if (input == net.layers.end()) {
        error = fmt::format("--output '{}' names an output per input file, but the network has no input", output);
        return {};
    }
    const auto files = backend::source_files(data, input->name);
    if (files.empty()) {
        error = fmt::format(
            "--output '{}' writes an output per file of the input's data ({}), but '{}' is not "
            "read from a collection of files (--data {}=FOLDER, a pattern or @LIST)",
            output, stem_field, input->name, input->name);
        return {};
    }
    std::map<std::string, std::string> made;  // output path -> the file it is of
    std::int64_t first = 0;
    for (const auto& [spec, samples] : files) {
        if (first >= count) break;
        const std::string stem = std::filesystem::path(backend::data_file_name(spec)).stem().string();
        std::string text = output;
        for (std::size_t at; (at = text.find(stem_field)) != std::string::npos;)
            text.replace(at, stem_field.size(), stem);
        auto path = named(text);
        if (!path) return {};
        if (const auto [it, fresh] = made.emplace(path->str(), spec); !fresh) {
            error = fmt::format(
                "--output '{}': {} and {} would both be written to '{}'; give the files different "
                "names, or name the outputs by more than their stem",
                output, it->second, spec, path->str());
            return {};
        }
        out.push_back(Target{*path, first, std::min(samples, count - first), nullptr});
        first += samples;
    }
    return out;
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
    if (p.output.find(stem_field) == std::string::npos && !backend::parse_output_path(p.output, error)) {
        io.err() << "error: --output " << error << "\n";
        return user_error;
    }
    DataOptions inputs = o.data;  // the labels are not needed: the loss is not asked for
    inputs.labels_optional = true;
    auto data = open_samples(net, o.seed, inputs, p.samples, error);
    if (!data) {
        io.err() << "error: " << error << "\n";
        return user_error;
    }
    std::vector<Target> targets = output_targets(p.output, net, *data->source, data->count, error);
    if (targets.empty()) {
        io.err() << "error: " << error << "\n";
        return user_error;
    }
    bool writable = true;
    for (const Target& t : targets)
        if (comm.rank() == 0 && !backend::can_write_output(t.path, p.force, error)) {
            writable = false;
            break;
        }
    if (!agree(comm, writable, "error: --output " + error + "\n")) return user_error;
    const std::int64_t batch = run_batch(checked, o);
    auto trainer = load_trained(run_pipeline(o, io), net, schedule, batch, kernels, comm, o.load, io);
    if (!trainer) return user_error;

    const frontend::Layer& l = net.layers[static_cast<std::size_t>(layer)];
    const auto shape = [&](std::int64_t samples) {
        std::vector<std::int64_t> out{samples};
        out.insert(out.end(), l.shape.dims.begin(), l.shape.dims.end());
        return out;
    };
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
    // around) and writes only the samples that are there. An output is made when its first sample is
    // predicted and closed after its last, by every process alike, in the targets' order.
    bool written = true;
    std::size_t next = 0;  // the first output not yet closed
    for (std::int64_t first = 0; first < data->count; first += batch) {
        trainer->evaluate(*data->source, first);
        const backend::OutputTile t = trainer->output_tile(layer);
        const std::int64_t keep = t.leader ? std::clamp<std::int64_t>(data->count - first - t.n0, 0, t.dims.n) : 0;
        const std::int64_t per_sample = t.dims.n > 0 ? t.dims.elements() / t.dims.n : 0;
        const std::int64_t end = std::min(first + batch, data->count);
        for (std::size_t k = next; k < targets.size() && targets[k].first < end; ++k) {
            Target& target = targets[k];
            if (!target.out) {
                target.out = backend::create_output(target.path, shape(target.count), p.force, comm, error);
                if (!agree(comm, target.out != nullptr,
                           fmt::format("error: cannot write '{}': {}\n", target.path.str(), error)))
                    return user_error;
            }
            // This process's samples of the mini-batch that are the output's (none: a write all the same).
            const std::int64_t lo = std::max(target.first, first + t.n0);
            const std::int64_t hi = std::min(target.first + target.count, first + t.n0 + keep);
            backend::Dims d = t.dims;
            d.n = std::max<std::int64_t>(0, hi - lo);
            const float* values = t.values.data() + (d.n > 0 ? (lo - first - t.n0) * per_sample : 0);
            written =
                timed([&] { return target.out->write(d.n > 0 ? lo - target.first : 0, t.at, d, values, error); }) &&
                written;
        }
        // Not in place: the reason comes from the first process that has one (a part it could not write, or the
        // move into place), and what was under the name before is as it was.
        for (; next < targets.size() && targets[next].first + targets[next].count <= end; ++next) {
            Target& target = targets[next];
            written = timed([&] { return target.out->close(written, error); });
            target.out.reset();
            if (!agree(comm, written || error.empty(),
                       fmt::format("error: writing '{}' failed: {}\n", target.path.str(), error)) ||
                !written)
                return user_error;
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double write_seconds = comm.max(std::chrono::duration<double>(writing).count());
    std::string dims = targets.size() == 1 ? std::to_string(data->count) : "S";
    for (const std::int64_t d : l.shape.dims) dims += ", " + std::to_string(d);
    const std::string what = targets.size() == 1 ? fmt::format("{} [{}]", targets.front().path.str(), dims)
                                                 : fmt::format("{} outputs {} ([{}], S the samples of each input file)",
                                                               targets.size(), p.output, dims);
    io.out() << fmt::format(
        "wrote {} of layer '{}' for {} sample{} ({} process{}, batch {}) in {:.2f} s (writing {:.2f} s)\n", what,
        l.name, data->count, data->count == 1 ? "" : "s", comm.size(), comm.size() == 1 ? "" : "es", batch, seconds,
        write_seconds);
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
    cmd->add_option("--output", p->output,
                    "OUT.npy or OUT.h5:/dataset: an [S, ...] float32 array; with '{stem}' in it, one per file of a "
                    "collection the input reads (out/{stem}.npy)")
        ->required()
        ->check(file_name());
    cmd->add_option("--layer", p->layer, "The layer whose output is written (default: the last that is not a loss)");
    cmd->add_flag("--force", p->force, "Replace the output file (or HDF5 dataset) if it exists");
    cmd->footer("Example:\n  dsl predict samples/mesh_tiny.net --load ckpt --data x=x.npy --output pred.npy");
    cmd->callback([p, &action] { action = [p] { return run_predict(*p); }; });
}

}  // namespace dsl::cli
