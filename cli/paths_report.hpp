// The trainer's fast paths as commands report them (scheduler/paths.hpp): what `dsl explain` shows of a
// schedule's layers, and what `dsl run` says at its start of the paths that are off.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/paths.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dsl::cli {

// A layer's paths as JSON: ["blocked", "relu fused", "off: filter-block gradients: WHY"].
nlohmann::json paths_json(const scheduler::LayerPaths& paths);

// The paths that are off, each once with the layers it is off for and why ("" where none is): a line each,
// after `indent`.
std::string paths_off_text(const frontend::Network& net, const std::vector<scheduler::LayerPaths>& paths,
                           const std::string& indent);

// Layers' names, the first few of them: "a, b, c, d and 3 more".
std::string some_names(const std::vector<std::string>& names);

// How many layers take each path, of those it concerns: "blocked 12 of 14, relu fused 8 of 8".
std::string paths_count_text(const std::vector<scheduler::LayerPaths>& paths);

}  // namespace dsl::cli
