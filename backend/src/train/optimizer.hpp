// The trainer's update: the weight gradients' sums over the processes that hold each layer's parameters
// (started as backward makes them), loss scaling, and the optimizer (SGD with momentum, Adam, AdamW) with its
// moments, its step count and rate, and where the parameters and gradients lie when a node's processes share
// them. It alone changes those; the slots' weights and gradients are what it updates and sums.
#pragma once

#include "tile.hpp"
#include "timeline.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/scheduler/paths.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace dsl::backend {

class Optimizer {
public:
    Optimizer(const TrainConfig& config, Kernels kernels, Comm& world, Timeline& timeline);
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    // The moments of every slot's parameters (zero), and where they and the gradients lie: in memory that
    // each group of holders (`holder_groups`: each once, in the order every process made them) shares, where
    // it can; `paths` say where it cannot, and why. From then on it updates these slots' parameters.
    void place(std::vector<Slot>& slots, std::vector<Comm*> holder_groups, std::vector<scheduler::LayerPaths>& paths);
    // Whether a layer's weights and moments lie in memory its holders share, each updating its share.
    bool shares(int layer) const { return held_[at(layer)].shares; }

    // Starts the sum of a layer's weight gradients over the processes that hold its weights (every process,
    // unless F or C parts split them in blocks); a replica that does not speak for its group adds zeros.
    void start_sum(Slot& s, bool speaks);
    // Lets the sums started so far progress.
    void progress();
    // Once backward is done: waits for the sums, unscales them, and updates every parameter.
    void update();

    // What a loss's gradient is multiplied by: the loss scale, or 1.
    double gradient_scale() const { return scaling_.scale > 0.0 ? scaling_.scale : 1.0; }
    std::int64_t updates() const { return updates_; }
    void set_updates(std::int64_t n);
    double last_lr() const { return last_lr_; }
    Trainer::LossScale loss_scale() const { return scaling_; }
    void set_loss_scale(const Trainer::LossScale& s) { scaling_ = s; }
    bool skipped() const { return skipped_; }

    // A layer's moments as checkpoints name them (`.weight.momentum`, or `.weight.exp_avg` and
    // `.weight.exp_avg_sq`; the bias's after the weights'), each handed to `add` with whether it is the bias's.
    using AddMoment = std::function<void(const std::string& suffix, Tensor& moment, bool bias)>;
    void each_moment(int layer, const AddMoment& add);

    std::int64_t floats() const;

private:
    // A layer's optimizer state: Adam's first moments or SGD's momenta (m), Adam's second moments (v; empty
    // under sgd), and where they lie.
    struct Held {
        Tensor mw, mb, vw, vb;
        bool shares = false;        // w, b and their moments lie in memory the holders share (place_parameters)
        bool sums_in_node = false;  // dw and db lie in memory where the holders sum them (place_gradients)
    };
    static std::size_t at(int layer) { return static_cast<std::size_t>(layer); }
    Comm& gradient_group(const Slot& s) const { return s.holders ? *s.holders : world_; }
    std::vector<Comm*> parameter_groups();
    std::vector<Tensor*> group_tensors(const Comm* group, std::initializer_list<Tensor Slot::*> parameters,
                                       std::initializer_list<Tensor Held::*> moments);
    void set_group_path(std::vector<scheduler::LayerPaths>& paths, const Comm* group, scheduler::PathKind kind,
                        const char* why);
    void place_gradients(std::vector<scheduler::LayerPaths>& paths);
    void place_parameters(std::vector<scheduler::LayerPaths>& paths);
    bool sum_left_to_update(const Slot& s) const;
    bool unscale_gradients();
    void optimize();

    const TrainConfig& config_;
    Kernels k_;
    Memory& mem_;
    Comm& world_;
    Timeline& timeline_;
    std::vector<Slot>* slots_ = nullptr;
    std::vector<Comm*> holder_groups_;
    std::vector<Held> held_;  // per layer
    // Where the weight gradients lie when a group sums them in memory of its own (place_gradients), and where
    // the weights and moments lie when the processes that hold them share them (place_parameters).
    std::vector<std::shared_ptr<float>> summing_spaces_, common_parameters_;
    std::vector<float> summed_chunk_;  // optimize: a chunk of a gradient's sum over the processes
    std::int64_t updates_ = 0;         // the optimizer's steps (Adam's t before its next update)
    double last_lr_ = 0.0;
    Trainer::LossScale scaling_;  // dynamic loss scaling's state (scale 0: none)
    bool skipped_ = false;        // the last update was skipped
};

}  // namespace dsl::backend
