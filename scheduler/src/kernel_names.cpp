// The names of kernels in platform time keys (kernel_names.hpp).
#include <dsl/scheduler/kernel_names.hpp>

#include <dsl/base/error.hpp>

#include <fmt/format.h>

#include <array>
#include <utility>

namespace dsl::scheduler {

namespace {

constexpr std::array<std::pair<Phase, const char*>, 4> phases{{{Phase::forward, "forward"},
                                                               {Phase::backward, "backward"},
                                                               {Phase::backward_data, "backward_data"},
                                                               {Phase::backward_weights, "backward_weights"}}};

}  // namespace

const char* phase_name(Phase phase) {
    for (const auto& [p, name] : phases)
        if (p == phase) return name;
    return "?";
}

std::string kernel_name(frontend::OpKind kind, Phase phase) {
    const char* kernels = frontend::kind_of(kind).kernels;
    DSL_INTERNAL_CHECK(*kernels, std::string("layer kind '") + frontend::op_name(kind) + "' has no kernels");
    return fmt::format("{}.{}", kernels, phase_name(phase));
}

std::optional<LayerKernel> parse_kernel_name(const std::string& name) {
    const std::size_t dot = name.find('.');
    if (dot == std::string::npos || dot == 0) return std::nullopt;
    const std::optional<frontend::OpKind> kind = frontend::kind_with_kernels(name.substr(0, dot));
    if (!kind) return std::nullopt;
    for (const auto& [p, phase] : phases)
        if (name.compare(dot + 1, std::string::npos, phase) == 0) return LayerKernel{*kind, p};
    return std::nullopt;
}

std::string factor_name(frontend::OpKind kind, bool forward) {
    return fmt::format("{}{}.{}", factor_prefix, frontend::op_name(kind),
                       phase_name(forward ? Phase::forward : Phase::backward));
}

}  // namespace dsl::scheduler
