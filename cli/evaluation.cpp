// Evaluation over a data set: the trainer's forward in inference mode, batch after batch, with each loss
// layer's figures counted from its input's tiles and the data source's labels, then summed over processes.
#include "evaluation.hpp"

#include "commands.hpp"
#include "planning.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

namespace dsl::cli {

namespace {

using frontend::Layer;
using frontend::OpKind;

bool classifies(const Layer& l) { return l.op == OpKind::softmax_cross_entropy || l.op == OpKind::pixel_cross_entropy; }

// A loss layer's counts, summed over batches and then processes: the loss times the batch's samples; for a
// classification the correct predictions, the labels counted, and per class the intersection and union; for
// a regression the squared and absolute differences and the elements.
struct Counts {
    const Layer* layer = nullptr;
    std::int64_t classes = 0;
    std::vector<double> values;  // loss, then {correct, total, inter[C], union[C]} or {squares, absolutes, count}

    double& loss() { return values[0]; }
};

Counts counts_for(const frontend::Network& net, const Layer& l) {
    Counts c;
    c.layer = &l;
    if (classifies(l)) {
        const auto& logits = net.layers[static_cast<std::size_t>(l.inputs[0])].shape.dims;
        c.classes = logits.empty() ? 1 : logits[0];
        c.values.assign(static_cast<std::size_t>(3 + 2 * c.classes), 0.0);
    } else if (l.kind().float_labels()) {
        c.values.assign(4, 0.0);
    } else {
        c.values.assign(1, 0.0);
    }
    return c;
}

// Adds one batch's counts of a loss layer: its input's tile on this process against the data source's
// labels (or targets) of that tile, samples [first + n0, ...). A replica that another process speaks for
// adds nothing.
void count_batch(const frontend::Network& net, backend::Trainer& trainer, backend::DataSource& data, std::int64_t first,
                 Counts& c) {
    const Layer& l = *c.layer;
    if (c.values.size() == 1) return;
    const backend::OutputTile t = trainer.output_tile(l.inputs[0]);
    if (!t.leader) return;
    const Layer& label = net.layers[static_cast<std::size_t>(l.inputs[1])];
    const backend::Dims d = t.dims;
    const backend::Index at = label.spatial() ? t.at : backend::Index{};
    if (classifies(l)) {
        // One label per sample, or per point of the logits' spatial extents.
        const backend::Dims ld{d.n, 1, label.spatial() ? d.space : backend::Index{}};
        std::vector<std::int32_t> labels(static_cast<std::size_t>(ld.elements()));
        data.labels(label, first + t.n0, at, backend::dense_view(labels.data(), ld));
        double* v = c.values.data();
        const std::int64_t plane = d.points();
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t p = 0; p < ld.points(); ++p) {
                const float* x = t.values.data() + n * d.c * plane + p;
                std::int64_t best = 0;  // the first of equal maxima, as numpy's argmax
                for (std::int64_t k = 1; k < d.c; ++k)
                    if (x[k * plane] > x[best * plane]) best = k;
                const std::int64_t truth = labels[static_cast<std::size_t>(n * ld.points() + p)];
                v[2] += 1.0;
                if (best == truth) {
                    v[1] += 1.0;
                    v[3 + truth] += 1.0;
                    v[3 + c.classes + truth] += 1.0;
                } else {
                    v[3 + c.classes + best] += 1.0;
                    if (truth >= 0 && truth < c.classes) v[3 + c.classes + truth] += 1.0;
                }
            }
        return;
    }
    std::vector<float> targets(t.values.size());
    data.targets(label, first + t.n0, at, backend::dense_view(targets.data(), d));
    const bool logits = l.kind().regression == frontend::Regression::bce_with_logits;
    double squares = 0.0, absolutes = 0.0;
    for (std::size_t i = 0; i < targets.size(); ++i) {
        const double x = t.values[i];
        const double p = logits ? 1.0 / (1.0 + std::exp(-x)) : x;
        const double e = p - static_cast<double>(targets[i]);
        squares += e * e;
        absolutes += std::abs(e);
    }
    c.values[1] += squares;
    c.values[2] += absolutes;
    c.values[3] += static_cast<double>(targets.size());
}

// A trainer for the last, smaller mini-batch, holding `trainer`'s state; null where the schedule cannot
// split that many samples.
std::unique_ptr<backend::Trainer> remainder_trainer(backend::Trainer& trainer, const frontend::Network& net,
                                                    const scheduler::Schedule& schedule, backend::Kernels kernels,
                                                    backend::Comm& comm, std::int64_t batch) {
    backend::TrainConfig cfg = trainer.config();
    cfg.batch = batch;
    cfg.training = false;
    std::unique_ptr<backend::Trainer> small;
    try {
        small = make_trainer(scheduler::Pipeline{}, net, schedule, kernels, cfg, comm);  // no stage printed again
    } catch (const UserError&) {
        return nullptr;  // the same answer on every process: the schedule is the same
    }
    const auto from = trainer.state();
    auto to = small->writable_state();
    DSL_INTERNAL_CHECK(from.size() == to.size(), "a trainer of another network");
    for (std::size_t i = 0; i < from.size(); ++i) {
        DSL_INTERNAL_CHECK(from[i].name == to[i].name && from[i].size == to[i].size, "a trainer of another network");
        std::memcpy(to[i].data, from[i].data, static_cast<std::size_t>(from[i].size) * sizeof(float));
    }
    small->state_written();
    return small;
}

}  // namespace

EvalFigures evaluate(backend::Trainer& trainer, const frontend::Network& net, const scheduler::Schedule& schedule,
                     backend::Kernels kernels, backend::Comm& comm, backend::DataSource& data, std::int64_t samples) {
    std::vector<Counts> counts;
    for (const Layer& l : net.layers)
        if (l.is_loss()) counts.push_back(counts_for(net, l));
    EvalFigures f;
    double total = 0.0;
    // A batch's losses are means over its samples: weighted by them, they sum to the data set's mean.
    auto run = [&](backend::Trainer& t, std::int64_t first, std::int64_t n) {
        total += t.evaluate(data, first) * static_cast<double>(n);
        const auto& losses = t.last_losses();
        DSL_INTERNAL_CHECK(losses.size() == counts.size(), "a loss per loss layer");
        for (std::size_t i = 0; i < counts.size(); ++i) {
            counts[i].loss() += losses[i].value * static_cast<double>(n);
            count_batch(net, t, data, first, counts[i]);
        }
        f.samples += n;
    };
    const std::int64_t batch = trainer.config().batch;
    const std::int64_t full = samples / batch, rest = samples % batch;
    for (std::int64_t b = 0; b < full; ++b) run(trainer, b * batch, batch);
    if (rest > 0) {
        if (auto small = remainder_trainer(trainer, net, schedule, kernels, comm, rest))
            run(*small, full * batch, rest);
        else
            f.left_out = rest;
    }
    // The counts of every process (the losses are the same everywhere already).
    for (Counts& c : counts) {
        if (c.values.size() > 1) comm.allreduce(c.values.data() + 1, static_cast<std::int64_t>(c.values.size() - 1));
        LossFigures lf;
        lf.name = c.layer->name;
        lf.weight = c.layer->weight;
        const double n = std::max<double>(1.0, static_cast<double>(f.samples));
        lf.loss = c.loss() / n;
        const double* v = c.values.data();
        if (classifies(*c.layer)) {
            lf.accuracy = v[2] > 0 ? v[1] / v[2] : 0.0;
            double sum = 0.0;
            std::int64_t present = 0;
            for (std::int64_t k = 0; k < c.classes; ++k) {
                const double uni = v[3 + c.classes + k];
                if (uni > 0) sum += v[3 + k] / uni, ++present;
            }
            lf.mean_iou = present > 0 ? sum / static_cast<double>(present) : 0.0;
        } else if (c.values.size() == 4) {
            lf.mse = v[3] > 0 ? v[1] / v[3] : 0.0;
            lf.mae = v[3] > 0 ? v[2] / v[3] : 0.0;
        }
        f.losses.push_back(lf);
    }
    f.loss = total / std::max<double>(1.0, static_cast<double>(f.samples));
    return f;
}

std::optional<Samples> open_samples(const frontend::Network& net, std::uint64_t seed, const DataOptions& data,
                                    std::optional<std::int64_t> samples, std::string& error) {
    if (data.shuffle) {
        error = "--shuffle: an evaluation or a prediction reads the samples in their order";
        return std::nullopt;
    }
    Samples out;
    out.source = make_data(data, net, seed, 1, error);
    if (!out.source) return std::nullopt;
    const std::int64_t have = out.source->samples();
    if (have < 0) {
        if (!samples) {
            error = "synthetic data (no --data) has no end: say how many samples with --samples";
            return std::nullopt;
        }
        out.count = *samples;
        return out;
    }
    if (samples && *samples > have) {
        error = fmt::format("--samples {}: the data set has {} sample{}", *samples, have, have == 1 ? "" : "s");
        return std::nullopt;
    }
    out.count = samples.value_or(have);
    return out;
}

std::unique_ptr<backend::Trainer> load_trained(const scheduler::Pipeline& pipeline, const frontend::Network& net,
                                               const scheduler::Schedule& schedule, std::int64_t batch,
                                               backend::Kernels kernels, backend::Comm& comm, const std::string& load,
                                               Output& io) {
    std::string error;
    auto checkpoint = load_shared(comm, load, error);
    if (!agree(comm, checkpoint.has_value(), fmt::format("error: --load '{}': {}\n", load, error))) return nullptr;
    backend::TrainConfig cfg;
    cfg.batch = batch;
    cfg.training = false;
    const auto& meta = checkpoint->meta;
    const std::string optimizer =
        meta.contains("optimizer") && meta["optimizer"].is_string() ? meta["optimizer"].get<std::string>() : "sgd";
    cfg.optimizer = optimizer == "adam"    ? frontend::Optimizer::adam
                    : optimizer == "adamw" ? frontend::Optimizer::adamw
                                           : frontend::Optimizer::sgd;
    std::unique_ptr<backend::Trainer> trainer;
    try {
        trainer = make_trainer(pipeline, net, schedule, kernels, cfg, comm);
    } catch (const UserError& e) {
        io.err() << fmt::format("error: {} (--batch, or 'batch' in the schedule)\n", e.what());
        return nullptr;
    }
    std::int64_t step = 0;
    const bool restored = backend::restore(*trainer, *checkpoint, step, error);
    if (!agree(comm, restored, fmt::format("error: --load '{}' does not fit {}: {}\n", load, "the network", error)))
        return nullptr;
    return trainer;
}

nlohmann::json figures_json(const EvalFigures& f) {
    nlohmann::json losses = nlohmann::json::object();
    for (const LossFigures& l : f.losses) {
        nlohmann::json j{{"loss", l.loss}, {"weight", l.weight}};
        if (l.accuracy) j["accuracy"] = *l.accuracy;
        if (l.mean_iou) j["mean_iou"] = *l.mean_iou;
        if (l.mse) j["mse"] = *l.mse;
        if (l.mae) j["mae"] = *l.mae;
        losses[l.name] = j;
    }
    nlohmann::json out{{"samples", f.samples}, {"loss", f.loss}, {"losses", losses}};
    if (f.left_out > 0) out["left_out"] = f.left_out;
    return out;
}

std::string figures_text(const EvalFigures& f) {
    std::string out;
    for (const LossFigures& l : f.losses) {
        out += fmt::format("  {:<16} loss {:.6f}", l.name, l.loss);
        if (l.accuracy) out += fmt::format("  accuracy {:.4f}", *l.accuracy);
        if (l.mean_iou) out += fmt::format("  mean IoU {:.4f}", *l.mean_iou);
        if (l.mse) out += fmt::format("  MSE {:.6g}", *l.mse);
        if (l.mae) out += fmt::format("  MAE {:.6g}", *l.mae);
        out += "\n";
    }
    return out;
}

void add_trained_options(CLI::App& cmd, RunOptions& o, std::optional<std::int64_t>& samples,
                         const std::string& load_help, const std::string& verb) {
    cmd.add_option("NET", o.net, "The network (.net)")->required();
    cmd.add_option("SCHED", o.sched, "A schedule (.sched); without one, one process");
    cmd.add_option("--load", o.load,
                   load_help +
                       " (a folder that 'dsl run --save' wrote: the checkpoint its 'latest' names; or one of "
                       "its checkpoints, DIR/step-N)")
        ->required()
        ->check(folder_name());
    add_data_options(cmd, o.data);
    cmd.add_option("--samples", samples, verb + " the first K samples (default: all of the data set's)")
        ->check(positive_count());
    cmd.add_option("--batch", o.batch, "Mini-batch size N (default: the schedule's, else 4)")->check(positive_count());
    cmd.add_option("--seed", o.seed, "Seed of the synthetic data (default 0)")->check(nonnegative_count());
    cmd.add_option("--kernels", o.kernels, "cpu (oneDNN and Halide; default) or reference (plain loops)")
        ->check(CLI::IsMember({"cpu", "reference"}));
    cmd.add_option("--procs", o.procs, "Processes, where the schedule leaves the count open")->check(positive_count());
    cmd.add_option("--device", o.device,
                   "cpu or gpu: where every layer runs (default: with --auto-schedule the platform's device, else cpu)")
        ->check(CLI::IsMember({"cpu", "gpu"}));
    add_dump_after(cmd, o.dump_after);
    cmd.add_flag("--auto-schedule", o.auto_schedule,
                 "Fill what the schedule leaves open (everything, without one) with the auto-scheduler, as 'dsl run' "
                 "does");
    cmd.add_option("--platform", o.platform,
                   "With --auto-schedule: the platform it plans for, whose device runs the network unless --device "
                   "says otherwise (default: the schedule's, else 'local')");
}

}  // namespace dsl::cli
