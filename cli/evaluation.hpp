// Evaluation, as `dsl eval` and `dsl run --eval-every` do it: a trained network's loss over a data set with
// batch norm's running statistics and dropout off, and the figures of each loss layer (accuracy and mean IoU
// for a classification, MSE and MAE for a regression), summed over the processes.
#pragma once

#include "run_setup.hpp"

#include <dsl/backend/comm.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dsl::cli {

// One loss layer's figures over the evaluated samples.
struct LossFigures {
    std::string name;
    double loss = 0.0;    // its mean, before its weight
    double weight = 1.0;  // the layer's
    // softmax_cross_entropy (per sample) and pixel_cross_entropy (per pixel): the share of argmax
    // predictions equal to the label, and the mean over the classes present (in the labels or the
    // predictions) of |prediction = c and label = c| / |prediction = c or label = c|.
    std::optional<double> accuracy, mean_iou;
    // A regression loss (float labels): the mean squared and absolute difference between the prediction
    // (the loss's input; for bce_with_logits its sigmoid) and the target, over every element.
    std::optional<double> mse, mae;
};

struct EvalFigures {
    std::int64_t samples = 0;   // evaluated
    std::int64_t left_out = 0;  // at the end of the data set, where a last partial mini-batch cannot run
    double loss = 0.0;          // the sum of each loss times its weight, as training minimizes
    std::vector<LossFigures> losses;
};

// Evaluates the network as `trainer` holds it on samples [0, samples) of `data`: mini-batches of the
// trainer's size, then the remainder as one smaller mini-batch on a trainer of that size with the same
// state, where the schedule can split it (else those samples are left out, and counted). Every process of
// `comm` calls it alike; the figures are the same on each. The trainer's weights are untouched; batch norm
// uses its running statistics, dropout is the identity.
EvalFigures evaluate(backend::Trainer& trainer, const frontend::Network& net, const scheduler::Schedule& schedule,
                     backend::Kernels kernels, backend::Comm& comm, backend::DataSource& data, std::int64_t samples);

// The data an evaluation or prediction reads, in order, and how many of its samples: --samples K (at most
// the data set's), else the data set's. Synthetic data (no files) has no end: it needs --samples; --shuffle
// has no place here. Null with the reason.
struct Samples {
    std::unique_ptr<backend::DataSource> source;
    std::int64_t count = 0;
};
std::optional<Samples> open_samples(const frontend::Network& net, std::uint64_t seed, const DataOptions& data,
                                    std::optional<std::int64_t> samples, std::string& error);

// The trainer of `dsl eval` and `dsl predict`: this process's part of the network under `schedule` with
// mini-batch `batch`, holding the weights and running statistics of checkpoint `load` (made with the
// optimizer its meta names, whose state it also holds), dropout off. Null where it cannot be made or the
// checkpoint does not fit, said once by the first process that failed.
std::unique_ptr<backend::Trainer> load_trained(const scheduler::Pipeline& pipeline, const frontend::Network& net,
                                               const scheduler::Schedule& schedule, std::int64_t batch,
                                               backend::Kernels kernels, backend::Comm& comm, const std::string& load,
                                               Output& io);

// The options `dsl eval` and `dsl predict` share: NET, SCHED, --load (`load_help`, required), the data
// options, --samples ("`verb` the first K samples"), --batch, --seed, --kernels, --procs, --device, and
// --auto-schedule with --platform, as `dsl run` has them.
void add_trained_options(CLI::App& cmd, RunOptions& o, std::optional<std::int64_t>& samples,
                         const std::string& load_help, const std::string& verb);

// The figures as a JSON object: {"samples", "loss", "losses": {NAME: {"loss", "accuracy", ...}}}, and as
// text lines (one per loss layer).
nlohmann::json figures_json(const EvalFigures& f);
std::string figures_text(const EvalFigures& f);

}  // namespace dsl::cli
