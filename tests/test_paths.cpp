// The trainer's fast paths (scheduler/paths.hpp): each decided from the plan and the run's facts, the same on
// every process, with the reason where one is off; what `dsl run` says of them at its start and `dsl explain`
// shows.
#include "run_dsl.hpp"
#include "support.hpp"
#include "train_runs.hpp"

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/kinds.hpp>
#include <dsl/frontend/parse.hpp>
#include <dsl/scheduler/paths.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

using namespace dsl;
using scheduler::PathKind;

namespace {

// A network of the source tree under a schedule (text), its plan of process `rank`.
struct Planned {
    test::NetworkFromFile loaded;
    scheduler::Schedule schedule;
    Planned(const std::string& net, const std::string& sched) : loaded(net) {
        auto tree = frontend::parse_sched(*loaded.sources.add("t.sched", sched), loaded.diags);
        REQUIRE(tree);
        auto s = scheduler::apply_schedule(loaded.net, *tree, loaded.diags);
        INFO(loaded.diags.text());
        REQUIRE(s);
        REQUIRE(s->complete());
        schedule = *s;
    }
    const frontend::Network& net() const { return loaded.net; }
    std::vector<scheduler::LayerPaths> paths(const scheduler::RunFacts& facts, int rank = 0) const {
        const int procs = static_cast<int>(*schedule.procs);
        const scheduler::Plan plan = scheduler::make_plan(net(), schedule, schedule.batch.value_or(procs), rank, procs);
        return scheduler::kernel_paths(net(), plan, backend::kind_costs(), facts);
    }
    std::size_t index(const std::string& name) const {
        for (std::size_t i = 0; i < net().layers.size(); ++i)
            if (net().layers[i].name == name) return i;
        FAIL("no layer " << name);
        return 0;
    }
};

// A CPU training run's facts, its processes on one node.
scheduler::RunFacts cpu() {
    scheduler::RunFacts f;
    f.blocked_kernels = true;
    f.node_memory = true;
    return f;
}

const scheduler::Path* path(const std::vector<scheduler::LayerPaths>& paths, std::size_t layer, PathKind kind) {
    return paths[layer].find(kind);
}

// Layer `layer`'s path `kind` is there, off, for `why`.
void check_off(const std::vector<scheduler::LayerPaths>& paths, std::size_t layer, PathKind kind,
               const std::string& why) {
    const scheduler::Path* p = path(paths, layer, kind);
    REQUIRE(p);
    CHECK_FALSE(p->on);
    CHECK(p->why == why);
}

}  // namespace

TEST_CASE("paths: blocked tiles and fused ReLUs where the kernels and the tiles allow, and why not elsewhere",
          "[paths]") {
    Planned p("samples/mesh_tiny.net", "procs = 1\nbatch = 4\ndefault N=1\n");
    const auto paths = p.paths(cpu());
    // 16, 32 and 64 channels: every conv-batchnorm-ReLU tile blocked, every ReLU written in the batch norm's pass.
    for (const char* name : {"block1.0.conv", "block1.0.bn", "block1.0.relu", "block3.1.relu"}) {
        INFO(name);
        REQUIRE(path(paths, p.index(name), PathKind::blocked));
        CHECK(path(paths, p.index(name), PathKind::blocked)->on);
    }
    CHECK(paths[p.index("block2.1.bn")].on(PathKind::relu_fused));
    // The prediction's 2 channels are not a block of 16.
    check_off(paths, p.index("pred"), PathKind::blocked, "its 2 channels are not whole blocks of 16");
    // One process: nothing is shared, nor summed.
    CHECK_FALSE(path(paths, p.index("block1.0.conv"), PathKind::shared_weights));

    scheduler::RunFacts evaluation = cpu();
    evaluation.training = false;
    scheduler::RunFacts reference = cpu();
    reference.blocked_kernels = false;
    for (const auto& [facts, why] : {std::pair{evaluation, "evaluation and prediction keep planar tiles"},
                                     std::pair{reference, "the kernels take planar tiles"}}) {
        const auto planar = p.paths(facts);
        check_off(planar, p.index("block1.0.conv"), PathKind::blocked, why);
    }
}

TEST_CASE("paths: a 16-bit layer's tile is blocked, and its ReLU runs apart", "[paths]") {
    Planned p("samples/mesh_tiny.net", "procs = 1\nbatch = 4\ndefault N=1\nlayer block2.0.bn precision=bfloat16\n");
    const auto paths = p.paths(cpu());
    // Kept in 16 bits between forward and backward, in blocks of 16 channels as float32 tiles are.
    for (const char* layer : {"block2.0.conv", "block2.0.bn", "block2.0.relu"})
        CHECK(paths[p.index(layer)].on(PathKind::blocked));
    check_off(paths, p.index("block2.0.bn"), PathKind::relu_fused,
              "it is kept in 16 bits, and the ReLU is not, or in another type, or leaky");
}

TEST_CASE("paths: a ReLU kept in 16 bits as the layer it reads is, runs in that layer's forward", "[paths]") {
    // Rounding commutes with a plain ReLU, so the two fused give the values of the two apart.
    Planned p("samples/mesh_tiny.net", "procs = 1\nbatch = 4\ndefault N=1 precision=bfloat16\n");
    const auto paths = p.paths(cpu());
    CHECK(paths[p.index("block2.0.bn")].on(PathKind::relu_fused));
    // Not with the ReLU in another type, nor a leaky one, whose slope multiplies the values unrounded.
    Planned other("samples/mesh_tiny.net",
                  "procs = 1\nbatch = 4\ndefault N=1 precision=bfloat16\nlayer block2.0.relu precision=float16\n");
    CHECK_FALSE(other.paths(cpu())[other.index("block2.0.bn")].on(PathKind::relu_fused));
    Planned leaky("samples/cosmoflow_tiny.net", "procs = 1\nbatch = 2\ndefault N=1\n");
    CHECK(leaky.paths(cpu())[leaky.index("c2.conv")].on(PathKind::relu_fused));
    Planned leaky16("samples/cosmoflow_tiny.net", "procs = 1\nbatch = 2\ndefault N=1 precision=bfloat16\n");
    CHECK_FALSE(leaky16.paths(cpu())[leaky16.index("c2.conv")].on(PathKind::relu_fused));
    Planned recomputed("samples/mesh_tiny.net", "procs = 1\nbatch = 4\ndefault N=1 recompute=on\n");
    const auto recomputed_paths = recomputed.paths(cpu());
    check_off(recomputed_paths, recomputed.index("block2.0.bn"), PathKind::relu_fused, "it or the ReLU is recomputed");
}

TEST_CASE("paths: a convolution that multiplies in 16 bits reads and writes blocked tiles", "[paths]") {
    Planned p("samples/mesh_tiny.net", "procs = 1\nbatch = 4\ndefault N=1 precision=bfloat16\n");
    scheduler::RunFacts facts = cpu();
    facts.bfloat16_products = true;
    const auto paths = p.paths(facts);
    CHECK(paths[p.index("block2.0.conv")].on(PathKind::products16));
    CHECK(paths[p.index("block2.0.conv")].on(PathKind::blocked));
    CHECK(paths[p.index("block2.0.bn")].on(PathKind::blocked));
}

TEST_CASE("paths: filter-block weight gradients where the processes share the weights, and why not elsewhere",
          "[paths]") {
    Planned p("tests/dist/filters.net", "procs = 2\nbatch = 2\ndefault H=2 overlap=on\n");
    const auto on = p.paths(cpu());
    for (const char* name : {"a", "b", "c", "d"}) {
        INFO(name);
        CHECK(on[p.index(name)].on(PathKind::filter_blocks));
        CHECK(on[p.index(name)].on(PathKind::shared_weights));
        CHECK(on[p.index(name)].on(PathKind::node_sums));
    }
    scheduler::RunFacts scaled = cpu();
    scaled.loss_scaling = true;
    scheduler::RunFacts apart = cpu();
    apart.node_memory = false;
    for (const auto& [facts, why] :
         {std::pair{scaled, "loss scaling reads every process's whole gradient"},
          std::pair{apart, "its weights are not shared on the node"}}) {
        const auto paths = p.paths(facts);
        check_off(paths, p.index("b"), PathKind::filter_blocks, why);
    }
    // Samples split: the processes hold different samples.
    Planned samples("tests/dist/filters.net", "procs = 2\nbatch = 2\ndefault N=2\n");
    const auto split_samples = samples.paths(cpu());
    check_off(split_samples, samples.index("b"), PathKind::filter_blocks,
              "the processes split more than each sample's space");
}

TEST_CASE("paths: every process decides alike", "[paths]") {
    const auto [net_file, sched_file] =
        GENERATE(table<std::string, std::string>({{"samples/mesh_tiny.net", "samples/mesh_tiny_hybrid_4.sched"},
                                                  {"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_4.sched"},
                                                  {"samples/resnet_tiny.net", "samples/resnet_tiny_hybrid_4.sched"},
                                                  {"tests/dist/odd.net", "tests/dist/odd_h3.sched"},
                                                  {"tests/dist/unet.net", "tests/dist/unet_mixed_4.sched"},
                                                  {"tests/dist/filters.net", "tests/dist/filters_hw4.sched"},
                                                  {"samples/volume_tiny.net", "samples/volume_tiny_dhw_8.sched"}}));
    INFO(sched_file);
    test::NetworkFromFile loaded(net_file);
    SourceManager sources;
    Diagnostics diags;
    auto tree = frontend::parse_sched(*sources.load(std::string(DSL_SOURCE_DIR) + "/" + sched_file), diags);
    REQUIRE(tree);
    auto s = scheduler::apply_schedule(loaded.net, *tree, diags);
    REQUIRE(s);
    const int procs = static_cast<int>(*s->procs);
    const auto text = [&](int rank) {
        const scheduler::Plan plan = scheduler::make_plan(loaded.net, *s, s->batch.value_or(procs), rank, procs);
        const auto paths = scheduler::kernel_paths(loaded.net, plan, backend::kind_costs(), cpu());
        std::string out;
        for (const auto& l : paths) out += scheduler::paths_text(l) + "\n";
        return out;
    };
    const std::string first = text(0);
    CHECK(first.find("blocked") != std::string::npos);
    for (int r = 1; r < procs; ++r) CHECK(text(r) == first);
}

TEST_CASE("dsl run says at its start which fast paths are off and why, as dsl explain shows them", "[paths]") {
    // mesh_tiny's 2-channel prediction cannot be blocked; on a CPU without AVX-512 no layer is.
    const backend::Kernels cpu_kernels = backend::cpu_kernels();
    const std::string pred_why = cpu_kernels.blocked ? "its 2 channels are not whole blocks of 16" : cpu_kernels.planar_why;
    const std::string sched = schedule_with("", "batch = 4\ndefault N=1");
    const Result run = run_dsl("run samples/mesh_tiny.net " + sched + " --steps 1");
    INFO(run.out << run.err);
    REQUIRE(run.exit_code == 0);
    CHECK(run.err.find("note: fast paths off") != std::string::npos);
    CHECK(run.err.find(cpu_kernels.blocked ? "blocked off for pred (1 layer): " + pred_why
                                           : "blocked off for block1.0.conv, ") != std::string::npos);
    CHECK(run.err.find(pred_why) != std::string::npos);
    const Result explain = run_dsl("explain samples/mesh_tiny.net " + sched + " --json");
    REQUIRE(explain.exit_code == 0);
    const auto j = nlohmann::json::parse(explain.out);
    bool seen = false;
    for (const auto& l : j["layers"]) {
        if (l["name"] != "pred") continue;
        seen = true;
        CHECK(l["path"].dump().find("off: blocked: " + pred_why) != std::string::npos);
    }
    CHECK(seen);
    for (const auto& l : j["layers"])
        if (l["name"] == "block1.0.conv") CHECK((l["path"][0] == "blocked") == cpu_kernels.blocked);
}
