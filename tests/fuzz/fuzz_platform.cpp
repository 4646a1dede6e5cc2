// libFuzzer target for the `.platform` parser and printer, the checks that make a Platform, and
// print_platform, whose text must load back.
#include "fuzz_one.hpp"

#include <dsl/scheduler/platform.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace dsl;
    return test::fuzz_one<frontend::PlatformFile>(
        data, size, "fuzz.platform", [](const frontend::PlatformFile& tree, Diagnostics& d) {
            const auto platform = scheduler::platform_from_file(tree, d);
            if (!platform) {
                if (!d.has_errors()) __builtin_trap();  // a platform refused must say why
                return;
            }
            // The canonical text of a checked platform must parse and check again.
            SourceManager sources;
            Diagnostics again;
            const std::string text = scheduler::print_platform(*platform, "fuzz");
            const auto reparsed = frontend::parse_platform(*sources.add("printed.platform", text), again);
            if (!reparsed || !scheduler::platform_from_file(*reparsed, again)) __builtin_trap();
        });
}
