// The execution plan: for sample schedules, what every process plans agrees with what every other plans
// (each piece sent is a piece received), pieces lie where their tiles are, and one process moves nothing;
// `dsl check --dump-after plan` and `schedule`.
#include "run_dsl.hpp"

#include <dsl/base/error.hpp>
#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/recompute.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using namespace dsl;

namespace {

struct Loaded {
    SourceManager sources;
    Diagnostics diags;
    std::optional<frontend::LoadedNetwork> net;
    std::optional<scheduler::Schedule> schedule;
};

std::unique_ptr<Loaded> load(const std::string& net, const std::string& sched) {
    auto l = std::make_unique<Loaded>();
    l->net = frontend::load_network(source_dir() + "/" + net, l->sources, l->diags);
    INFO(l->diags.text());
    REQUIRE(l->net);
    auto tree = frontend::parse_sched(*l->sources.load(source_dir() + "/" + sched), l->diags);
    REQUIRE(tree);
    l->schedule = scheduler::apply_schedule(l->net->net, *tree, l->diags);
    REQUIRE(l->schedule);
    REQUIRE(l->schedule->complete());
    return l;
}

// A piece as both ends see it: (layer, tile id, from, to, box: the bounds of its samples, channels and each
// spatial dimension).
using Key = std::tuple<int, int, int, int, std::vector<std::int64_t>>;
Key key(int layer, int id, int from, int to, const scheduler::Box& b) {
    std::vector<std::int64_t> bounds{b.n.lo, b.n.hi, b.c.lo, b.c.hi};
    for (const scheduler::Range& r : b.space) bounds.insert(bounds.end(), {r.lo, r.hi});
    return {layer, id, from, to, bounds};
}

}  // namespace

TEST_CASE("every process's plan sends what its peers' plans receive", "[plan]") {
    const auto [net_file, sched_file] =
        GENERATE(table<std::string, std::string>({{"samples/mesh_tiny.net", "samples/mesh_tiny_hybrid_4.sched"},
                                                  {"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_4.sched"},
                                                  {"samples/mesh_tiny.net", "samples/mesh_tiny_spatial_hw_4.sched"},
                                                  {"samples/resnet_tiny.net", "samples/resnet_tiny_hybrid_4.sched"},
                                                  {"tests/dist/odd.net", "tests/dist/odd_h3.sched"},
                                                  {"tests/dist/heads.net", "tests/dist/heads_hybrid_4.sched"},
                                                  {"tests/dist/upsample.net", "tests/dist/upsample_mixed_4.sched"},
                                                  {"tests/dist/deconv.net", "tests/dist/deconv_hw4.sched"}}));
    INFO(sched_file);
    auto l = load(net_file, sched_file);
    const auto& net = l->net->net;
    const int procs = static_cast<int>(*l->schedule->procs);
    const std::int64_t batch = l->schedule->batch.value_or(procs);
    std::vector<scheduler::Plan> plans;
    for (int r = 0; r < procs; ++r) plans.push_back(scheduler::make_plan(net, *l->schedule, batch, r, procs));

    std::multiset<Key> sent[2], received[2];
    std::size_t pieces = 0;
    for (int r = 0; r < procs; ++r) {
        const scheduler::Plan& p = plans[static_cast<std::size_t>(r)];
        REQUIRE(p.layers.size() == net.layers.size());
        for (std::size_t i = 0; i < p.layers.size(); ++i) {
            const scheduler::LayerPlan& lp = p.layers[i];
            const scheduler::Box extent = scheduler::whole_box(lp.whole);
            for (std::size_t t = 0; t < lp.tiles.size(); ++t) {
                const scheduler::TilePlan& tile = lp.tiles[t];
                // Every process places the same tiles in the same order: message tags derive from the ids.
                CHECK(tile.id == plans[0].layers[i].tiles[t].id);
                CHECK(tile.copy == (t > 0));
                const scheduler::Box padded = tile.box.grown(tile.need).meet(extent);
                int d = 0;
                for (const scheduler::Exchange* e : {&tile.forward, &tile.backward}) {
                    for (const scheduler::Piece& piece : e->sends) {
                        CHECK(piece.peer != r);
                        sent[d].insert(key(static_cast<int>(i), tile.id, r, piece.peer, piece.box));
                        // What goes back in backward is the gradient of part of this tile's padded box.
                        if (d == 1) CHECK(piece.box.meet(padded) == piece.box);
                    }
                    for (const scheduler::Piece& piece : e->receives) {
                        CHECK(piece.peer != r);
                        received[d].insert(key(static_cast<int>(i), tile.id, piece.peer, r, piece.box));
                        // A halo or a copy's piece is part of what this tile holds with its margins.
                        if (d == 0) CHECK(piece.box.meet(padded) == piece.box);
                    }
                    pieces += e->sends.size() + e->receives.size();
                    ++d;
                }
                // A forward piece comes from a process whose own tile holds it.
                for (const scheduler::Piece& piece : tile.forward.receives) {
                    const scheduler::TilePlan& own = plans[static_cast<std::size_t>(piece.peer)].layers[i].tiles[0];
                    CHECK(piece.box.meet(own.box) == piece.box);
                }
                if (tile.grad_buffer >= 0) CHECK(tile.grad_buffer < static_cast<int>(p.buffers.size()));
            }
        }
    }
    CHECK(pieces > 0);
    // Of the processes that hold the same block of a tile (replicas), exactly one speaks for them.
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        for (std::size_t t = 0; t < plans[0].layers[i].tiles.size(); ++t) {
            std::map<Key, int> leaders;
            for (const scheduler::Plan& p : plans) {
                const scheduler::TilePlan& tile = p.layers[i].tiles[t];
                leaders[key(0, 0, 0, 0, tile.box)] += tile.leader ? 1 : 0;
            }
            for (const auto& [box, count] : leaders) CHECK(count == 1);
        }
    CHECK(sent[0] == received[0]);
    CHECK(sent[1] == received[1]);
}

TEST_CASE("upsample and deconv tiles hold exactly the input rows and columns their outputs read", "[plan]") {
    const auto [net_file, sched_file] =
        GENERATE(table<std::string, std::string>({{"tests/dist/upsample.net", "tests/dist/upsample_h2.sched"},
                                                  {"tests/dist/upsample.net", "tests/dist/upsample_hw4.sched"},
                                                  {"tests/dist/upsample.net", "tests/dist/upsample_mixed_4.sched"},
                                                  {"tests/dist/deconv.net", "tests/dist/deconv_h2.sched"},
                                                  {"tests/dist/deconv.net", "tests/dist/deconv_hw4.sched"},
                                                  {"tests/dist/deconv.net", "tests/dist/deconv_mixed_4.sched"}}));
    INFO(sched_file);
    auto l = load(net_file, sched_file);
    const auto& net = l->net->net;
    const int procs = static_cast<int>(*l->schedule->procs);
    // The input indices that outputs [a, b) read along dimension d, from the definitions (not window.hpp):
    // upsample's output o reads floor(src) and the next (clamped), nearest o / scale; deconv's input i adds
    // into i * stride - pad + k.
    auto reads = [&](const frontend::Layer& layer, int d, std::int64_t a, std::int64_t b, std::int64_t in) {
        std::int64_t lo = in, hi = -1;
        for (std::int64_t i = 0; i < in; ++i) {
            bool read = false;
            if (layer.op == frontend::OpKind::upsample) {
                for (std::int64_t o = a; o < b && !read; ++o) {
                    if (layer.mode == 0) {
                        read = o / layer.scale == i;
                    } else {
                        // In float, as PyTorch's CPU kernel computes it: src = (1 / scale) * (o + 0.5) - 0.5.
                        const auto ratio = static_cast<float>(1.0 / static_cast<double>(layer.scale));
                        const float src = std::max(0.0f, ratio * (static_cast<float>(o) + 0.5f) - 0.5f);
                        const auto i0 = static_cast<std::int64_t>(std::floor(src));
                        read = i0 == i || std::min(i0 + 1, in - 1) == i;
                    }
                }
            } else {
                for (std::int64_t k = 0; k < layer.kernel[d] && !read; ++k) {
                    const std::int64_t o = i * layer.stride[d] - layer.pad[d] + k;
                    read = o >= a && o < b;
                }
            }
            if (read) lo = std::min(lo, i), hi = std::max(hi, i);
        }
        return std::pair{lo, hi + 1};
    };
    int checked = 0, with_halo = 0;
    for (int r = 0; r < procs; ++r) {
        const scheduler::Plan p = scheduler::make_plan(net, *l->schedule, 4, r, procs);
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            const frontend::Layer& layer = net.layers[i];
            if (layer.op != frontend::OpKind::upsample && layer.op != frontend::OpKind::deconv) continue;
            const scheduler::TilePlan& out = p.layers[i].tiles[0];
            const auto& in_slot = p.layers[static_cast<std::size_t>(layer.inputs[0])];
            const scheduler::TilePlan& in = in_slot.tiles[static_cast<std::size_t>(p.layers[i].operands[0])];
            INFO(layer.name << " on rank " << r);
            REQUIRE(out.box.space.rank() == 2);
            REQUIRE(in.box.space.rank() == 2);
            const scheduler::Box read = scheduler::window_input(layer, out.box, in_slot.whole.c);
            std::int64_t need = 0;
            for (int d = 0; d < 2; ++d) {
                INFO("dimension " << d);
                const auto want = reads(layer, d, out.box.space[d].lo, out.box.space[d].hi, in_slot.whole.space[d]);
                CHECK(read.space[d].lo == want.first);
                CHECK(read.space[d].hi == want.second);
                // The input tile's margins reach at least that far (as far exactly when it is the only reader).
                const scheduler::Range held = in.box.space[d];
                const scheduler::Reach margin = in.need[d];
                CHECK(held.lo - margin.before <= want.first);
                CHECK(held.hi + margin.after >= want.second);
                if (in.windowed_readers.size() == 1) {
                    CHECK(margin.before == std::max<std::int64_t>(0, held.lo - want.first));
                    CHECK(margin.after == std::max<std::int64_t>(0, want.second - held.hi));
                }
                need += margin.before + margin.after;
            }
            ++checked;
            if (need > 0) ++with_halo;
        }
    }
    CHECK(checked > 0);
    CHECK(with_halo > 0);
}

TEST_CASE("gradients and recomputed values that share a buffer are never in memory at one step", "[plan]") {
    // Every layer recomputed, or every one but the ReLUs (whose outputs backward starts from): each process's
    // tiles, their gradients and their recomputed values in forward and again in backward take buffers of
    // one pool, and two tensors in one buffer are never alive at the same step of recompute.hpp's timeline.
    const auto [net_file, sched_file] =
        GENERATE(table<std::string, std::string>({{"samples/mesh_tiny.net", "samples/mesh_tiny_hybrid_4.sched"},
                                                  {"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_4.sched"},
                                                  {"samples/resnet_tiny.net", "samples/resnet_tiny_hybrid_4.sched"},
                                                  {"tests/dist/heads.net", "tests/dist/heads_hybrid_4.sched"},
                                                  {"tests/dist/deconv.net", "tests/dist/deconv_hw4.sched"}}));
    const bool relus_kept = GENERATE(false, true);
    INFO(sched_file << (relus_kept ? ", ReLUs kept" : ""));
    auto l = load(net_file, sched_file);
    const auto& net = l->net->net;
    scheduler::Schedule s = *l->schedule;
    std::vector<bool> asked(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        asked[i] = !(relus_kept && net.layers[i].op == frontend::OpKind::relu);
        s.layers[i].recompute = asked[i];
    }
    const int layers = static_cast<int>(net.layers.size()), procs = static_cast<int>(*s.procs);
    // The layers the plan drops (of those asked, all but the segments' starts), the same on every process.
    std::vector<bool> dropped(net.layers.size());
    const scheduler::Plan first = scheduler::make_plan(net, s, s.batch.value_or(procs), 0, procs);
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        dropped[i] = first.layers[i].recomputed;
        if (asked[i] && scheduler::recomputable(net.layers[i])) CHECK(dropped[i] != first.layers[i].segment_start);
    }
    const scheduler::RecomputeTimeline timeline = scheduler::recompute_timeline(net, dropped);
    for (int r = 0; r < procs; ++r) {
        const scheduler::Plan p = scheduler::make_plan(net, s, s.batch.value_or(procs), r, procs);
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            CHECK(p.layers[i].recomputed == dropped[i]);
            CHECK(p.layers[i].segment_start == first.layers[i].segment_start);
        }
        std::vector<std::vector<scheduler::StepSpan>> spans(p.buffers.size());
        std::vector<int> kinds(p.buffers.size(), 0);  // bits: 1 a gradient, 2 a value
        auto use = [&](int buffer, const scheduler::StepSpan& span, int kind) {
            if (buffer < 0) return;
            REQUIRE(buffer < static_cast<int>(p.buffers.size()));
            for (const scheduler::StepSpan& other : spans[static_cast<std::size_t>(buffer)])
                CHECK_FALSE(other.meets(span));
            spans[static_cast<std::size_t>(buffer)].push_back(span);
            kinds[static_cast<std::size_t>(buffer)] |= kind;
        };
        for (std::size_t i = 0; i < net.layers.size(); ++i)
            for (const scheduler::TilePlan& t : p.layers[i].tiles) {
                use(t.grad_buffer, scheduler::gradient_steps(t.grad_first, t.grad_last, layers), 1);
                use(t.forward_buffer, timeline.forward[i], 2);
                use(t.backward_buffer, timeline.again[i], 2);
            }
        // Some buffer holds a value in forward and a gradient in backward: the pool is shared.
        CHECK(std::count(kinds.begin(), kinds.end(), 3) > 0);
    }
}

TEST_CASE("the one-process plan moves nothing and places one tile per tensor", "[plan]") {
    auto l = load("samples/mesh_tiny.net", "samples/mesh_tiny_serial_1.sched");
    const auto& net = l->net->net;
    for (const scheduler::Schedule& s : {*l->schedule, scheduler::Schedule{}}) {
        const scheduler::Plan p = scheduler::make_plan(net, s, 4, 0, 1);
        for (const scheduler::LayerPlan& lp : p.layers) {
            CHECK(lp.tiles.size() == 1);
            for (const scheduler::TilePlan& t : lp.tiles) {
                CHECK(t.forward.empty());
                CHECK(t.backward.empty());
                CHECK(t.leader);
                CHECK_FALSE(t.replicated);
                CHECK(t.box == scheduler::whole_box(lp.whole));
            }
        }
    }
}

TEST_CASE("a plan refuses a split of the samples that the mini-batch cannot fill", "[plan]") {
    auto l = load("samples/mesh_tiny.net", "samples/mesh_tiny_sample_4.sched");
    CHECK_THROWS_AS(scheduler::make_plan(l->net->net, *l->schedule, 2, 0, 4), UserError);
}

TEST_CASE("check --dump-after plan prints one process's plan", "[cli][plan]") {
    const Result r =
        run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_spatial_hw_4.sched --dump-after plan --rank 1");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("// after plan") != std::string::npos);
    CHECK(r.err.find("plan of rank 1 of 4") != std::string::npos);
    CHECK(r.err.find("to rank 0") != std::string::npos);    // rank 1 sends its neighbour a halo
    CHECK(r.err.find("from rank 3") != std::string::npos);  // and receives one from below
    CHECK(r.err.find("gradient buffers:") != std::string::npos);

    const Result one = run_dsl("check samples/mesh_tiny.net --dump-after plan");
    INFO(one.err);
    CHECK(one.exit_code == 0);
    CHECK(one.err.find("plan of rank 0 of 1") != std::string::npos);
    CHECK(one.err.find(" to rank") == std::string::npos);
    CHECK(one.err.find(" from rank") == std::string::npos);
}

TEST_CASE("check --rank outside the run, or without --dump-after plan, is a usage error", "[cli][plan]") {
    const Result far =
        run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_spatial_hw_4.sched --dump-after plan --rank 4");
    CHECK(far.exit_code == 2);
    CHECK(far.err == "error: --rank 4 is out of range: the run has 4 processes (ranks 0 to 3)\n");
    const Result alone = run_dsl("check samples/mesh_tiny.net --rank 0");
    CHECK(alone.exit_code == 2);
    CHECK(alone.err.find("--dump-after plan") != std::string::npos);
    const Result platform = run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_partial_4.sched --platform lassen");
    CHECK(platform.exit_code == 2);
    CHECK(platform.err.find("--dump-after filled or plan") != std::string::npos);
}

TEST_CASE("check --dump-after filled and plan fill a partial schedule's open fields first", "[cli][plan]") {
    const Result filled =
        run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_partial_4.sched --dump-after filled --json");
    INFO(filled.err);
    REQUIRE(filled.exit_code == 0);
    const std::string header = "// after filled\n";
    REQUIRE(filled.err.rfind(header, 0) == 0);
    // The report is of the schedule as written (block2.0.conv open); the filled text leaves nothing open.
    const auto written = nlohmann::json::parse(filled.out)["layers"];
    const fs::path copy = fs::temp_directory_path() / ("dsl_filled_" + std::to_string(::getpid()) + ".sched");
    std::ofstream(copy) << filled.err.substr(header.size());
    const Result again = run_dsl("check samples/mesh_tiny.net '" + copy.string() + "' --json");
    const Result run = run_dsl("run samples/mesh_tiny.net '" + copy.string() + "' --steps 1");
    fs::remove(copy);
    INFO(again.err);
    REQUIRE(again.exit_code == 0);
    CHECK(nlohmann::json::parse(again.out)["layers"] != written);
    INFO(run.err);
    CHECK(run.exit_code == 0);  // complete: runs without --auto-schedule
    // The fixed fields are kept: block1 stays split 4 ways over rows.
    for (const auto& layer : nlohmann::json::parse(again.out)["layers"])
        if (layer["name"].get<std::string>().rfind("block1.", 0) == 0) {
            INFO(layer["name"]);
            CHECK(layer["distribution"]["split"] == nlohmann::json{{"N", 1}, {"H", 4}, {"W", 1}});
        }

    const Result plan =
        run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_partial_4.sched --dump-after plan --rank 3");
    INFO(plan.err);
    CHECK(plan.exit_code == 0);
    CHECK(plan.err.find("plan of rank 3 of 4") != std::string::npos);
    CHECK(plan.err.find("layer block2.0.conv (conv): split") != std::string::npos);

    const fs::path open = fs::temp_directory_path() / ("dsl_open_" + std::to_string(::getpid()) + ".sched");
    std::ofstream(open) << "default H=?\n";
    const Result no_procs = run_dsl("check samples/mesh_tiny.net '" + open.string() + "' --dump-after filled");
    fs::remove(open);
    CHECK(no_procs.exit_code == 1);
    CHECK(no_procs.err.find("leaves 'procs' open") != std::string::npos);
}

TEST_CASE("check --dump-after schedule prints .sched text that binds the same distributions", "[cli][plan]") {
    for (const std::string sched : {"samples/mesh_tiny_mixed_4.sched", "samples/mesh_tiny_partial_4.sched"}) {
        INFO(sched);
        const Result r = run_dsl("check samples/mesh_tiny.net " + sched + " --dump-after schedule --json");
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        const std::string header = "// after schedule\n";
        REQUIRE(r.err.rfind(header, 0) == 0);
        const fs::path copy = fs::temp_directory_path() / ("dsl_bound_" + std::to_string(::getpid()) + ".sched");
        std::ofstream(copy) << r.err.substr(header.size());
        const Result again = run_dsl("check samples/mesh_tiny.net '" + copy.string() + "' --json");
        fs::remove(copy);
        INFO(again.err);
        REQUIRE(again.exit_code == 0);
        CHECK(nlohmann::json::parse(again.out)["layers"] == nlohmann::json::parse(r.out)["layers"]);
    }
}

TEST_CASE("check --dump-after schedule keeps recompute and precision, and reads back to itself", "[cli][plan]") {
    const fs::path sched = fs::temp_directory_path() / ("dsl_fields_" + std::to_string(::getpid()) + ".sched");
    std::ofstream(sched) << "procs = 1\ndefault N=1 overlap=off recompute=off\nlayer block1.* recompute=on\n"
                            "layer block2.0.conv precision=bfloat16\nlayer block3.0.conv recompute=?\n"
                            "layer block3.1.* N=?\n";
    const auto bound = [](const fs::path& file) {
        const Result r = run_dsl("check samples/mesh_tiny.net '" + file.string() + "' --dump-after schedule");
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        const std::string header = "// after schedule\n";
        REQUIRE(r.err.rfind(header, 0) == 0);
        const std::string text = r.err.substr(header.size());
        return text.substr(text.find('\n') + 1);  // less the comment that names the file
    };
    const std::string once = bound(sched);
    INFO(once);
    CHECK(once.find("layer block1.* recompute=on") != std::string::npos);
    CHECK(once.find("precision=bfloat16") != std::string::npos);
    CHECK(once.find("recompute=?") != std::string::npos);  // open where an enclosing entry would set it
    const fs::path copy = fs::temp_directory_path() / ("dsl_fields_again_" + std::to_string(::getpid()) + ".sched");
    std::ofstream(copy) << once;
    const std::string twice = bound(copy);
    fs::remove(sched);
    fs::remove(copy);
    CHECK(twice == once);
}

TEST_CASE("every verb that reads a network takes --dump-after, and prints each stage once", "[cli][plan]") {
    const std::string net = "samples/mesh_tiny.net", sched = "samples/mesh_tiny_spatial_h_2.sched";
    const auto count = [](const std::string& text, const std::string& what) {
        std::size_t n = 0;
        for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
        return n;
    };
    // A run on two processes that dsl starts: the stages before the plan said by the process started by
    // hand, the first process's plan by that process.
    for (const std::string stage : {"shapes", "schedule", "filled", "plan"}) {
        const Result r = run_dsl("run " + net + " " + sched + " --steps 1 --dump-after " + stage);
        INFO(stage << "\n" << r.err);
        CHECK(r.exit_code == 0);
        CHECK(count(r.err, "// after ") == 1);
        CHECK(count(r.err, "// after " + stage + "\n") == 1);
        if (stage == "plan") CHECK(r.err.find("plan of rank 0 of 2") != std::string::npos);
    }
    const Result explain = run_dsl("explain " + net + " " + sched + " --dump-after plan");
    INFO(explain.err);
    CHECK(explain.exit_code == 0);
    CHECK(count(explain.err, "// after plan\nplan of rank 0 of 2") == 1);
    const Result filled = run_dsl("schedule " + net + " --procs 2 --batch 4 --dump-after filled");
    INFO(filled.err);
    CHECK(filled.exit_code == 0);
    CHECK(count(filled.err, "// after filled\n") == 1);
    const Result compare =
        run_dsl("compare " + net + " " + sched + " samples/mesh_tiny_sample_2.sched --dump-after schedule");
    INFO(compare.err);
    CHECK(compare.exit_code == 0);
    CHECK(count(compare.err, "// after schedule\n") == 2);
    const Result parse = run_dsl("export " + net + " --load none -o none.pt --dump-after parse");
    INFO(parse.err);
    CHECK(count(parse.err, "// after parse\n") == 1);  // before the checkpoint is looked for
    const Result beyond = run_dsl("export " + net + " --load none -o none.pt --dump-after plan");
    CHECK(beyond.exit_code == 2);  // export reads no schedule
    // Calibration prints the network once, before it measures, though its workers read it again; it reads
    // no schedule either.
    const fs::path platform =
        fs::temp_directory_path() / ("dsl_dump_calibrate_" + std::to_string(::getpid()) + ".platform");
    const Result calibrate = run_dsl("calibrate " + net + " --procs 1 --kernels-only --reps 1 --warmup 0 -o '" +
                                     platform.string() + "' --dump-after shapes");
    INFO(calibrate.err);
    CHECK(calibrate.exit_code == 0);
    CHECK(count(calibrate.err, "// after ") == 1);
    CHECK(count(calibrate.err, "// after shapes\n") == 1);
    CHECK(calibrate.err.find("// after shapes\n") < calibrate.err.find("timing "));
    fs::remove(platform);
    CHECK(run_dsl("calibrate " + net + " --procs 1 -o '" + platform.string() + "' --dump-after filled").exit_code ==
          2);
    CHECK(!fs::exists(platform));
}

TEST_CASE("the plan decides which layers send their input gradient's halo back during their weight gradient",
          "[cli][plan]") {
    // The section of `plan_text` for `layer`: from its line to the next layer's.
    const auto section = [](const std::string& plan, const std::string& layer) {
        const std::size_t at = plan.find("layer " + layer + " (");
        REQUIRE(at != std::string::npos);
        return plan.substr(at, plan.find("\nlayer ", at + 1) - at);
    };
    const std::string early = "backward: its input gradient's halo goes back during the weight gradient";
    const Result on = run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_spatial_h_4.sched --dump-after plan");
    INFO(on.err);
    REQUIRE(on.exit_code == 0);
    CHECK(section(on.err, "block1.1.conv").find(early) != std::string::npos);  // overlap=on, its input's one reader
    CHECK(section(on.err, "block1.0.conv").find(early) == std::string::npos);  // it reads the data
    CHECK(section(on.err, "pred").find(early) == std::string::npos);           // a 1x1 convolution: no halo
    const Result off = run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --dump-after plan");
    INFO(off.err);
    REQUIRE(off.exit_code == 0);
    CHECK(off.err.find(early) == std::string::npos);  // overlap=off
}
