// The parser, printer and JSON of each language under one set of names, so that a template serves them all.
#pragma once

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/print.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace dsl::test {

inline std::optional<frontend::NetFile> parse_tree(const SourceFile& f, Diagnostics& d, const frontend::NetFile*) {
    return frontend::parse_net(f, d);
}
inline std::optional<frontend::SchedFile> parse_tree(const SourceFile& f, Diagnostics& d, const frontend::SchedFile*) {
    return frontend::parse_sched(f, d);
}
inline std::optional<frontend::PlatformFile> parse_tree(const SourceFile& f, Diagnostics& d,
                                                        const frontend::PlatformFile*) {
    return frontend::parse_platform(f, d);
}
inline std::string print_tree(const frontend::NetFile& t) { return frontend::print_net(t); }
inline std::string print_tree(const frontend::SchedFile& t) { return frontend::print_sched(t); }
inline std::string print_tree(const frontend::PlatformFile& t) { return frontend::print_platform_file(t); }
inline nlohmann::json tree_json(const frontend::NetFile& t) { return frontend::net_to_json(t, false); }
inline nlohmann::json tree_json(const frontend::SchedFile& t) { return frontend::sched_to_json(t, false); }
inline nlohmann::json tree_json(const frontend::PlatformFile& t) { return frontend::platform_to_json(t, false); }

template <typename Tree>
std::optional<Tree> parse_tree(const SourceFile& f, Diagnostics& d) {
    return parse_tree(f, d, static_cast<const Tree*>(nullptr));
}

}  // namespace dsl::test
