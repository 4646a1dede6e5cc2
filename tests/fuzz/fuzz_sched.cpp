// libFuzzer target for the `.sched` parser and printer, and for binding schedules to a small network.
#include "fuzz_one.hpp"

#include <dsl/frontend/passes.hpp>
#include <dsl/scheduler/schedule.hpp>

namespace {

// A network with blocks, a halo of 3, stride 2 and a residual add: every kind of schedule check applies.
const char* network = R"(
input x [N, 3, 32, 32]
label y [N]
block cbr(f, s = 1) {
  conv = conv(f, kernel = 3, stride = s, pad = 1)
  bn = batchnorm
  relu = relu
}
stem = conv(8, kernel = 7, pad = 3)
a = cbr(8)
b = cbr(8)
sum = add from a, b
c = cbr(16, s = 2)
pool = global_avgpool
fc = fc(10)
loss = softmax_cross_entropy from fc, y
)";

const dsl::frontend::Network& the_network() {
    static dsl::SourceManager sources;
    static const dsl::frontend::Network net = [] {
        dsl::Diagnostics d;
        auto tree = dsl::frontend::parse_net(*sources.add("fuzz.net", network), d);
        auto n = dsl::frontend::elaborate(*tree, {}, d);
        dsl::frontend::infer_shapes(*n, d);
        if (d.has_errors()) __builtin_trap();
        return *n;
    }();
    return net;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace dsl;
    return test::fuzz_one<frontend::SchedFile>(
        data, size, "fuzz.sched",
        [](const frontend::SchedFile& tree, Diagnostics& d) { scheduler::apply_schedule(the_network(), tree, d); });
}
