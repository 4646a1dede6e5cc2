// Calibration: every kernel that the model names for a network, under any split, can be timed alone from its
// key (what `dsl calibrate` and the first use of 'local' do): images and volumes, whole and in tiles, with
// periodic padding; and Adam's update under its own kernel name.
#include "run_dsl.hpp"
#include "support.hpp"

#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/kinds.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/platform.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace dsl;
using namespace dsl::backend;

namespace {

TimingRuns quick() {
    TimingRuns runs;
    runs.warmup = 0;
    runs.reps = 1;
    runs.min_seconds = 0.0;
    return runs;
}

}  // namespace

TEST_CASE("calibration times every kernel of a network's layers from its key, images and volumes, whole and in tiles",
          "[calibrate]") {
    struct Case {
        const char* net;
        std::int64_t batch;
        scheduler::Split split;
    };
    const Case c = GENERATE(
        Case{"tests/dist/modern.net", 2, {2, 1, 1, {1, 2, 2}}}, Case{"tests/dist/vol.net", 2, {1, 1, 1, {1, 1, 1}}},
        Case{"tests/dist/vol.net", 2, {1, 1, 1, {2, 2, 2}}}, Case{"tests/dist/volunet.net", 2, {2, 1, 1, {2, 1, 1}}},
        Case{"tests/dist/periodic.net", 2, {1, 1, 1, {2, 1, 2}}},
        Case{"tests/dist/cosmo.net", 2, {1, 1, 1, {2, 2, 2}}});
    INFO(c.net << " under " << c.split.str());
    test::NetworkFromText l(read(fs::path(source_dir()) / c.net));
    const scheduler::Platform platform = scheduler::Platform{};
    const scheduler::Model model(l.net, platform, c.split.procs(), c.batch, backend::kind_costs());
    std::string error;
    auto data = make_data_source(l.net, 0, "", "", error);
    INFO(error);
    REQUIRE(data);
    std::set<std::string> keys;
    for (std::size_t i = 0; i < l.net.layers.size(); ++i) {
        const scheduler::Distribution d{c.split, false, scheduler::BatchNormStats::batch, std::nullopt};
        for (const std::string& key : model.kernel_keys(static_cast<int>(i), d)) keys.insert(key);
    }
    REQUIRE(keys.size() >= 5);
    for (const std::string& key : keys) {
        INFO(key);
        std::string why;
        const auto seconds = time_kernel(key, cpu_kernels(), *data, l.net.layers[0], quick(), why);
        INFO(why);
        CHECK(seconds);
    }
}

TEST_CASE("calibration times adam's update under its kernel name", "[optimizer][calibrate]") {
    dsl::test::NetworkFromText l(
        "input x [N, 3, 8, 8]\nlabel y [N]\ntrain adam\nf = fc(2)\n"
        "loss = softmax_cross_entropy from f, y\n");
    std::string error;
    auto data = make_data_source(l.net, 0, "", "", error);
    REQUIRE(data);
    TimingRuns runs;
    runs.warmup = 1;
    runs.reps = 3;
    runs.min_seconds = 0.001;
    std::string why;
    const auto key = dsl::scheduler::time_key(dsl::scheduler::adam_kernel, {{"params", {100000}}, {"threads", {1}}});
    const auto seconds = time_kernel(key, cpu_kernels(), *data, l.net.layers[0], runs, why);
    INFO(why);
    REQUIRE(seconds);
    CHECK(*seconds > 0.0);
    CHECK(*seconds < 1.0);
}
