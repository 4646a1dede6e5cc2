// The normalization statistics (statistics.hpp): their sums over the processes of a layer's group, in
// double, and the mean and inverse standard deviation made from them.
#include "statistics.hpp"

#include <algorithm>
#include <cmath>

namespace dsl::backend {

Statistics::Statistics(std::size_t layers, Timeline& timeline) : timeline_(timeline), held_(layers) {}

void Statistics::start_running(int layer, std::size_t channels) {
    Held& h = held_[at(layer)];
    h.mean.assign(channels, 0.0f);
    h.inv_std.assign(channels, 1.0f);
    h.running_mean.assign(channels, 0.0f);
    h.running_var.assign(channels, 1.0f);
}

void Statistics::start_sums(std::size_t n) {
    a_.assign(n, 0.0);
    b_.assign(n, 0.0);
}

void Statistics::sum(Comm* group, bool speaks) {
    if (!group) return;
    if (!speaks) std::fill(a_.begin(), a_.end(), 0.0), std::fill(b_.begin(), b_.end(), 0.0);
    std::vector<double> both(a_);
    both.insert(both.end(), b_.begin(), b_.end());
    timeline_.wait(
        ProfileEvent::Kind::wait_sum, [&] { group->allreduce(both.data(), static_cast<std::int64_t>(both.size())); },
        static_cast<std::int64_t>(both.size() * sizeof(double)));
    std::copy_n(both.begin(), a_.size(), a_.begin());
    std::copy(both.begin() + static_cast<std::ptrdiff_t>(a_.size()), both.end(), b_.begin());
}

void Statistics::sum_a(Comm* group) {
    if (!group) return;
    timeline_.wait(
        ProfileEvent::Kind::wait_sum, [&] { group->allreduce(a_.data(), static_cast<std::int64_t>(a_.size())); },
        static_cast<std::int64_t>(a_.size() * sizeof(double)));
}

void Statistics::from_sums(int layer, std::size_t first, std::size_t n, double count, double eps, double momentum) {
    Held& h = held_[at(layer)];
    if (h.mean.size() < first + n) h.mean.resize(first + n), h.inv_std.resize(first + n);
    for (std::size_t c = 0; c < n; ++c) {
        const double mean = a_[c] / count;
        const double var = std::max(0.0, b_[c] / count - mean * mean);
        h.mean[first + c] = static_cast<float>(mean);
        h.inv_std[first + c] = static_cast<float>(1.0 / std::sqrt(var + eps));
        if (momentum < 0.0) continue;
        float &running_mean = h.running_mean[first + c], &running_var = h.running_var[first + c];
        const double unbiased = count > 1 ? var * count / (count - 1) : var;
        running_mean = static_cast<float>((1 - momentum) * running_mean + momentum * mean);
        running_var = static_cast<float>((1 - momentum) * running_var + momentum * unbiased);
    }
}

void Statistics::from_running(int layer, std::size_t first, std::size_t n, double eps) {
    Held& h = held_[at(layer)];
    for (std::size_t c = first; c < first + n; ++c) {
        h.mean[c] = h.running_mean[c];
        h.inv_std[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(h.running_var[c]) + eps));
    }
}

void Statistics::add_state(int layer, const std::string& name, const std::vector<std::int64_t>& shape,
                           std::int64_t total, std::size_t first, const Gather& gather, std::vector<StateTensor>& out) {
    Held& h = held_[at(layer)];
    // Each process moves its block of them: the first holder of each block gives it to the others.
    // A gather to one process gives the others nothing: they keep their own.
    if (gather) {
        if (auto mean = gather(h.running_mean.data() + first); !mean.empty()) h.running_mean = std::move(mean);
        if (auto var = gather(h.running_var.data() + first); !var.empty()) h.running_var = std::move(var);
    }
    out.push_back(StateTensor{name + ".running_mean", shape, h.running_mean.data(), total});
    out.push_back(StateTensor{name + ".running_var", shape, h.running_var.data(), total});
}

std::int64_t Statistics::floats() const {
    std::int64_t n = 0;
    for (const Held& h : held_) n += static_cast<std::int64_t>(h.mean.size() * 4);
    return n;
}

}  // namespace dsl::backend
