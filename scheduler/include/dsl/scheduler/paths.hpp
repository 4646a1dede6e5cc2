// The trainer's fast paths: per layer, which of them it takes under a plan and, where one is off, why. They
// are decided here, from the plan and what the run has (its kernels, whether its processes share a node's
// memory, its options), as the plan's last decisions: the trainer reads them rather than deciding again,
// `dsl explain` shows them, `dsl run` says at its start which are off, and the model counts what each holds.
// Every process decides alike: a decision reads nothing that differs between processes.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/kind_costs.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/platform.hpp>

#include <string>
#include <vector>

namespace dsl::scheduler {

// What the paths depend on beyond the plan.
struct RunFacts {
    Device device = Device::cpu;
    bool training = true;          // evaluation and prediction keep planar tiles and run ReLUs apart
    bool blocked_kernels = false;  // the kernel set runs tiles kept in blocks of 16 channels (the CPU's)
    std::string planar_why = "the kernels take planar tiles";  // what keeps blocked_kernels false
    // Convolutions multiply in 16 bits where a layer's precision asks: bfloat16 (AVX-512 BF16, a GPU), float16.
    bool bfloat16_products = false, float16_products = false;
    // The processes that hold a layer's parameters may keep them, and sum their gradients, in a node's shared
    // memory: they are on one node and its memory can be had (the trainer finds out at setup whether it can).
    bool node_memory = false;
    bool loss_scaling = false;  // dynamic loss scaling, which reads every process's whole gradients
    bool filter_blocks = true;  // weight gradients by blocks of filters allowed (TrainConfig::filter_blocks)
};

enum class PathKind {
    blocked,         // the layer's tile kept in blocks of 16 channels, which its kernels read and write as they are
    relu_fused,      // its one reader, a ReLU, written in its own forward pass
    filter_blocks,   // a convolution's weight gradient by blocks of filters, over its tiles gathered whole
    shared_weights,  // one copy of the parameters and their moments on the node, each process updating its share
    node_sums,       // the weight gradients summed in the node's shared memory
    products16,      // a convolution of precision=bfloat16 (float16) multiplies in it
    overlap,         // the input's halo exchange overlapped with the interior's compute
};
const char* path_name(PathKind kind);  // "blocked", "relu fused", "filter-block gradients", ...

struct Path {
    PathKind kind;
    bool on = false;
    std::string why;  // where it is off: what keeps it off
};

// The paths that concern a layer, in PathKind's order.
struct LayerPaths {
    std::vector<Path> paths;
    const Path* find(PathKind kind) const;
    bool on(PathKind kind) const;
    void set(PathKind kind, bool on, std::string why = {});
};

// Each layer's paths under `plan` (any process's), its kinds' rows in `kinds`.
std::vector<LayerPaths> kernel_paths(const frontend::Network& net, const Plan& plan, const KindCostTable& kinds,
                                     const RunFacts& facts);

// A layer's paths as text: "blocked, relu fused, off: filter-block gradients: its weights are fewer than its
// input and output: summing its gradient costs less".
std::string paths_text(const LayerPaths& paths);

}  // namespace dsl::scheduler
