// The front end's passes, in order: each takes the previous stage's data and gives the next one's.
//   parse_net (parse.hpp)  text -> NetFile
//   resolve_imports        NetFile -> the imported NetFiles, read and parsed
//   elaborate              NetFile + imports -> Network (blocks expanded, names and inputs resolved)
//   infer_shapes           Network -> Network with shapes, parameters, FLOPs and memory
// load_network runs them all; `dump_after` names a pass after which the state is printed to stderr.
#pragma once

#include <dsl/base/diagnostics.hpp>
#include <dsl/frontend/net_ast.hpp>
#include <dsl/frontend/network.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dsl::frontend {

// Where `import "x"` looks after the importing file's folder: $DSL_STDLIB, then the installed stdlib.
std::vector<std::string> stdlib_dirs();

// Reads and parses every file that `main` imports, transitively, each once; reports missing files and
// import cycles. Returns the imported files in the order their blocks become visible.
std::vector<NetFile> resolve_imports(const NetFile& main, SourceManager& sources, Diagnostics& diags);

// Expands blocks and repeats, names every layer, resolves inputs (the previous statement unless `from`
// names them) and checks kinds, arguments, arity and cycles. Collects every independent error.
std::optional<Network> elaborate(const NetFile& main, const std::vector<NetFile>& imports, Diagnostics& diags);

// Fills shapes, parameter counts, FLOPs and activation memory; reports shape mismatches.
bool infer_shapes(Network& net, Diagnostics& diags);

struct LoadedNetwork {
    NetFile file;
    std::vector<NetFile> imports;
    Network net;
};

std::optional<LoadedNetwork> load_network(const std::string& path, SourceManager& sources, Diagnostics& diags,
                                          const std::string& dump_after = "");

// A network trains through its loss layers: reports one that has none, as `severity` (a warning where it is
// only checked, an error where it would train), at its output's statement with a note on the loss that
// fits it. False then.
bool check_loss(const LoadedNetwork& net, Severity severity, Diagnostics& diags);

}  // namespace dsl::frontend
