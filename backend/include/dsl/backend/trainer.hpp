// The interpreter that trains: a checked network's layers run in order over tiles, forward then backward,
// then the optimizer's step (SGD, Adam or AdamW). Under a schedule on P processes, each process holds one
// tile of every tensor (its block of the samples, rows and columns in the layer's distribution), fills the
// margins of its tiles with halos from its neighbours, redistributes a tensor where a reader's distribution differs
// from its producer's, aggregates batch-norm statistics, the loss and global pooling over the processes that share
// them, and allreduces the weight gradients. On one process every tile is the whole tensor, its margins the padding.
#pragma once

#include <dsl/backend/comm.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/paths.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dsl::backend {

struct SyntheticData;  // synthetic.hpp

struct TrainConfig {
    std::int64_t batch = 1;
    frontend::Optimizer optimizer = frontend::Optimizer::sgd;
    double lr = 0.01;       // the base learning rate, which `schedule` scales step by step
    double momentum = 0.9;  // sgd
    double weight_decay = 0.0;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw
    frontend::LrSchedule schedule;
    std::uint64_t seed = 0;  // initialization, and dropout's masks
    // Dynamic loss scaling, by PyTorch GradScaler's rules: the initial scale (0: none). The loss's gradient is
    // multiplied by the scale, the weight gradients by its inverse before the update; a step whose weight
    // gradients are not all finite is skipped (no weight or optimizer state changes; it still counts as a
    // step of the learning-rate schedule and of Adam's t) and halves the scale; `loss_scale_interval` steps
    // in a row that are not double it. A power of two changes no value that stays finite.
    double loss_scale = 0.0;
    std::int64_t loss_scale_interval = 2000;
    // Whether dropout drops (PyTorch's model.train()); false for evaluation (model.eval()), where dropout is
    // the identity. Batch norm's statistics follow step() and evaluate(), not this.
    bool training = true;
    // Whether a convolution whose weights the processes share may compute its weight gradient by blocks of
    // filters over its tiles gathered whole (backend/src/train/filter_blocks.cpp), rather than every process
    // the whole gradient over its tile, summed: the same terms, added in another order.
    bool filter_blocks = true;
};

// Where a step's samples come from. `first` is the global index of the tile's first sample; `at` the global
// place of its first element along each spatial dimension (none for a tensor without them), so that a source
// can make or read just that tile.
class DataSource {
public:
    virtual ~DataSource() = default;
    virtual void inputs(const frontend::Layer& input, std::int64_t first, const Index& at, View tile) = 0;
    // Class labels: {n, 1, spatial extents} per pixel (or voxel), {n, 1} per sample.
    virtual void labels(const frontend::Layer& label, std::int64_t first, const Index& at,
                        BasicView<std::int32_t> tile) = 0;
    // A float label's targets (a regression loss's), {n, C, spatial extents} (a label [N, K] is {n, K}), in host
    // memory. A source without float labels has none to give: asking is an internal error.
    virtual void targets(const frontend::Layer& label, std::int64_t first, const Index& at, View tile);
    // Where an input's (or a float label's) values are the synthetic data set's, its definition, so that a
    // kernel set whose tensors are elsewhere (a GPU's) can make them there instead of copying them over; else
    // null.
    virtual const SyntheticData* synthetic(const frontend::Layer& layer) const {
        (void)layer;
        return nullptr;
    }
    // The samples in the data set, S (a sample index i reads sample i mod S, in the order of the epoch
    // i / S), or -1 where there is no end (synthetic data, a function of the index).
    virtual std::int64_t samples() const { return -1; }
    // A source that reads ahead of the step (--prefetch, data.hpp's read_ahead) says so, and `ready` waits
    // for the read of `layer`'s block of `dims` at (first, at) to end: its values, densely in host memory
    // (float, or int32 for class labels), the very ones that inputs(), labels() or targets() give for it,
    // until the source's next step; null where that block was not read ahead (it is read when asked for). A
    // read that failed throws its error here, as the read would have.
    virtual bool reads_ahead() const { return false; }
    virtual const void* ready(const frontend::Layer& layer, std::int64_t first, const Index& at, const Dims& dims) {
        (void)layer, (void)first, (void)at, (void)dims;
        return nullptr;
    }
};

// A named tensor the trainer owns, for checkpoints: weights, biases, batch-norm running statistics and
// the optimizer's state. Names are the layer's name and a suffix: "conv1.weight", "bn1.running_mean",
// "conv1.weight.momentum" (sgd), "conv1.weight.exp_avg" and "conv1.weight.exp_avg_sq" (adam and adamw, as
// PyTorch names them).
struct StateTensor {
    std::string name;
    std::vector<std::int64_t> shape;
    float* data;
    std::int64_t size;
};

// Where a step's time went on this process, per layer in the network's order, when profiling is on. A
// layer's forward and backward include the communication they wait for (halo exchanges, redistributions,
// sums over processes); `*_wait` is that part. `update` is the SGD step after backward, `update_wait` the
// part spent waiting for the weight-gradient allreduces that backward started.
struct LayerTime {
    double forward = 0.0, forward_wait = 0.0, backward = 0.0, backward_wait = 0.0;
};
// A span of a profiled step on this process, in seconds of profile_clock(): the step's timeline. The compute
// events follow one another without gaps or overlaps from the step's start to its end: each layer's kernels
// (forward; backward, or its data and weight parts where they are separate) and what the layer waits for
// (a halo, a shuffle, a sum over processes), then the update and its wait for the allreduces. The
// communication events span from when this process started it (posted a halo exchange or shuffle, began a
// sum, started an allreduce) to when it saw it complete: a halo's wait ends when the process asks for it
// after the interior's compute (overlap), or at once; an allreduce's, at the first test between backward's
// layers that finds it done.
struct ProfileEvent {
    enum class Kind {
        // compute
        forward, backward, backward_data, backward_weights, update,
        // compute: waiting for other processes
        wait_halo, wait_shuffle, wait_halo_back, wait_shuffle_back, wait_sum, wait_allreduces,
        wait_others,  // the performance model's: processes drifting apart, in proportion to the compute
        wait_read,    // for a read of the data that was not done ahead of the step in time (--prefetch)
        // communication
        halo, shuffle, halo_back, shuffle_back, sum, allreduce,
    };
    enum class Phase { forward, backward, update };
    Kind kind = Kind::forward;
    Phase phase = Phase::forward;
    // The layer whose work it is (a halo or shuffle, and a wait for one: its reader's); -1 for the update.
    int layer = -1;
    double start = 0.0, end = 0.0;
    std::int64_t bytes = 0;  // communication: the bytes this process sends
};
bool is_compute(ProfileEvent::Kind kind);

// The clock of profiles, in seconds: steady, the same for every process of a node.
double profile_clock();

struct StepProfile {
    std::vector<LayerTime> layers;
    double update = 0.0, update_wait = 0.0;
    double read_wait = 0.0;  // the waits for reads ahead of the step (--prefetch), within the layers' waits
    std::vector<ProfileEvent> events;
    double start = 0.0, end = 0.0;     // the step's, on profile_clock()
};

// One loss layer's mean loss over the mini-batch, before its weight: the total that training minimizes is
// the sum of weight * value over the loss layers.
struct LossValue {
    std::string name;  // the loss layer's
    double value = 0.0;
    double weight = 1.0;  // the layer's `weight`
};

// A layer's values on this process after the last step or evaluation: where its tile lies in the whole
// tensor (its first sample within the mini-batch and its place along each spatial dimension; every channel)
// and its elements, densely in C order over `dims`, in host memory. `leader` is false on a process that holds
// a replica of a tile that another process speaks for (a layer not split over the spatial dimensions that the
// processes of a spatial group each hold whole).
struct OutputTile {
    std::int64_t n0 = 0;
    Index at;
    Dims dims;
    bool leader = true;
    std::vector<float> values;
};

class Trainer {
public:
    // This process's part of a run as `plan` (scheduler::make_plan, for comm's rank and size and config's
    // mini-batch) has it; every process of `comm` constructs its Trainer and calls every method alike, in the
    // same order. Without `comm`, the one process of a plan for one.
    Trainer(const frontend::Network& net, Kernels kernels, TrainConfig config, const scheduler::Plan& plan,
            Comm* comm = nullptr);
    ~Trainer();
    Trainer(Trainer&&) noexcept;
    Trainer& operator=(Trainer&&) noexcept;

    // One step on the samples [first, first + batch): forward, backward, SGD. Returns the mean loss over
    // the whole mini-batch (the same on every process); with several loss layers, the sum of theirs, each
    // times its weight, which is what is minimized.
    double step(DataSource& data, std::int64_t first);

    // Forward only, with batch-norm running statistics (inference); returns the mean loss (weighted, as step's).
    double evaluate(DataSource& data, std::int64_t first);

    // Layer `layer`'s output tile on this process (not a label's or a loss's, which have none).
    OutputTile output_tile(int layer);

    // The updates made so far (Adam's t, and the step of the learning-rate schedule): 0 when made, then one
    // per step; a restored checkpoint sets it to the steps it had made.
    std::int64_t updates() const;
    void set_updates(std::int64_t n);
    // The learning rate of the last step's update (the schedule's at that step), or the next one's before a
    // step.
    double last_lr() const;
    // Dynamic loss scaling (TrainConfig::loss_scale): the scale the next step uses, and the steps in a row
    // since it last changed that were not skipped; a checkpoint keeps both.
    struct LossScale {
        double scale = 0.0;
        std::int64_t good_steps = 0;
    };
    LossScale loss_scale() const;
    void set_loss_scale(const LossScale& s);
    // Whether the last step's update was skipped: its weight gradients were not all finite at its loss scale.
    bool last_step_skipped() const;
    const TrainConfig& config() const;

    // The last step's (or evaluation's) loss of every loss layer, in the network's order.
    const std::vector<LossValue>& last_losses() const;

    // Every tensor a checkpoint holds, in layer order, whole, in host memory. Parameters and optimizer state
    // are the same on every process; batch-norm running statistics are this process's (the same everywhere
    // with the default statistics over the mini-batch). On a GPU, and where F or C parts split the parameters
    // in blocks, they are copies, valid until the next call: the blocks are gathered whole, so that every
    // process must call `state` then (it is collective). After writing into them, `state_written` puts them
    // back where the kernels read them, each process taking its blocks.
    std::vector<StateTensor> state();
    // The same for a checkpoint that the first process writes (collective): the blocks go to that process
    // alone. There every tensor is whole; elsewhere those held in blocks are empty (null, size 0), and the
    // rest as `state` gives them.
    std::vector<StateTensor> saved_state();
    // The same tensors to be written whole, with values that are not read (not collective): `state_written`
    // puts them in after every one is written.
    std::vector<StateTensor> writable_state();
    void state_written();

    // Times every layer of the steps that follow (a clock read around each layer and each wait), and records
    // their events.
    void profile(bool on);
    const StepProfile& last_profile() const;  // the last step's, when profiling

    // The fast paths each layer takes, as the plan decided them for this run's kernels, memory and options
    // (scheduler/paths.hpp), and as setup found them (a node's shared memory that could not be had): the same
    // on every process.
    const std::vector<scheduler::LayerPaths>& paths() const;

    // Bytes this process sent to others in halo exchanges and redistributions in its last step.
    std::int64_t halo_bytes() const;

    // Bytes of every buffer the trainer holds now on this process (tiles with their margins, gradients,
    // parameters, message buffers).
    std::int64_t memory_bytes() const;

    // The trainer's state (backend/src/train/trainer_impl.hpp), which the backend's kind table
    // (backend/src/kinds/) runs each layer's kind over.
    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsl::backend
