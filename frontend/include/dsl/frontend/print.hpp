// Canonical text and JSON for the syntax trees. Printing a parsed file and parsing the text again gives
// the same tree; the JSON (without locations) is how tests compare trees.
#pragma once

#include <dsl/frontend/net_ast.hpp>
#include <dsl/frontend/platform_ast.hpp>
#include <dsl/frontend/sched_ast.hpp>

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace dsl::frontend {

std::string print_net(const NetFile& file);
std::string print_sched(const SchedFile& file);
std::string print_platform_file(const PlatformFile& file);

// The tree as JSON; `with_locations` adds "line"/"col" to every node.
nlohmann::json net_to_json(const NetFile& file, bool with_locations);
nlohmann::json sched_to_json(const SchedFile& file, bool with_locations);
nlohmann::json platform_to_json(const PlatformFile& file, bool with_locations);

}  // namespace dsl::frontend
