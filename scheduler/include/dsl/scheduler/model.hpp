// The performance model (section 5 of the reference paper): the time and memory of a training step of a
// network under a schedule on a platform. Compute comes from measured kernel times where the platform has
// them (`dsl calibrate`), else from peak FLOP/s and memory bandwidth; communication from the platform's
// latency and bandwidth (a linear model, alpha + n beta) or measured times, allreduces after Thakur et al.
// Every figure is for the busiest process: the largest tile, the most neighbours.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/kind_costs.hpp>
#include <dsl/scheduler/paths.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/platform.hpp>
#include <dsl/scheduler/recompute.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace dsl::scheduler {

class ShuffleArithmetic;  // shuffle_points.hpp
struct ShufflePoints;

// Moving a tensor from its producer's split into the tile a reader under another split reads (forward),
// and its gradient back (backward).
struct ShuffleCost {
    double seconds = 0.0;    // both ways
    std::int64_t bytes = 0;  // received by the busiest process, both ways
    double memory = 0.0;     // the copy of the tile in the reader's split
};

// What the auto-scheduler asks of a model; tests substitute their own.
class CostModel {
public:
    virtual ~CostModel() = default;
    virtual LayerCost layer(int index, const Distribution& d) const = 0;
    // Reading input `input` (a position in the layer's inputs) of layer `reader` under `to` when its producer
    // runs under `from`; zero when the tiles are the same.
    virtual ShuffleCost shuffle(int reader, int input, const Split& from, const Split& to) const = 0;
    // The same for every pair of a producer's splits `from` and a reader's `to`: out[a * to.size() + b].
    virtual std::vector<ShuffleCost> shuffles(int reader, int input, const std::vector<Split>& from,
                                              const std::vector<Split>& to) const;
    // Bytes per process of a complete schedule.
    virtual double memory(const Schedule& schedule) const = 0;
};

struct LayerPrediction {
    Distribution dist;
    std::vector<std::int64_t> tile;  // the largest output tile: [n, c, spatial...] (or [n, k], or [n])
    LayerCost cost;
    ShuffleCost shuffle;         // into this layer's split, over all its inputs
    double backward_end = 0.0;   // when this layer's backward ends, from the start of backward
    // Its values dropped after forward and made again in backward (recompute=on), or, asked to be, kept as
    // the start of a segment that backward makes again from them (recompute.hpp's segment_starts).
    bool recomputed = false, segment_start = false;
    double allreduce_end = 0.0;  // when its gradient's allreduce ends (0 without parameters)

    // The layer's with the shuffles into it: seconds, halo and shuffle bytes, memory with message buffers.
    double seconds() const { return cost.time() + shuffle.seconds; }
    std::int64_t bytes_moved() const { return cost.halo_bytes + shuffle.bytes; }
    double memory() const { return cost.memory + cost.buffers + shuffle.memory; }
};

struct Prediction {
    std::vector<LayerPrediction> layers;  // indexed like Network::layers
    double forward = 0.0;                 // seconds: compute, halos, sums, shuffles
    double backward = 0.0;                // until the last layer's backward ends
    double allreduce = 0.0;               // every weight-gradient allreduce, end to end
    double allreduce_exposed = 0.0;       // the part that backward does not hide
    double update = 0.0;                  // the SGD step
    double step = 0.0;                    // forward + backward + exposed allreduce + update + exposed read
    // Reading the data: the bytes of its input and label tiles the busiest process reads from files each step,
    // and the seconds they take at the platform's io_bandwidth (`io_bandwidth`, its default where not given).
    // `dsl run` reads them ahead of the step (--prefetch, on by default), overlapped with the step's compute:
    // `read_exposed` is what the read takes beyond the rest of the step. Synthetic data is made, not read.
    double read_bytes = 0.0, read = 0.0, read_exposed = 0.0, io_bandwidth = 0.0;
    std::int64_t halo_bytes = 0;          // the busiest process's, summed over layers and shuffles
    // Bytes per process. `kept` is what activations would be with nothing recomputed.
    // `scratch`: the kernels' and the trainer's scratch buffers (LayerCost::scratch), each one's largest over
    // the layers.
    double activations = 0.0, gradients = 0.0, parameters = 0.0, buffers = 0.0, scratch = 0.0, workspace = 0.0,
           memory = 0.0;
    double kept = 0.0;
    double recompute = 0.0;     // seconds of forward run again in backward
    // The segments recomputation makes again, each just before the backward of the layer that reads it first:
    // that layer's index, and the layers made again, in the order they are.
    std::vector<std::pair<int, std::vector<int>>> segments;
    // The trainer's fast paths per layer (paths.hpp), as the model's facts of the platform have them; memory
    // counts what they hold. Empty where the schedule has no plan (a split the mini-batch cannot take).
    std::vector<LayerPaths> paths;
    double memory_limit = 0.0;  // what the platform gives a process
    // What the communication figures assume, in words: the weight gradients' allreduce algorithm (for the
    // largest), and the links halo exchanges and shuffles take ("-" where there are none).
    std::string allreduce_algorithm = "-", halo_link = "-", shuffle_link = "-";
};

class Model final : public CostModel {
public:
    // A run of `procs` processes with mini-batches of `batch` samples, each layer's kernels priced by its kind's
    // row in `kinds` (the backend's: backend::kind_costs()).
    Model(const frontend::Network& net, const Platform& platform, std::int64_t procs, std::int64_t batch,
          const KindCostTable& kinds);
    const Platform& platform() const { return platform_; }

    LayerCost layer(int index, const Distribution& d) const override;
    ShuffleCost shuffle(int reader, int input, const Split& from, const Split& to) const override;
    std::vector<ShuffleCost> shuffles(int reader, int input, const std::vector<Split>& from,
                                      const std::vector<Split>& to) const override;

    // The whole step of a complete schedule.
    Prediction predict(const Schedule& schedule) const;
    double memory(const Schedule& schedule) const override { return predict(schedule).memory; }

    // The memory a process may use: a processor's memory, times the cores it has as threads, divided among
    // the processes that share a processor.
    double memory_limit() const;
    int threads() const { return threads_; }
    double sharing() const { return share_; }  // processes per processor (1 unless oversubscribed)

    // The building blocks, for calibration and tests.
    // A kernel's time: measured, else interpolated between the measured sizes of the same kernel (same
    // fields but the tensors' samples, rows and columns), else analytic. `outputs`: the output elements a
    // convolution's thread blocks share out (0: not a convolution, no waves).
    double kernel(const std::string& name, std::vector<TimeField> fields, double flops, double bytes,
                  double outputs = 0.0) const;
    // The platform's time of the kernel, measured or interpolated between measured sizes; 0 where it has none.
    double measured_kernel(const std::string& name, std::vector<TimeField> fields, double flops, double bytes,
                           double outputs) const;
    // The analytic time of one call from the published figures: the per-call latency, then the larger of the
    // arithmetic (in waves of output tiles over the compute units, where the platform gives them) and the
    // memory traffic (the roofline).
    // `peak`: the FLOP/s of the arithmetic it runs in, where not float32's (`flops`).
    double analytic_kernel(double flops, double bytes, double outputs, double peak = 0.0) const;
    double sendrecv(double bytes, bool between_nodes) const;
    // The allreduce of `bytes` over `procs` processes; `between_nodes`: they span nodes, and it runs
    // hierarchically (reduce-scatter within each node, allreduce across nodes, allgather within).
    double allreduce(std::int64_t procs, double bytes, bool between_nodes) const;
    // Every process on one link as if alone on it (Thakur et al.): what the hierarchy improves on.
    double flat_allreduce(std::int64_t procs, double bytes, const Link& link) const;
    std::string allreduce_algorithm(std::int64_t procs, double bytes, bool between_nodes) const;
    double drift() const;  // the measured waits for other processes per second of compute, else 0

    // The time keys of every kernel that `layer` runs under `d` (what calibration times alone).
    std::vector<std::string> kernel_keys(int index, const Distribution& d) const;
    // How much longer a layer of kind `op` whose output tile is of size class `size` (the log2 of its bytes)
    // takes in training steps than its kernels timed alone, for this run's processes and threads:
    // "factor.conv.forward procs=P size=S threads=T = F ms" is a factor of F (the time of a millisecond of
    // kernels). Calibration measures it; the nearest class within 3 is used, else 1.
    static int size_class(double bytes);
    double tile_bytes(int index, const Split& split) const;  // the largest output tile of the layer
    std::string factor_key(frontend::OpKind op, bool forward, int size) const;
    double factor(frontend::OpKind op, bool forward, int size) const;
    // Kernel times without the factors (what calibration compares training with).
    void use_raw_kernels(bool raw) { raw_ = raw; }

    // What the model takes a run on this platform to have, as the trainer's paths read it (paths.hpp): the
    // platform's device and kernels, processes that share a node's memory where they fit one node, training
    // without loss scaling. A caller that knows more (this machine's kernels) may say so.
    const RunFacts& facts() const { return facts_; }
    void set_facts(const RunFacts& facts) { facts_ = facts; }

    // The update after backward (SGD, and the wait for the weight gradients' allreduces) measured in
    // training: "step.update params=N procs=P threads=T". Where the platform has it, it replaces the
    // modelled update and exposed allreduce.
    std::string update_key() const;

    // Whether training runs layer `index`, a ReLU, in the forward pass of the layer before it under
    // `schedule` (as the trainer fuses them): its forward then costs nothing of its own.
    bool relu_fused(std::size_t index, const Schedule& schedule) const;

private:
    bool relu_fused(std::size_t index, const Schedule& schedule, const RecomputeTimeline& timeline) const;
    // Recomputation's timeline under `schedule`, its segments chosen from the layers' output tiles of `bytes`
    // (the first process's, as the plan chooses them).
    RecomputeTimeline recompute_timeline_of(const Schedule& schedule, const std::vector<double>& bytes) const;
    // predict's gradients, sharing buffers, and its activations with recomputed layers' tiles sharing them
    // too (as `timeline` has them); the recomputation's time.
    void shared_memory(Prediction& out, const RecomputeTimeline& timeline) const;
    // The paths of `schedule`'s layers, their values dropped or kept as `timeline` says.
    std::vector<LayerPaths> paths_of(const Schedule& schedule, const RecomputeTimeline& timeline) const;
    struct Geometry;
    Geometry geometry(int index, const Split& split) const;
    std::vector<std::int64_t> key_dims(const Dims& d) const;
    double interpolate(const std::string& prefix, double bytes) const;  // measured communication
    double interpolate_kernel(const std::string& name, const std::vector<TimeField>& fields, double flops, double bytes,
                              double outputs) const;
    bool halo_between_nodes(const Split& split) const;
    bool shuffle_between_nodes(const Split& from, const Split& to) const;
    LayerCost compute_layer(int index, const Distribution& d, std::vector<std::string>* keys) const;
    // The shuffle class of input `input` of `reader` (see shuffles_), or -1 when there is no shuffle (data is
    // made where it is read), the class that counts channels when `channels` (splits with F or C parts); and the
    // cost of a shuffle of `producer`'s output from its class's arithmetic, each point `per_point` elements (its
    // channels, or 1 where the class counts them).
    int shuffle_class(int reader, int input, bool channels) const;
    ShuffleCost shuffle_cost(const ShufflePoints& s, const frontend::Layer& producer, const Split& from,
                             const Split& to, double per_point) const;

    const frontend::Network& net_;
    Platform platform_;
    const KindCostTable& kinds_;
    std::int64_t procs_, batch_;
    int threads_ = 1;
    double share_ = 1.0;
    bool multi_node_ = false;
    // Measured communication: by the key prefix ("sendrecv", "allreduce procs=4"), size -> seconds.
    std::map<std::string, std::vector<std::pair<double, double>>> measured_;
    bool measured_sendrecv_ = false;
    // Measured kernel times by kernel and every field but the tensors' sizes (their channels kept), as
    // (size, seconds) sorted by size: the outputs' elements, or the input's where the key has no output.
    std::map<std::string, std::vector<std::pair<double, double>>> kernel_sizes_;
    double drift_ = 0.0;  // measured waits per second of compute
    // Per layer, the layers that read it, once per input they read it as, in order.
    std::vector<std::vector<int>> readers_;
    bool raw_ = false;
    double shuffle_extra_ = 0.0;  // measured cost of a shuffle beyond its transfer
    // Shuffles' tile arithmetic per element of a channel. It depends on the producer's extents, the reader's
    // window and the two splits only, so that many layers share it: each (reader, input) pair has a class of
    // the first two (`shuffle_class_`, numbered in `classes_`), and the arithmetic is kept by class and splits.
    mutable std::vector<std::vector<int>> shuffle_class_;
    mutable std::map<std::vector<std::int64_t>, int> classes_;
    mutable std::shared_ptr<ShuffleArithmetic> shuffles_;
    // factor() by layer kind, direction and size class: it looks up to 7 keys, every layer of every candidate.
    mutable std::map<std::tuple<frontend::OpKind, bool, int>, double> factors_;
    RunFacts facts_;
    // The first process's plan of the last splits and overlaps paths_of was asked about (what its paths read
    // of a plan but the layers' precision and recomputation, which it sets).
    mutable std::vector<std::pair<Split, bool>> planned_for_;
    mutable std::optional<Plan> planned_;
};

}  // namespace dsl::scheduler
