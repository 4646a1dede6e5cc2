// The normalization statistics, on the host: each batch or group norm's statistics of the step (per channel;
// group norm's per sample and group), batch norm's running ones, and the sums in double that a layer's
// kernels add its tile's terms to and that its group adds over the processes. It alone changes them.
#pragma once

#include "timeline.hpp"

#include <dsl/backend/trainer.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dsl::backend {

class Statistics {
public:
    Statistics(std::size_t layers, Timeline& timeline);

    // Batch norm's statistics of `channels` channels, the step's and the running ones (mean 0, variance 1).
    void start_running(int layer, std::size_t channels);

    // Two sums of `n` terms each, zeroed, for a kernel to add a tile's terms to (`a`: of the values, or of a
    // gradient, `b` of their squares, or of another gradient).
    void start_sums(std::size_t n);
    double* a() { return a_.data(); }
    double* b() { return b_.data(); }
    const std::vector<double>& sums_a() const { return a_; }
    const std::vector<double>& sums_b() const { return b_; }
    // Both sums added over `group` (none: the tile's alone); a replica that does not speak adds nothing.
    void sum(Comm* group, bool speaks);
    // The first sum alone added over `group` (global pooling's).
    void sum_a(Comm* group);

    // The step's statistics of `n` channels (or samples and groups) from `first` on, from the sums over
    // `count` elements each: mean and 1 / sqrt(biased variance + eps). `momentum`: the running ones move
    // toward them (PyTorch's running variance is unbiased), unless it is negative.
    void from_sums(int layer, std::size_t first, std::size_t n, double count, double eps, double momentum);
    // The running statistics as the step's, for evaluation.
    void from_running(int layer, std::size_t first, std::size_t n, double eps);
    const float* mean(int layer) const { return held_[at(layer)].mean.data(); }
    const float* inv_std(int layer) const { return held_[at(layer)].inv_std.data(); }

    // A layer's running statistics as checkpoints hold them: `name`.running_mean and .running_var, its
    // `block` of `total` channels from `first` on (gathered whole where `gather` is given, which makes the
    // whole of a block held at a pointer), handed out for reading and writing.
    using Gather = std::function<std::vector<float>(const float*)>;
    void add_state(int layer, const std::string& name, const std::vector<std::int64_t>& shape, std::int64_t total,
                   std::size_t first, const Gather& gather, std::vector<StateTensor>& out);
    bool has_running(int layer) const { return !held_[at(layer)].running_mean.empty(); }

    std::int64_t floats() const;

private:
    struct Held {
        std::vector<float> mean, inv_std, running_mean, running_var;
    };
    static std::size_t at(int layer) { return static_cast<std::size_t>(layer); }

    Timeline& timeline_;
    std::vector<Held> held_;  // per layer
    std::vector<double> a_, b_;
};

}  // namespace dsl::backend
