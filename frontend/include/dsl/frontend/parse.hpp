// The parsers: text to owned syntax tree. Parsing stops at the first syntax error, which is reported
// to `diags`; nothing is returned then.
#pragma once

#include <dsl/base/diagnostics.hpp>
#include <dsl/frontend/net_ast.hpp>
#include <dsl/frontend/platform_ast.hpp>
#include <dsl/frontend/sched_ast.hpp>

#include <optional>

namespace dsl::frontend {

std::optional<NetFile> parse_net(const SourceFile& file, Diagnostics& diags);
std::optional<SchedFile> parse_sched(const SourceFile& file, Diagnostics& diags);
std::optional<PlatformFile> parse_platform(const SourceFile& file, Diagnostics& diags);

}  // namespace dsl::frontend
