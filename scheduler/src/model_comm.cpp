// The performance model's communication (model.hpp): point-to-point messages and allreduces, from this
// machine's measurements where calibration made them, else from the platform's links: flat allreduces after
// Thakur, Rabenseifner and Gropp, hierarchical ones across nodes as NCCL and Aluminum run them.
#include <dsl/scheduler/model.hpp>

#include <dsl/scheduler/kernel_names.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dsl::scheduler {

namespace {

bool power_of_two(std::int64_t p) { return p > 0 && (p & (p - 1)) == 0; }

}  // namespace

// Measured times of `prefix` at the nearest sizes, linear between them and beyond the last two.
double Model::interpolate(const std::string& prefix, double bytes) const {
    const auto& p = measured_.at(prefix);
    if (p.size() == 1) return p.front().second * std::max(1.0, bytes / std::max(1.0, p.front().first));
    std::size_t hi = 1;
    while (hi + 1 < p.size() && p[hi].first < bytes) ++hi;
    const auto& [x0, y0] = p[hi - 1];
    const auto& [x1, y1] = p[hi];
    const double t = y0 + (y1 - y0) * (bytes - x0) / (x1 - x0);
    return std::max(t, std::min(y0, y1));
}

double Model::sendrecv(double bytes, bool between_nodes) const {
    if (bytes <= 0) return 0.0;
    // Processes that share a processor wait for each other's turn at it too.
    if (!between_nodes && measured_sendrecv_) return interpolate(sendrecv_kernel, bytes) * share_;
    const Link& link = between_nodes ? platform_.network : platform_.node;
    return (link.latency + bytes / link.bandwidth) * share_;
}

double Model::flat_allreduce(std::int64_t procs, double bytes, const Link& link) const {
    if (procs <= 1 || bytes <= 0) return 0.0;
    // Thakur, Rabenseifner and Gropp (2005), as MPICH chooses: recursive doubling for short messages,
    // Rabenseifner's reduce-scatter and allgather for long ones on a power of two, else the ring.
    const double a = link.latency, b = 1.0 / link.bandwidth;
    const double g =
        platform_.memory_bandwidth > 0 ? 3.0 / platform_.memory_bandwidth : 0.0;  // reduce: 2 reads, 1 write
    const double p = static_cast<double>(procs), lg = std::ceil(std::log2(p)), f = (p - 1.0) / p;
    double t = 2.0 * (p - 1.0) * a + 2.0 * f * bytes * b + f * bytes * g;
    if (bytes <= 2048)
        t = lg * (a + bytes * b + bytes * g);
    else if (power_of_two(procs))
        t = 2.0 * lg * a + 2.0 * f * bytes * b + f * bytes * g;
    return t * share_;
}

namespace {

// Processes of a node taking part in a hierarchical allreduce over `procs`, and the nodes: ranks fill nodes
// in order.
std::pair<std::int64_t, std::int64_t> node_groups(std::int64_t procs, std::int64_t per_node) {
    const std::int64_t local = std::clamp<std::int64_t>(per_node, 1, procs);
    return {local, (procs + local - 1) / local};
}

const char* flat_name(std::int64_t procs, double bytes) {
    return bytes <= 2048 ? "recursive doubling" : power_of_two(procs) ? "Rabenseifner" : "ring";
}

}  // namespace

double Model::allreduce(std::int64_t procs, double bytes, bool between_nodes) const {
    if (procs <= 1 || bytes <= 0) return 0.0;
    const std::string prefix = fmt::format("{} procs={}", allreduce_kernel, procs);
    if (!between_nodes && measured_.count(prefix)) return interpolate(prefix, bytes);
    if (!between_nodes) return flat_allreduce(procs, bytes, platform_.node);
    const auto [local, nodes] = node_groups(procs, platform_.procs_per_node);
    const double flat = flat_allreduce(procs, bytes, platform_.network);
    if (local == 1) return flat;
    // Hierarchical, as NCCL and Aluminum run it across nodes: a ring reduce-scatter within each node over its
    // link, leaving each of a node's processes a 1/local share of the sum; an allreduce of that share across
    // the nodes, every process of a node at once on its share of the network (node_bandwidth is per process);
    // then a ring allgather within the node. Short messages, where its extra steps' latency outweighs the
    // bandwidth it saves, go flat (NCCL's tuner chooses by size likewise).
    const Link& in = platform_.node;
    const double l = static_cast<double>(local), f = (l - 1.0) / l;
    const double g = platform_.memory_bandwidth > 0 ? 3.0 / platform_.memory_bandwidth : 0.0;
    const double reduce_scatter = (l - 1.0) * in.latency + f * bytes / in.bandwidth + f * bytes * g;
    const double allgather = (l - 1.0) * in.latency + f * bytes / in.bandwidth;
    return std::min(flat, (reduce_scatter + allgather) * share_ + flat_allreduce(nodes, bytes / l, platform_.network));
}

std::string Model::allreduce_algorithm(std::int64_t procs, double bytes, bool between_nodes) const {
    if (procs <= 1 || bytes <= 0) return "none";
    if (!between_nodes) {
        if (measured_.count(fmt::format("{} procs={}", allreduce_kernel, procs)))
            return fmt::format("measured on {} processes (interpolated in size)", procs);
        return fmt::format("{} within a node over {} processes", flat_name(procs, bytes), procs);
    }
    const auto [local, nodes] = node_groups(procs, platform_.procs_per_node);
    if (local == 1 || allreduce(procs, bytes, true) >= flat_allreduce(procs, bytes, platform_.network))
        return fmt::format("{} over {} processes across {} nodes, as if each alone on the network",
                           flat_name(procs, bytes), procs, nodes);
    return fmt::format(
        "hierarchical: ring reduce-scatter within each node ({} processes), {} across {} nodes, ring allgather "
        "within each node",
        local, flat_name(nodes, bytes / static_cast<double>(local)), nodes);
}

// Processes that should run in step drift apart (caches, the operating system, other tenants), and at every
// sum and exchange the early ones wait for the late: calibration measures that wait in training as a
// fraction of the compute ("drift compute=1000 procs=P": microseconds per millisecond of compute).
double Model::drift() const { return drift_; }

}  // namespace dsl::scheduler
