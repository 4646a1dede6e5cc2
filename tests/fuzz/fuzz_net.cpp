// libFuzzer target for the `.net` parser, printer, elaboration and shape inference.
#include "fuzz_one.hpp"

#include <dsl/frontend/passes.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace dsl;
    return test::fuzz_one<frontend::NetFile>(data, size, "fuzz.net", [](const frontend::NetFile& tree, Diagnostics& d) {
        // Imports are left out: they read files, which would make runs depend on the disk.
        if (auto net = frontend::elaborate(tree, {}, d)) frontend::infer_shapes(*net, d);
    });
}
