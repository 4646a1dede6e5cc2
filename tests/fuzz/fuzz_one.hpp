// One fuzz input through a parser and, where it parses, the printer and the semantic passes: no input
// may crash or hang them, a failed parse must say why, and what parses must print back to the same tree.
#pragma once

#include "../languages.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dsl::test {

template <typename Tree, typename Check>
int fuzz_one(const std::uint8_t* data, std::size_t size, const char* path, Check&& check_semantics) {
    SourceManager sources;
    Diagnostics diags;
    const SourceFile* file = sources.add(path, std::string(reinterpret_cast<const char*>(data), size));
    const auto tree = parse_tree<Tree>(*file, diags);
    (void)diags.text();  // rendering must cope with any location the parser gives
    if (!tree) {
        if (!diags.has_errors()) __builtin_trap();
        return 0;
    }
    if (diags.has_errors()) __builtin_trap();

    const std::string printed = print_tree(*tree);
    Diagnostics again_diags;
    const auto again = parse_tree<Tree>(*sources.add("printed", printed), again_diags);
    if (!again) __builtin_trap();                                 // the printer wrote text that does not parse
    if (tree_json(*again) != tree_json(*tree)) __builtin_trap();  // ... or that parses to another tree
    if (print_tree(*again) != printed) __builtin_trap();          // printing is not idempotent

    Diagnostics semantic;
    check_semantics(*tree, semantic);
    (void)semantic.text();
    return 0;
}

}  // namespace dsl::test
