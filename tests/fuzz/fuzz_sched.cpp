// libFuzzer target for the `.sched` parser: no input may crash it, and what parses must print back to the same tree.
#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/print.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    dsl::SourceManager sources;
    dsl::Diagnostics diags;
    const dsl::SourceFile* file = sources.add("fuzz.sched", std::string(reinterpret_cast<const char*>(data), size));
    const auto tree = dsl::frontend::parse_sched(*file, diags);
    if (!tree) {
        // A failed parse must say why, at a place the diagnostic can show.
        if (!diags.has_errors()) __builtin_trap();
        for (const auto& d : diags.all()) (void)dsl::format_diagnostic(d);
        return 0;
    }
    if (diags.has_errors()) __builtin_trap();

    const std::string printed = dsl::frontend::print_sched(*tree);
    const dsl::SourceFile* again_file = sources.add("printed.sched", printed);
    dsl::Diagnostics again_diags;
    const auto again = dsl::frontend::parse_sched(*again_file, again_diags);
    if (!again) __builtin_trap();  // the printer wrote text that does not parse
    if (dsl::frontend::sched_to_json(*again, false) != dsl::frontend::sched_to_json(*tree, false)) __builtin_trap();
    if (dsl::frontend::print_sched(*again) != printed) __builtin_trap();  // printing is not idempotent
    return 0;
}
