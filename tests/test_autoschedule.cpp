// The auto-scheduler against brute force: on small line and branching networks, under cost models with
// random costs and under the real model, the frontier search's choice costs exactly the optimum that
// enumerating every assignment finds; partial schedules keep the user's fields; memory limits hold; the
// written schedule reads back the same.
#include "support.hpp"

#include <dsl/backend/kinds.hpp>
#include <dsl/frontend/parse.hpp>
#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/platform.hpp>
#include <dsl/scheduler/recompute.hpp>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

using namespace dsl;
using namespace dsl::scheduler;
using frontend::OpKind;

namespace {

// A line of six layers, and a branching one: a residual block with a projection shortcut, a concat.
const char* line_net = R"(
input x [N, 4, 16, 16]
label y [N, 4, 4]
c1 = conv(8, kernel = 3, pad = 1)
r1 = relu
c2 = conv(8, kernel = 3, stride = 2, pad = 1)
b2 = batchnorm
c3 = conv(2, kernel = 3, stride = 2, pad = 1)
loss = pixel_cross_entropy from c3, y
)";

const char* branch_net = R"(
input x [N, 4, 16, 16]
label y [N, 8, 8]
c1 = conv(8, kernel = 3, pad = 1)
a = conv(8, kernel = 3, stride = 2, pad = 1)
b = relu from a
s = conv(8, kernel = 1, stride = 2) from c1
sum = add from b, s
cat = concat from sum, s
pred = conv(2, kernel = 1)
loss = pixel_cross_entropy from pred, y
)";

std::uint64_t mix(std::uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}
double unit(std::uint64_t h) { return static_cast<double>(mix(h) >> 11) * 0x1.0p-53; }
// The networks here are images: their splits' D is 1.
std::uint64_t key(const Split& s) { return static_cast<std::uint64_t>(s.n * 10000 + s.space[1] * 100 + s.space[2]); }

// Costs drawn from a hash of their arguments: every layer and shuffle different, nothing structured for a
// heuristic to lean on.
class RandomModel final : public CostModel {
public:
    RandomModel(const frontend::Network& net, std::uint64_t seed) : net_(net), seed_(seed) {}
    LayerCost layer(int index, const Distribution& d) const override {
        LayerCost c;
        const std::uint64_t h = seed_ * 7919 + static_cast<std::uint64_t>(index) * 104729 + key(*d.split) * 31 +
                                (d.overlap.value_or(false) ? 1 : 0);
        c.forward = unit(h);
        c.backward_data = unit(h + 1);
        c.memory = 1000.0 * unit(h + 2);
        return c;
    }
    ShuffleCost shuffle(int reader, int input, const Split& from, const Split& to) const override {
        if (from == to) return {};
        ShuffleCost s;
        const std::uint64_t h =
            seed_ * 15485863 + static_cast<std::uint64_t>(reader * 8 + input) * 6700417 + key(from) * 1299709 + key(to);
        s.seconds = 0.8 * unit(h);
        s.memory = 500.0 * unit(h + 5);
        return s;
    }
    double memory(const Schedule& s) const override {
        double m = 0.0;
        for (std::size_t i = 0; i < net_.layers.size(); ++i) {
            if (net_.layers[i].is_data()) continue;
            m += layer(static_cast<int>(i), s.layers[i]).memory;
            const auto& ins = net_.layers[i].inputs;
            for (std::size_t j = 0; j < ins.size(); ++j) {
                const auto& p = net_.layers[static_cast<std::size_t>(ins[j])];
                if (p.is_data()) continue;
                m += shuffle(static_cast<int>(i), static_cast<int>(j),
                             *s.layers[static_cast<std::size_t>(ins[j])].split, *s.layers[i].split)
                         .memory;
            }
        }
        return m;
    }

private:
    const frontend::Network& net_;
    std::uint64_t seed_;
};

Schedule open_schedule(const frontend::Network& net, std::int64_t procs) {
    Schedule s;
    s.procs = procs;
    s.layers.assign(net.layers.size(), Distribution{std::nullopt, std::nullopt, BatchNormStats::batch, std::nullopt});
    return s;
}

// The least objective over every assignment of candidates to the decided layers (with memory at most
// `memory_limit` when it is set); `least_memory` gets the least memory of any.
double brute_force(const frontend::Network& net, const Schedule& partial, std::int64_t batch, const CostModel& model,
                   double memory_limit = 0.0, double* least_memory = nullptr) {
    const std::int64_t procs = *partial.procs;
    std::vector<int> decided;
    std::vector<std::vector<Distribution>> cands(net.layers.size());
    std::vector<std::vector<double>> layer_cost(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (net.layers[i].is_data()) continue;
        decided.push_back(static_cast<int>(i));
        cands[i] = candidates(net, static_cast<int>(i), partial.layers[i], procs, batch);
        REQUIRE(!cands[i].empty());
        for (const Distribution& d : cands[i]) layer_cost[i].push_back(model.layer(static_cast<int>(i), d).time());
    }
    const bool need_memory = memory_limit > 0 || least_memory;
    Schedule s = partial;
    std::vector<std::size_t> pick(net.layers.size(), 0);
    double best = std::numeric_limits<double>::infinity(), least = best;
    std::function<void(std::size_t)> go = [&](std::size_t k) {
        if (k == decided.size()) {
            double cost = 0.0;
            for (int i : decided) {
                const auto li = static_cast<std::size_t>(i);
                cost += layer_cost[li][pick[li]];
                const auto& ins = net.layers[li].inputs;
                for (std::size_t j = 0; j < ins.size(); ++j) {
                    const auto p = static_cast<std::size_t>(ins[j]);
                    if (net.layers[p].is_data()) continue;
                    cost += model.shuffle(i, static_cast<int>(j), *s.layers[p].split, *s.layers[li].split).seconds;
                }
            }
            if (need_memory) {
                place_data(net, s);
                const double m = model.memory(s);
                least = std::min(least, m);
                if (memory_limit > 0 && m > memory_limit) return;
            }
            best = std::min(best, cost);
            return;
        }
        const auto i = static_cast<std::size_t>(decided[k]);
        for (std::size_t c = 0; c < cands[i].size(); ++c) {
            pick[i] = c;
            s.layers[i] = cands[i][c];
            go(k + 1);
        }
    };
    go(0);
    if (least_memory) *least_memory = least;
    return best;
}

Platform test_platform() {
    Platform p;
    p.procs_per_node = 4;
    p.nodes = 1;
    p.memory = 1e9;
    p.flops = 50e9;
    p.memory_bandwidth = 10e9;
    p.kernel_latency = 5e-6;
    p.node = {2e-6, 5e9};
    p.network = p.node;
    return p;
}

}  // namespace

TEST_CASE("auto-scheduler: the frontier search finds the brute-force optimum", "[autoschedule]") {
    const std::string text = GENERATE(as<std::string>{}, line_net, branch_net);
    test::NetworkFromText l(text);
    const std::int64_t procs = GENERATE(2, 4);
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        CAPTURE(procs, seed);
        RandomModel model(l.net, seed);
        AutoOptions options;
        options.batch = 4;
        std::string why;
        const auto result = autoschedule(l.net, open_schedule(l.net, procs), model, options, why);
        INFO(why);
        REQUIRE(result);
        CHECK(result->optimal());
        CHECK(result->schedule.complete());
        const double optimum = brute_force(l.net, open_schedule(l.net, procs), 4, model);
        CHECK(result->cost == Approx(optimum).epsilon(1e-12));
        CHECK(schedule_cost(l.net, result->schedule, model) == Approx(optimum).epsilon(1e-12));

        // The paper's heuristic gives a complete schedule, never better than the optimum.
        options.method = SearchMethod::paper;
        const auto paper = autoschedule(l.net, open_schedule(l.net, procs), model, options, why);
        REQUIRE(paper);
        CHECK(!paper->optimal());
        CHECK(paper->schedule.complete());
        CHECK(paper->cost >= optimum * (1 - 1e-12));
    }
}

TEST_CASE("auto-scheduler: under the performance model too", "[autoschedule]") {
    const std::string text = GENERATE(as<std::string>{}, line_net, branch_net);
    test::NetworkFromText l(text);
    const Platform platform = test_platform();
    Model model(l.net, platform, 4, 4, backend::kind_costs());
    AutoOptions options;
    options.batch = 4;
    std::string why;
    const auto result = autoschedule(l.net, open_schedule(l.net, 4), model, options, why);
    REQUIRE(result);
    CHECK(result->cost == Approx(brute_force(l.net, open_schedule(l.net, 4), 4, model)).epsilon(1e-12));
    // The step it predicts is a real number of the same order.
    const Prediction p = model.predict(result->schedule);
    CHECK(p.step > result->cost * 0.5);
    CHECK(p.memory <= model.memory_limit());
}

TEST_CASE("auto-scheduler: fields the schedule fixes are kept, the rest filled", "[autoschedule]") {
    test::NetworkFromText l(branch_net);
    RandomModel model(l.net, 3);
    Schedule partial = open_schedule(l.net, 4);
    const int a = l.net.find("a"), s = l.net.find("s"), c1 = l.net.find("c1");
    partial.layers[static_cast<std::size_t>(a)].split = Split{1, 1, 1, {1, 2, 2}};
    partial.layers[static_cast<std::size_t>(s)].overlap = false;
    partial.layers[static_cast<std::size_t>(c1)].overlap = true;
    AutoOptions options;
    options.batch = 4;
    std::string why;
    const auto result = autoschedule(l.net, partial, model, options, why);
    REQUIRE(result);
    CHECK(*result->schedule.layers[static_cast<std::size_t>(a)].split == (Split{1, 1, 1, {1, 2, 2}}));
    CHECK(result->schedule.layers[static_cast<std::size_t>(s)].overlap == false);
    CHECK(result->schedule.layers[static_cast<std::size_t>(c1)].overlap == true);
    CHECK(result->cost == Approx(brute_force(l.net, partial, 4, model)).epsilon(1e-12));

    // A fixed split that cannot run the layer: an error naming it.
    partial.layers[static_cast<std::size_t>(a)].split = Split{4, 1, 1, {1, 1, 1}};
    options.batch = 2;
    CHECK(!autoschedule(l.net, partial, model, options, why));
    CHECK(why.find("layer 'a'") != std::string::npos);
}

TEST_CASE("auto-scheduler: memory limits are respected, and an impossible one is explained", "[autoschedule]") {
    test::NetworkFromText l(line_net);
    const Schedule partial = open_schedule(l.net, 4);
    AutoOptions options;
    options.batch = 4;
    std::string why;
    // A model whose fastest schedule is not its smallest.
    std::uint64_t seed = 1;
    double least = 0.0, free_optimum = 0.0;
    std::optional<AutoResult> unlimited;
    for (;; ++seed) {
        REQUIRE(seed < 50);
        free_optimum = brute_force(l.net, partial, 4, RandomModel(l.net, seed), 0.0, &least);
        unlimited = autoschedule(l.net, partial, RandomModel(l.net, seed), options, why);
        REQUIRE(unlimited);
        if (unlimited->memory > least * 1.05) break;
    }
    RandomModel model(l.net, seed);

    // Between the smallest and the fastest: what comes back fits, and costs no less than the best that fits.
    options.memory_limit = (least + unlimited->memory) / 2;
    const auto limited = autoschedule(l.net, partial, model, options, why);
    INFO(why);
    REQUIRE(limited);
    CHECK(limited->memory <= options.memory_limit);
    CHECK(model.memory(limited->schedule) == Approx(limited->memory));
    const double fitting_optimum = brute_force(l.net, partial, 4, model, options.memory_limit);
    CHECK(limited->cost >= fitting_optimum * (1 - 1e-12));
    CHECK(limited->cost >= free_optimum);

    // Below the smallest: no schedule, and the message says how much the smallest needs.
    options.memory_limit = least * 0.9;
    CHECK(!autoschedule(l.net, partial, model, options, why));
    CHECK(why.find("smallest needs") != std::string::npos);
    CHECK(why.find(fmt::format("{:.1f} MiB", least / (1 << 20))) != std::string::npos);
}

TEST_CASE("auto-scheduler: the written schedule applies back to the same distributions", "[autoschedule]") {
    test::NetworkFromFile loaded("samples/resnet_tiny.net");
    SourceManager& sources = loaded.sources;
    const auto& net = loaded.net;
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
        RandomModel model(net, seed);
        AutoOptions options;
        options.batch = 8;
        options.channel_parts = seed % 2 ? 4 : 1;  // and with channel and filter splits
        std::string why;
        const auto result = autoschedule(net, open_schedule(net, 4), model, options, why);
        REQUIRE(result);
        const std::string text = schedule_text(net, result->schedule, "a test\nof two lines", "local");
        INFO(text);
        CHECK(text.rfind("# a test\n# of two lines\n", 0) == 0);
        CHECK(text.find("\ndefault ") != std::string::npos);  // the short form, not every layer by name
        Diagnostics d;
        auto file = frontend::parse_sched(*sources.add("out.sched", text), d);
        REQUIRE(file);
        auto applied = apply_schedule(net, *file, d);
        INFO(d.text());
        REQUIRE(applied);
        CHECK(applied->procs == 4);
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            const frontend::Layer& layer = net.layers[i];
            INFO(layer.name);
            CHECK(*applied->layers[i].split == *result->schedule.layers[i].split);
            // Overlap is written where it means something: a halo to exchange.
            if (overlap_matters(net, layer, *result->schedule.layers[i].split))
                CHECK(applied->layers[i].overlap == result->schedule.layers[i].overlap);
        }
    }
}

TEST_CASE("the written schedule keeps every field, and of a partial one what is open", "[autoschedule]") {
    // Schedules drawn at random over resnet_tiny: each field of each layer set to one of its values or, in the
    // partial ones, left open. Written and read back, every layer has the same fields: recompute and precision
    // too, and open where they were open.
    test::NetworkFromFile loaded("samples/resnet_tiny.net");
    const auto& net = loaded.net;
    std::mt19937 random(7);
    const auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(random); };
    for (int round = 0; round < 40; ++round) {
        const bool partial = round % 2 == 1;
        Schedule s = open_schedule(net, 4);
        s.batch = 8;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            const frontend::Layer& layer = net.layers[i];
            if (layer.is_data()) continue;
            Distribution& d = s.layers[i];
            const auto splits = candidates(net, static_cast<int>(i), Distribution{}, 4, 8);
            REQUIRE(!splits.empty());
            const auto open = [&] { return partial && pick(3) == 0; };
            if (!open()) d.split = splits[pick(splits.size())].split;
            d.overlap = open() ? std::nullopt : std::optional<bool>(pick(2) == 1);
            if (d.split && !overlap_matters(net, layer, *d.split)) d.overlap = false;  // as apply_schedule binds it
            d.bn = open() ? std::nullopt
                          : std::optional<BatchNormStats>(pick(2) ? BatchNormStats::batch : BatchNormStats::local);
            if (layer.op != OpKind::batchnorm) d.bn = BatchNormStats::batch;
            d.recompute = open() ? std::nullopt : std::optional<bool>(pick(2) == 1);
            d.precision =
                open() ? std::nullopt : std::optional<Precision>(pick(2) ? Precision::float32 : Precision::bfloat16);
            if (!recomputable(layer)) {
                d.recompute = false;
                d.precision = Precision::float32;
            }
        }
        place_data(net, s);
        if (!partial) REQUIRE(s.complete());
        const std::string text = schedule_text(net, s, "drawn at random");
        INFO(text);
        Diagnostics d;
        auto file = frontend::parse_sched(*loaded.sources.add("drawn.sched", text), d);
        REQUIRE(file);
        auto applied = apply_schedule(net, *file, d);
        INFO(d.text());
        REQUIRE(applied);
        CHECK(applied->procs == s.procs);
        CHECK(applied->batch == s.batch);
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            const frontend::Layer& layer = net.layers[i];
            if (layer.is_data()) continue;
            INFO(layer.name);
            const Distribution &want = s.layers[i], &got = applied->layers[i];
            CHECK(got.split == want.split);
            CHECK(got.overlap == want.overlap);
            if (layer.op == OpKind::batchnorm) CHECK(got.bn == want.bn);
            if (recomputable(layer)) {
                // A complete schedule's recompute=off is what leaving it out says; a partial one's open is `?`.
                if (partial)
                    CHECK(got.recompute == want.recompute);
                else
                    CHECK(got.recompute.value_or(false) == want.recompute.value_or(false));
                CHECK(got.precision == want.precision);
            }
        }
    }
}

TEST_CASE("auto-scheduler: channel and filter splits where samples and planes run out", "[autoschedule]") {
    // ResNet-50 on 128 of Lassen's GPUs, 32 samples (the paper's 4 GPUs per group of 32): the deep layers'
    // 7x7 and 14x14 planes leave little to split spatially. With F and C parts up to a node's 4 GPUs, the
    // search finds a faster schedule under the model, and it uses them; without, none.
    test::NetworkFromFile loaded("stdlib/resnet50.net");
    const auto& net = loaded.net;
    const auto platform = load_platform(platform_path("lassen"), loaded.sources, loaded.diags);
    REQUIRE(platform);
    const Model model(net, *platform, 128, 32, backend::kind_costs());
    auto search = [&](std::int64_t channel_parts) {
        AutoOptions options;
        options.batch = 32;
        options.channel_parts = channel_parts;
        std::string why;
        auto result = autoschedule(net, open_schedule(net, 128), model, options, why);
        INFO(why);
        REQUIRE(result);
        return *result;
    };
    auto channel_layers = [&](const AutoResult& r) {
        int count = 0;
        for (std::size_t i = 0; i < net.layers.size(); ++i)
            if (splits_channels(net.layers[i], *r.schedule.layers[i].split)) ++count;
        return count;
    };
    const AutoResult without = search(1), with = search(4);
    CHECK(channel_layers(without) == 0);
    CHECK(channel_layers(with) > 0);
    CHECK(with.cost < without.cost);
    CHECK(model.predict(with.schedule).step < model.predict(without.schedule).step);
}

TEST_CASE("auto-scheduler: channel and filter parts combine with each other and with the other splits",
          "[autoschedule]") {
    // The refinements of a split: a factor of its samples' parts or of one spatial axis's moved into C and F
    // parts, each way of factoring them, C times F at most `channel_parts`.
    const std::vector<Split> r = channel_refinements(Split{4, 1, 1, {1, 2, 1}}, 4);
    auto has = [&](const Split& s) { return std::find(r.begin(), r.end(), s) != r.end(); };
    CHECK(r.size() == 2 + 3 + 2);  // N/2 (C or F), N/4 (C=1 F=4, C=2 F=2, C=4 F=1), H/2 (C or F)
    CHECK(has(Split{2, 2, 1, {1, 2, 1}}));
    CHECK(has(Split{1, 2, 2, {1, 2, 1}}));
    CHECK(has(Split{4, 1, 2, {1, 1, 1}}));
    CHECK_FALSE(has(Split{2, 2, 2, {1, 1, 1}}));  // from two of them at once
    CHECK(channel_refinements(Split{2, 2, 1, {1, 1, 1}}, 4) ==
          std::vector<Split>{Split{1, 1, 4, {1, 1, 1}}, Split{1, 2, 2, {1, 1, 1}}, Split{1, 4, 1, {1, 1, 1}}});
    CHECK(channel_refinements(Split{8, 1, 1, {1, 1, 1}}, 1).empty());

    // The search around the first one's choice finds C and F together for ResNet-50 on 8 of Lassen's GPUs
    // at 32 samples, and channel parts beside spatial ones for the 1k mesh network on 16 at 2 samples; each
    // faster under the model than the search without channel parts.
    auto search = [](const char* path, std::int64_t procs, std::int64_t batch, std::int64_t channel_parts) {
        test::NetworkFromFile loaded(path);
        const auto platform = load_platform(platform_path("lassen"), loaded.sources, loaded.diags);
        REQUIRE(platform);
        const Model model(loaded.net, *platform, procs, batch, backend::kind_costs());
        AutoOptions options;
        options.batch = batch;
        options.channel_parts = channel_parts;
        std::string why;
        const auto result = autoschedule(loaded.net, open_schedule(loaded.net, procs), model, options, why);
        INFO(why);
        REQUIRE(result);
        int both = 0, beside = 0;
        for (const Distribution& d : result->schedule.layers) {
            if (d.split->c > 1 && d.split->f > 1) ++both;
            if (d.split->c * d.split->f > 1 && d.split->spatial()) ++beside;
        }
        return std::tuple{result->cost, both, beside};
    };
    const auto [resnet, resnet_both, resnet_beside] = search("stdlib/resnet50.net", 8, 32, 4);
    CHECK(resnet_both > 0);
    CHECK(resnet < std::get<0>(search("stdlib/resnet50.net", 8, 32, 1)));
    const auto [mesh, mesh_both, mesh_beside] = search("stdlib/mesh1k.net", 16, 2, 4);
    CHECK(mesh_beside > 0);
    CHECK(mesh < std::get<0>(search("stdlib/mesh1k.net", 16, 2, 1)));
}
