// The names of what the performance model looks up in a platform's measured times and calibration measures,
// written once: the model builds time keys from these and calibration reads keys back into them.
//
// A layer's kernel is "<kernels>.<phase>": the kernels' name of its kind (layer_kinds.hpp: "conv",
// "activation" for relu and leaky_relu, "loss" for the losses) and the phase ("conv.backward_data"). The rest
// are the keys of no layer's kernel. These strings are what `.platform` files hold: they must not change.
#pragma once

#include <dsl/frontend/layer_kinds.hpp>

#include <optional>
#include <string>

namespace dsl::scheduler {

enum class Phase { forward, backward, backward_data, backward_weights };

const char* phase_name(Phase phase);  // "forward", "backward_data", ...

// "conv.backward_data": the kernel of `kind` (which must have kernels) in `phase`.
std::string kernel_name(frontend::OpKind kind, Phase phase);

// A layer kernel's name read back: the first kind with those kernels (relu for "activation") and the phase.
struct LayerKernel {
    frontend::OpKind kind;
    Phase phase;
};
std::optional<LayerKernel> parse_kernel_name(const std::string& name);  // nullopt: no layer's kernel

// How much longer a layer of a kind takes in training than its kernels alone: "factor.conv.forward".
std::string factor_name(frontend::OpKind kind, bool forward);

// The keys of no layer's kernel.
inline constexpr const char* sgd_kernel = "sgd";              // the update of `params` weights
inline constexpr const char* adam_kernel = "adam";            // Adam's or AdamW's update of `params` weights
inline constexpr const char* update_kernel = "step.update";   // the update measured in training steps
inline constexpr const char* drift_kernel = "drift";          // waits for other processes per compute
inline constexpr const char* shuffle_kernel = "shuffle";      // a shuffle's cost beyond its transfer
inline constexpr const char* sendrecv_kernel = "sendrecv";    // a point-to-point exchange of `bytes`
inline constexpr const char* allreduce_kernel = "allreduce";  // an allreduce of `bytes` over `procs`
inline constexpr const char* factor_prefix = "factor.";

}  // namespace dsl::scheduler
