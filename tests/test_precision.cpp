// 16-bit storage (precision=bfloat16 or float16 in a schedule): a layer's output rounded after forward and
// kept in 16 bits until backward widens it. The rounding against IEEE 754's definition (nearest, ties to
// even), checked on every 16-bit value and on floats around each boundary; real runs of `dsl run`: on
// several processes as on one (within 16-bit rounding's reach), bitwise with recomputation, bfloat16 and
// float16 following float32's loss curve over 200 steps, and the model's memory against the measured peak.
#include "../backend/src/tensors/narrow.hpp"
#include "temp_files.hpp"
#include "train_runs.hpp"

#include <dsl/backend/memory.hpp>
#include <dsl/backend/tensor.hpp>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

using dsl::backend::from_16;
using dsl::backend::to_16;
using dsl::scheduler::Precision;

namespace {

// The 16-bit neighbours of a finite float's rounding: the value itself must be nearer to `f` than the codes
// on either side, and at a tie the even one.
void check_nearest(float f, bool bfloat) {
    const std::uint16_t h = to_16(f, bfloat);
    const double v = from_16(h, bfloat), x = f;
    CAPTURE(f, bfloat, h, v);
    const std::uint16_t magnitude = h & 0x7fffu, sign = h & 0x8000u;
    const std::uint16_t inf = bfloat ? 0x7f80u : 0x7c00u;
    if (magnitude == inf) {  // beyond the largest finite value, by at least half its step
        const double largest = from_16(static_cast<std::uint16_t>(inf - 1u), bfloat);
        const double step = largest - from_16(static_cast<std::uint16_t>(inf - 2u), bfloat);
        CHECK(std::fabs(x) >= largest + step / 2);
        return;
    }
    for (int side : {-1, 1}) {
        // Toward zero from +0 is -0's code: the neighbour below zero is the smallest negative one.
        std::uint16_t n;
        if (magnitude == 0 && side < 0)
            n = static_cast<std::uint16_t>((sign ^ 0x8000u) | 1u);
        else
            n = static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(magnitude + side));
        if ((n & 0x7fffu) >= inf) continue;
        const double w = from_16(n, bfloat);
        const double here = std::fabs(x - v), there = std::fabs(x - w);
        CHECK(here <= there);
        if (here == there) CHECK((h & 1u) == 0u);
    }
}

}  // namespace

TEST_CASE("16-bit rounding: every code comes back as itself, and floats go to the nearest, ties to even",
          "[precision]") {
    for (const bool bfloat : {true, false}) {
        CAPTURE(bfloat);
        const std::uint32_t exponent = bfloat ? 0x7f80u : 0x7c00u;
        for (std::uint32_t code = 0; code <= 0xffffu; ++code) {
            const auto h = static_cast<std::uint16_t>(code);
            const float f = from_16(h, bfloat);
            if ((code & exponent) == exponent && (code & (bfloat ? 0x7fu : 0x3ffu)) != 0) {
                CHECK(std::isnan(f));
                CHECK(std::isnan(from_16(to_16(f, bfloat), bfloat)));
                continue;
            }
            if (to_16(f, bfloat) != h) FAIL_CHECK("code " << code << " widened to " << f << " narrows elsewhere");
        }
        // Floats between codes, at the midpoints and one float either side of them, and random ones of every
        // magnitude (subnormal float16s, float16's overflow at 65520, bfloat16's near float32's largest).
        std::mt19937 rng(11);
        std::uniform_int_distribution<std::uint32_t> bits(0, 0xffffffffu);
        std::vector<float> floats;
        for (std::uint32_t code = 1; code < exponent; code += bfloat ? 37u : 7u) {
            const double a = from_16(static_cast<std::uint16_t>(code - 1), bfloat);
            const double b = from_16(static_cast<std::uint16_t>(code), bfloat);
            const auto mid = static_cast<float>((a + b) / 2);
            floats.insert(floats.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), -mid});
        }
        for (int i = 0; i < 200000; ++i) {
            const float f = dsl::backend::bits_float(bits(rng));
            if (std::isfinite(f)) floats.push_back(f);
        }
        floats.insert(floats.end(), {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.9802322e-8f, 1e38f,
                                     std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()});
        for (float f : floats) check_nearest(f, bfloat);
    }
    // Known values: ties to even, overflow, the smallest float16, NaN and infinity.
    CHECK(to_16(1.0f + 0x1.0p-8f, true) == 0x3f80u);      // tie: 1.0, the even one
    CHECK(to_16(1.0f + 3 * 0x1.0p-8f, true) == 0x3f82u);  // tie: up to the even one
    CHECK(to_16(65504.0f, false) == 0x7bffu);             // float16's largest
    CHECK(to_16(65520.0f, false) == 0x7c00u);             // infinity
    CHECK(to_16(0x1.0p-24f, false) == 0x0001u);           // the smallest subnormal
    CHECK(to_16(0x1.0p-25f, false) == 0x0000u);           // its half: tie to zero
    CHECK(to_16(-std::numeric_limits<float>::infinity(), true) == 0xff80u);
    CHECK(std::isnan(from_16(to_16(std::nanf(""), false), false)));
}

TEST_CASE("the host's memory narrows a view in place and widens it back, margins untouched", "[precision]") {
    dsl::backend::Tensor t(dsl::Dims{2, 3, {4, 5}}, dsl::backend::Margins::filled(2, {1, 1}));
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 10.0f);
    for (float* p = t.data(); p != t.data() + t.size(); ++p) *p = normal(rng);
    const std::vector<float> before(t.data(), t.data() + t.size());
    for (const Precision p : {Precision::bfloat16, Precision::float16}) {
        std::vector<float> values = before;
        dsl::backend::Tensor u = dsl::backend::Tensor::over(values.data(), t.dims(), t.margins());
        std::vector<std::uint16_t> bits(static_cast<std::size_t>(u.dims().elements()));
        dsl::backend::host_memory().narrow(u.interior(), p, bits.data());
        const std::vector<float> rounded = values;
        std::size_t changed = 0, k = 0;
        for (std::size_t i = 0; i < values.size(); ++i) changed += values[i] != before[i];
        CHECK(changed > 0);
        // Every interior element is its nearest 16-bit value, in the view's order; margins kept.
        dsl::backend::for_each_row(u.interior(), [&](std::int64_t, std::int64_t, const dsl::backend::Index&, float* row) {
            for (std::int64_t x = 0; x < 5; ++x, ++k)
                CHECK(row[x] == from_16(to_16(before[static_cast<std::size_t>(row + x - values.data())],
                                              p == Precision::bfloat16),
                                        p == Precision::bfloat16));
        });
        CHECK(k == bits.size());
        CHECK(u.at(0, 0, dsl::backend::Index{-1, -1}) == before.front());
        std::vector<float> widened(values.size(), 0.0f), rounded_copy = rounded;
        dsl::backend::Tensor w = dsl::backend::Tensor::over(widened.data(), t.dims(), t.margins());
        const dsl::backend::Tensor r = dsl::backend::Tensor::over(rounded_copy.data(), t.dims(), t.margins());
        dsl::backend::host_memory().widen(bits.data(), p, w.interior());
        for (std::int64_t n = 0; n < 2; ++n)
            for (std::int64_t c = 0; c < 3; ++c)
                for (std::int64_t i = 0; i < 4; ++i)
                    for (std::int64_t j = 0; j < 5; ++j)
                        CHECK(w.at(n, c, dsl::backend::Index{i, j}) == r.at(n, c, dsl::backend::Index{i, j}));
        CHECK(w.at(1, 2, dsl::backend::Index{4, 5}) == 0.0f);  // a margin
    }
}

TEST_CASE("the host's memory narrows a blocked view and a part of it, and widens them back", "[precision]") {
    // A blocked tile (16 channels a block, as the trainer keeps them): each element rounded in place, its 16 bits
    // written in the view's memory order, and widened back into another tile's view of the same part.
    using dsl::backend::Index;
    const dsl::Dims dims{2, 32, {3, 4}};
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 10.0f);
    for (const Precision p : {Precision::bfloat16, Precision::float16}) {
        const bool bfloat = p == Precision::bfloat16;
        dsl::backend::Tensor t(dims, dsl::backend::Margins::filled(2, {0, 0}), dsl::backend::host_memory(), 16);
        for (float* v = t.data(); v != t.data() + t.size(); ++v) *v = normal(rng);
        const dsl::backend::Tensor before = t;
        // The whole tile, and the rows from 1 and columns from 2 of it (a halo's part).
        for (const bool part : {false, true}) {
            const Index at = part ? Index{1, 2} : Index{0, 0};
            const dsl::Dims sub{2, 32, part ? Index{2, 2} : dims.space};
            dsl::backend::Tensor u = before;
            std::vector<std::uint16_t> bits(static_cast<std::size_t>(sub.elements()));
            dsl::backend::host_memory().narrow(u.interior().sub(0, 0, at, sub), p, bits.data());
            dsl::backend::Tensor w(dims, dsl::backend::Margins::filled(2, {0, 0}), dsl::backend::host_memory(), 16);
            dsl::backend::host_memory().widen(bits.data(), p, w.interior().sub(0, 0, at, sub));
            for (std::int64_t n = 0; n < dims.n; ++n)
                for (std::int64_t c = 0; c < dims.c; ++c)
                    for (std::int64_t i = 0; i < 3; ++i)
                        for (std::int64_t j = 0; j < 4; ++j) {
                            const Index x{i, j};
                            const float was = before.at(n, c, x);
                            const bool inside = i >= at[0] && j >= at[1];
                            CHECK(u.at(n, c, x) == (inside ? from_16(to_16(was, bfloat), bfloat) : was));
                            CHECK(w.at(n, c, x) == (inside ? u.at(n, c, x) : 0.0f));
                        }
        }
    }
}

TEST_CASE("precision takes float32, bfloat16, float16 or ?: data and losses keep float32", "[precision]") {
    const Result bad = run_dsl("check samples/mesh_tiny.net " + schedule_with("", "default precision=half"));
    CHECK(bad.exit_code != 0);
    CHECK(bad.err.find("error: 'precision' must be 'float32', 'bfloat16', 'float16' or '?', not 'half'") !=
          std::string::npos);
    const Result plan = run_dsl("check samples/mesh_tiny.net " +
                                schedule_with("", "default precision=bfloat16\nlayer block1.0.relu recompute=on") +
                                " --dump-after plan");
    INFO(plan.out << plan.err);
    REQUIRE(plan.exit_code == 0);
    const std::string dump = plan.out + plan.err;
    CHECK(dump.find("kept in bfloat16: values in buffer") != std::string::npos);
    CHECK(dump.find("before backward, widened: 'block1.0.conv'") != std::string::npos);
    // A recomputed layer is made again from its (widened) input, not kept in 16 bits.
    CHECK(dump.find("before backward, forward again: 'block1.0.relu'") != std::string::npos);
    const Result explain =
        run_dsl("explain samples/mesh_tiny.net " + schedule_with("", "default precision=bfloat16") + " --json");
    REQUIRE(explain.exit_code == 0);
    for (const auto& layer : nlohmann::json::parse(explain.out)["layers"]) {
        const bool data = layer["kind"] == "input" || layer["kind"] == "pixel_cross_entropy";
        CHECK(layer["precision"] == (data ? "float32" : "bfloat16"));
    }
}

TEST_CASE("dsl explain counts the convolutions that multiply in 16 bits", "[precision]") {
    const Result explain = run_dsl("explain samples/mesh_tiny.net " + schedule_with("", "default precision=bfloat16"));
    INFO(explain.out << explain.err);
    CHECK(explain.out.find("products          bfloat16 in 7 convolutions (precision=bfloat16)") != std::string::npos);
    const Result half = run_dsl("explain samples/mesh_tiny.net " +
                                schedule_with("", "default precision=float16\nlayer block1.* precision=bfloat16"));
    INFO(half.out << half.err);
    CHECK(half.out.find("products          bfloat16 in 2 convolutions") != std::string::npos);
    CHECK(half.out.find("products          float16 in 5 convolutions (precision=float16)") != std::string::npos);
    const Result none = run_dsl("explain samples/mesh_tiny.net " + schedule_with("", "layer *.relu precision=float16"));
    CHECK(none.out.find("products") == std::string::npos);
}

TEST_CASE("dsl explain says where a step's values change type", "[precision]") {
    // Each layer's conversions in --json, and a line of each kind in the text, with as many layers.
    const std::string settings = "default precision=bfloat16\nlayer block1.* precision=float32";
    const Result text = run_dsl("explain samples/mesh_tiny.net " + schedule_with("", settings));
    const Result json = run_dsl("explain samples/mesh_tiny.net " + schedule_with("", settings) + " --json");
    INFO(text.out << text.err << json.err);
    REQUIRE(text.exit_code == 0);
    REQUIRE(json.exit_code == 0);
    std::int64_t rounded = 0, multiplied = 0;
    const auto explained = nlohmann::json::parse(json.out);
    for (const auto& l : explained["layers"]) {
        CAPTURE(l["name"], l["conversions"]);
        const bool in_block1 = l["name"].get<std::string>().rfind("block1.", 0) == 0;
        for (const auto& c : l["conversions"]) {
            const std::string what = c;
            CHECK_FALSE(in_block1);
            const bool output = what == "output rounded to bfloat16 after forward, widened before backward";
            const bool products = what == "input, output gradient and weights rounded to bfloat16 on each pass";
            CHECK((output || products));
            rounded += output, multiplied += products;
            if (products) CHECK(l["kind"] == "conv");
        }
    }
    CHECK(rounded > multiplied);
    CHECK(multiplied > 0);
    CHECK(text.out.find(fmt::format("conversions       {} outputs rounded to 16 bits after forward", rounded)) !=
          std::string::npos);
    CHECK(text.out.find(fmt::format("{} convolutions round their input, output gradient and weights", multiplied)) !=
          std::string::npos);
    const Result wide = run_dsl("explain samples/mesh_tiny.net " + schedule_with("", ""));
    CHECK(wide.exit_code == 0);
    CHECK(wide.out.find("conversions") == std::string::npos);
}

TEST_CASE("float16 trains with dynamic loss scaling, said, logged and kept by checkpoints", "[precision]") {
    const std::string half = schedule_with("", "default precision=float16");
    // From 65536 (GradScaler's) by default: a power of two, so on the CPU, whose gradients are float32, the
    // run is bitwise the unscaled one.
    const Run scaled = train("samples/mesh_tiny.net", half, 4),
              plain = train("samples/mesh_tiny.net", half, 4, "--loss-scale 0");
    CHECK(scaled.out.find("loss scaling from 65536: a step whose gradients overflow is skipped") != std::string::npos);
    CHECK(plain.out.find("loss scaling") == std::string::npos);
    CHECK(scaled.losses == plain.losses);
    check_same_state(scaled.checkpoint, plain.checkpoint, 0.0);
    for (const auto& line : scaled.lines) CHECK(line["loss_scale"] == 65536.0);
    CHECK_FALSE(plain.lines.at(0).contains("loss_scale"));
    CHECK(scaled.checkpoint.meta["loss_scale"]["scale"] == 65536.0);
    CHECK(scaled.checkpoint.meta["loss_scale"]["good_steps"] == 3);

    // From 2^137 the loss's gradient (the scale over 4 samples of 8x8 labels) is beyond float32's range, for
    // two steps at least: each such step is skipped, said, and halves the scale, until one fits.
    const std::string high_scale = "--loss-scale 1.742245718635205e41";  // 2^137
    const Run high = train("samples/mesh_tiny.net", half, 4, high_scale, 6);
    INFO(high.out);
    REQUIRE(high.lines.size() == 6);
    int skipped = 0;
    double scale = std::ldexp(1.0, 137);
    for (const auto& line : high.lines) {
        CHECK(line["loss_scale"] == scale);
        if (line["skipped"].get<bool>()) ++skipped, scale /= 2;
    }
    CHECK(skipped >= 2);
    CHECK(high.out.find("skipped: its gradients overflowed at loss scale 1.74225e+41, which is now 8.71123e+40") !=
          std::string::npos);
    CHECK(high.checkpoint.meta["loss_scale"]["scale"] == scale);

    // A resumed run goes on from the checkpoint's scale: as the whole run, bitwise.
    const fs::path dir = fs::temp_directory_path() / ("dsl_scale_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const std::string common = "run samples/mesh_tiny.net " + half + " --seed 7 --batch 4 " + high_scale + " ";
    Result r = run_dsl(common + "--steps 3 --save " + (dir / "part").string());
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + "--steps 3 --load " + (dir / "part").string() + " --log " + (dir / "rest.jsonl").string());
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    std::ifstream log(dir / "rest.jsonl");
    std::size_t i = 3;
    for (std::string line; std::getline(log, line); ++i) {
        const auto j = nlohmann::json::parse(line);
        REQUIRE(i < high.lines.size());
        CHECK(j["loss"] == high.lines[i]["loss"]);
        CHECK(j["loss_scale"] == high.lines[i]["loss_scale"]);
    }
    CHECK(i == 6);
    fs::remove_all(dir);
}

TEST_CASE("a checkpoint of any precision resumes under any other, its weights float32", "[precision]") {
    // Checkpoints hold the float32 master weights and the optimizer's state whatever the layers keep, so a run
    // goes on under another precision from where the first stopped: its first step's loss is the checkpoint's
    // weights' under the new rounding, and its next ten follow float32's continuation as the 16-bit runs follow
    // float32's curve (docs/language.md). float16's loss scale is kept by its checkpoints and starts afresh
    // (from 65536) where the checkpoint had none.
    const dsl::test::TempDir dir;
    const std::string net = "run samples/mesh_tiny.net --seed 7 --batch 4 ";
    const auto under = [](const char* precision) {
        return schedule_with("", std::string("default precision=") + precision) + " ";
    };
    const auto losses = [](const fs::path& log) {
        std::vector<double> out;
        std::ifstream in(log);
        for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["loss"]);
        return out;
    };
    const auto mean = [](const std::vector<double>& v) {
        double m = 0.0;
        for (double x : v) m += x / static_cast<double>(v.size());
        return m;
    };
    for (const char* first : {"float32", "bfloat16", "float16"}) {
        const fs::path ck = dir / (std::string(first) + ".ck");
        Result r = run_dsl(net + under(first) + "--steps 10 --save " + ck.string());
        INFO(r.out << r.err);
        REQUIRE(r.exit_code == 0);
        std::map<std::string, std::vector<double>> next;
        for (const char* then : {"float32", "bfloat16", "float16"}) {
            CAPTURE(first, then);
            const fs::path log = dir / (std::string(first) + "-" + then + ".jsonl"),
                           saved = dir / (std::string(first) + "-" + then + ".ck");
            r = run_dsl(net + under(then) + "--steps 10 --load " + ck.string() + " --log " + log.string() + " --save " +
                        saved.string());
            INFO(r.out << r.err);
            REQUIRE(r.exit_code == 0);
            next[then] = losses(log);
            REQUIRE(next[then].size() == 10);
            std::string error;
            const auto state = dsl::backend::load_checkpoint(saved.string(), error);
            INFO(error);
            REQUIRE(state);
            // float32 weights: some of their values lie off bfloat16's grid (their low 16 bits not zero).
            std::int64_t off_grid = 0;
            for (const auto& t : state->tensors)
                for (float v : t.data) {
                    std::uint32_t bits;
                    std::memcpy(&bits, &v, sizeof bits);
                    off_grid += (bits & 0xffffu) != 0;
                }
            CHECK(off_grid > 0);
            const bool scaled = std::string(then) == "float16";
            CHECK(state->meta.contains("loss_scale") == scaled);
            if (scaled && std::string(first) != "float16")
                CHECK(r.out.find("loss scaling from 65536") != std::string::npos);
        }
        for (const char* then : {"bfloat16", "float16"}) {
            CAPTURE(first, then);
            CHECK(next[then].front() == Approx(next["float32"].front()).epsilon(0.01));
            CHECK(mean(next[then]) == Approx(mean(next["float32"])).epsilon(0.10).margin(0.02));
        }
    }
}

TEST_CASE("16-bit storage on several processes trains as on one", "[precision][mpi]") {
    // A step's loss and the state after it (weights, and the gradients in the momenta) as one process's within
    // 1e-6 and 1e-4 (bfloat16: 3e-3, below): the same values rounded, halos and copies of rounded values. Later steps
    // add the float32 sums of split tiles in another order; where one lands beside a boundary between 16-bit values it
    // rounds to the other neighbour (a bfloat16 step is 2^-8 of the value, and batch norm divides it by the channel's
    // spread), and training carries that on: three steps' losses stay within 2% of one process's.
    struct Case {
        const char* net;
        const char* sched;
        const char* precision;
        std::int64_t batch;
        bool same_kernels = true;  // false: the split's tiles run other float32 kernels than one process's
    };
    const Case c =
        GENERATE(Case{"samples/mesh_tiny.net", "samples/mesh_tiny_spatial_hw_4.sched", "default precision=bfloat16", 4},
                 Case{"samples/mesh_tiny.net", "samples/mesh_tiny_hybrid_4.sched", "default precision=bfloat16", 4},
                 Case{"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_4.sched", "default precision=float16", 4},
                 Case{"samples/mesh_tiny.net", "tests/dist/mesh_f2.sched", "default precision=bfloat16", 4},
                 Case{"samples/mesh_tiny.net", "tests/dist/mesh_f2.sched", "default precision=float16", 4, false},
                 Case{"tests/dist/unet.net", "tests/dist/unet_mixed_4.sched", "default precision=bfloat16", 4},
                 Case{"tests/dist/modern.net", "tests/dist/modern_hw4.sched", "default precision=bfloat16", 4},
                 Case{"tests/dist/vol.net", "tests/dist/vol_dhw8.sched", "default precision=bfloat16", 2});
    CAPTURE(c.net, c.sched, c.precision);
    const std::string one = schedule_with("", c.precision), many = schedule_with(c.sched, c.precision);
    const Run a = train(c.net, one, c.batch, "", 1), b = train(c.net, many, c.batch, "", 1);
    // float16 has no 16-bit kernels on a CPU: its convolutions are float32's, on the rounded values. One process
    // keeps its tiles in blocks of 16 channels, where oneDNN runs its direct kernels; F parts split the channels,
    // so their tiles are planar, and the forward pass runs the channels-last brgemm kernel, which sums each
    // output's products in another order. In float32 the two differ by 2e-8 of the first loss and 2e-6 of the
    // state's largest; rounded to float16 after every layer (2^-11 steps), some of those last bits cross to the
    // other neighbour, and the first loss moved by 6e-6 and the state by 0.1 of its largest (the momenta of
    // biases that batch norm follows, which hold rounding only). One process alone moves more between the two
    // layouts (its first loss by 6e-5). So there only the losses are compared, closely at the first step.
    CHECK(b.losses.at(0) == Approx(a.losses.at(0)).epsilon(c.same_kernels ? 1e-6 : 2e-5));
    // bfloat16 layers also convolve with bfloat16 products (on CPUs with AVX-512 BF16), and oneDNN's kernels
    // sum an output's products in an order that depends on the tile's shape: a 2x2 grid's tiles, half as wide,
    // give outputs that differ in float32's last bits, a few of which then round to the other 16-bit
    // neighbour. Overlap on or off alike, mesh_tiny's first step's state moved by 1.4e-3 of its largest.
    const bool bfloat16 = std::string(c.precision).find("bfloat16") != std::string::npos;
    if (c.same_kernels) check_same_state(b.checkpoint, a.checkpoint, bfloat16 ? 3e-3 : 1e-4);
    const Run a3 = train(c.net, one, c.batch), b3 = train(c.net, many, c.batch);
    for (std::size_t i = 0; i < a3.losses.size(); ++i) CHECK(b3.losses.at(i) == Approx(a3.losses[i]).epsilon(2e-2));
}

TEST_CASE("recomputation beside 16-bit storage gives the same run bitwise", "[precision]") {
    // The recomputed layers read their inputs widened from the same 16 bits forward rounded them to.
    for (const char* net : {"samples/mesh_tiny.net", "tests/dist/unet.net"}) {
        CAPTURE(net);
        const std::int64_t batch = std::string(net).find("unet") != std::string::npos ? 2 : 4;
        check_same_run(train(net, schedule_with("", "default precision=bfloat16"), batch),
                       train(net, schedule_with("", "default precision=bfloat16\nlayer *relu* recompute=on"), batch),
                       0.0);
    }
}

TEST_CASE("bfloat16 and float16 follow float32's loss curve over 200 steps", "[precision]") {
    // The samples of images and of volumes and a U-Net, each in both 16-bit formats, against one float32 run.
    struct Case {
        const char* net;
        std::int64_t batch;
    };
    const Case c = GENERATE(Case{"samples/mesh_tiny.net", 4}, Case{"samples/regression_tiny.net", 4},
                            Case{"samples/volume_tiny.net", 4}, Case{"tests/dist/unet.net", 4});
    CAPTURE(c.net);
    const auto wide = train(c.net, schedule_with("", ""), c.batch, "", 200).losses;
    for (const char* precision : {"bfloat16", "float16"}) {
        CAPTURE(precision);
        const auto narrow =
            train(c.net, schedule_with("", std::string("default precision=") + precision), c.batch, "", 200).losses;
        check_follows(wide, narrow);
    }
}

TEST_CASE("the model's memory saved by 16-bit storage is the measured one", "[precision]") {
    // bench/mesh_stack_256 at 4 samples, every layer's output kept in bfloat16: the peak memory a process
    // measures falls by what `dsl explain` predicts, within 25%. The model counts what each layer's kernel
    // path holds (scheduler/src/paths.cpp): float32 tiles in 16-channel blocks need no oneDNN reorder
    // buffers, narrowed tiles stay planar and do.
    const auto [measured, model] = memory_saved("bench/mesh_stack_256.net", schedule_with("", "batch = 4"),
                                                schedule_with("", "batch = 4\ndefault precision=bfloat16"));
    CAPTURE(measured, model);
    CHECK(model > 0);
    CHECK(measured == Approx(model).epsilon(0.25));
}

TEST_CASE("a narrowed layer that no backward reads keeps no 16-bit copy", "[precision]") {
    // A batch norm that only a ReLU reads: the ReLU's backward reads its own output, so the batch norm's is
    // only rounded, and its memory saved whole, where a convolution's (which the batch norm's backward reads)
    // keeps a 16-bit copy and saves half. eval still reads the prediction, which a loss reads at the end of
    // forward; a layer whose float32 memory later layers took is a clear error.
    auto saved = [](const std::string& settings) {
        const Result r = run_dsl("explain samples/mesh_tiny.net " + schedule_with("", settings) + " --json");
        INFO(r.out << r.err);
        REQUIRE(r.exit_code == 0);
        const auto m = nlohmann::json::parse(r.out)["memory_bytes"];
        return m["activations_without_recomputation"].get<double>() - m["activations"].get<double>();
    };
    const double bn = saved("layer *.bn precision=bfloat16"), conv = saved("layer *.conv precision=bfloat16");
    CAPTURE(bn, conv);
    CHECK(conv > 0);
    CHECK(bn > 1.5 * conv);
    const dsl::test::TempDir dir;
    const std::string ck = dir / "ck", common = " --load " + ck + " --samples 8";
    REQUIRE(run_dsl("run samples/mesh_tiny.net --steps 2 --batch 4 --save " + ck).exit_code == 0);
    const std::string narrow = schedule_with("", "batch = 4\ndefault precision=bfloat16");
    const Result eval = run_dsl("eval samples/mesh_tiny.net " + narrow + common);
    INFO(eval.out << eval.err);
    CHECK(eval.exit_code == 0);
    const Result middle = run_dsl("predict samples/mesh_tiny.net " + narrow + common +
                                  " --layer block1.0.bn --output " + (dir / "bn.npy"));
    CHECK(middle.exit_code == 1);
    CHECK(middle.err.find("layer 'block1.0.bn' is kept in 16 bits under this schedule and no backward reads it") !=
          std::string::npos);
}

TEST_CASE("the auto-scheduler keeps outputs in bfloat16 where the schedule leaves the precision open", "[precision]") {
    // mesh2k on 2048 Lassen GPUs at a mini-batch of 2048, recomputation ruled out: only 16 bits make it fit.
    auto file = [](const std::string& text) {
        const fs::path path = fs::temp_directory_path() / ("dsl_precision_auto_" + std::to_string(::getpid()) +
                                                           std::to_string(text.size()) + ".sched");
        std::ofstream(path) << text;
        return path.string();
    };
    const std::string open = file("default recompute=off precision=?\n");
    const Result r = run_dsl("schedule stdlib/mesh2k.net " + open + " --procs 2048 --batch 2048 --platform lassen");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("precision=bfloat16") != std::string::npos);
    CHECK(r.out.find("recompute=on") == std::string::npos);
    // Left unset, the precision is float32's, and the same request does not fit.
    const Result fixed = run_dsl("schedule stdlib/mesh2k.net " + file("default recompute=off\n") +
                                 " --procs 2048 --batch 2048 --platform lassen");
    INFO(fixed.out << fixed.err);
    CHECK(fixed.exit_code != 0);
    CHECK(fixed.out.find("precision=bfloat16") == std::string::npos);
}

TEST_CASE("a narrowed layer's halos travel in 16 bits", "[precision][mpi]") {
    // Its halos go out twice, in forward and again in backward after widening (where float32's stay in the
    // margins), each in half the bytes: a step sends what float32's does, where float32 messages would send
    // half as much again.
    auto halo_bytes = [](const std::string& sched) {
        const fs::path log = fs::temp_directory_path() / ("dsl_precision_halo_" + std::to_string(::getpid()));
        const Result r = run_dsl("run samples/mesh_tiny.net " + sched + " --steps 1 --log '" + log.string() + "'");
        INFO(r.out << r.err);
        REQUIRE(r.exit_code == 0);
        std::ifstream in(log);
        std::string line;
        std::getline(in, line);
        fs::remove(log);
        return nlohmann::json::parse(line)["halo_bytes"].get<double>();
    };
    const double wide = halo_bytes(schedule_with("samples/mesh_tiny_spatial_hw_4.sched", ""));
    const double narrow =
        halo_bytes(schedule_with("samples/mesh_tiny_spatial_hw_4.sched", "default precision=bfloat16"));
    CHECK(wide > 0);
    CHECK(narrow == wide);
}
