// Timelines: `dsl run --trace` (measured, a track per process), `dsl explain --trace` (the model's, with the
// same names), and `dsl compare --measure`'s per-layer rows, read from a run's trace.
#include "run_dsl.hpp"
#include "temp_files.hpp"

#include <dsl/backend/kernels.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace {

using nlohmann::json;

json read_trace(const std::string& path) {
    const json j = json::parse(dsl::test::read_bytes(path), nullptr, false);
    REQUIRE(j.is_object());
    return j;
}

// The complete events ("ph": "X") of a trace, after checking that each has what the format needs.
std::vector<json> spans(const json& trace) {
    REQUIRE(trace.value("displayTimeUnit", "") == "ms");
    REQUIRE(trace.contains("traceEvents"));
    REQUIRE(trace["traceEvents"].is_array());
    std::vector<json> out;
    for (const json& e : trace["traceEvents"]) {
        REQUIRE(e.contains("ph"));
        REQUIRE(e.contains("pid"));
        REQUIRE(e.contains("tid"));
        REQUIRE(e.contains("name"));
        if (e["ph"] != "X") {
            CHECK(e["ph"] == "M");
            continue;
        }
        REQUIRE(e["ts"].is_number());
        REQUIRE(e["dur"].is_number());
        CHECK(e["dur"].get<double>() >= 0.0);
        REQUIRE(e.contains("cat"));
        REQUIRE(e["args"].is_object());
        out.push_back(e);
    }
    return out;
}

// The thread id of a process's thread named `name`, or -1.
int thread(const json& trace, int pid, const std::string& name) {
    for (const json& e : trace["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid && e["args"]["name"] == name)
            return e["tid"].get<int>();
    return -1;
}

std::set<std::string> names(const std::vector<json>& events, const std::string& category) {
    std::set<std::string> out;
    for (const json& e : events)
        if (e["cat"] == category) out.insert(e["name"].get<std::string>());
    return out;
}

// The layers of mesh_tiny with parameters (whose gradients are allreduced) and without.
const std::vector<std::string> parameterized = {
    "block1.0.conv", "block1.0.bn",   "block1.1.conv", "block1.1.bn",   "block2.0.conv", "block2.0.bn", "block2.1.conv",
    "block2.1.bn",   "block3.0.conv", "block3.0.bn",   "block3.1.conv", "block3.1.bn",   "pred"};
const std::vector<std::string> others = {"block1.0.relu", "block2.1.relu", "block3.1.relu", "loss"};

}  // namespace

TEST_CASE("run --trace: a track per process with every layer, halo, sum and allreduce", "[cli][trace][mpi]") {
    const auto [sched, procs, overlap] = GENERATE(table<std::string, int, bool>({
        {"samples/mesh_tiny_spatial_h_2.sched", 2, false},
        {"samples/mesh_tiny_mixed_4.sched", 4, true},
    }));
    const int steps = 3;
    dsl::test::TempDir dir;
    const std::string file = dir / "trace.json";
    const Result r =
        run_dsl("run samples/mesh_tiny.net " + sched + " --steps " + std::to_string(steps) + " --trace '" + file + "'");
    INFO(sched << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("trace of 3 steps on " + std::to_string(procs) + " processes written to") != std::string::npos);
    const json trace = read_trace(file);
    const std::vector<json> events = spans(trace);

    // A process per rank, named.
    std::set<int> pids;
    for (const json& e : events) pids.insert(e["pid"].get<int>());
    CHECK(pids.size() == static_cast<std::size_t>(procs));
    for (int p = 0; p < procs; ++p) {
        CHECK(pids.count(p) == 1);
        bool named = false;
        for (const json& e : trace["traceEvents"])
            named = named ||
                    (e["name"] == "process_name" && e["pid"] == p && e["args"]["name"] == "rank " + std::to_string(p));
        CHECK(named);
    }

    int first_longer = 0, first_shorter = 0;  // the halo layer's compute before its wait, against after it
    for (int p = 0; p < procs; ++p) {
        INFO("rank " << p);
        const int compute = thread(trace, p, "compute"), step_tid = thread(trace, p, "steps");
        REQUIRE(compute > 0);
        REQUIRE(step_tid > 0);
        std::vector<json> mine, on_compute, step_spans;
        for (const json& e : events) {
            if (e["pid"] != p) continue;
            mine.push_back(e);
            if (e["tid"] == compute) on_compute.push_back(e);
            if (e["tid"] == step_tid) step_spans.push_back(e);
        }
        REQUIRE(step_spans.size() == static_cast<std::size_t>(steps));
        // Every layer's forward and backward, in every step.
        for (int step = 1; step <= steps; ++step)
            for (const auto* layers : {&parameterized, &others})
                for (const std::string& layer : *layers) {
                    bool forward = false, backward = false;
                    for (const json& e : on_compute) {
                        if (e["args"]["step"] != step || e["args"].value("layer", "") != layer) continue;
                        forward = forward || e["name"] == layer + " forward";
                        backward = backward || e["args"]["phase"] == "backward";
                    }
                    INFO(layer << " step " << step);
                    CHECK(forward);
                    CHECK(backward);
                }
        // Convolutions' backward in its two parts.
        for (const std::string n : {"block2.1.conv backward data", "block2.1.conv backward weights"})
            CHECK(std::any_of(on_compute.begin(), on_compute.end(), [&](const json& e) { return e["name"] == n; }));

        // The compute track: one event after another, none overlapping, adding up to the step.
        std::sort(on_compute.begin(), on_compute.end(),
                  [](const json& a, const json& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
        for (std::size_t i = 1; i < on_compute.size(); ++i) {
            const double end = on_compute[i - 1]["ts"].get<double>() + on_compute[i - 1]["dur"].get<double>();
            INFO(on_compute[i - 1]["name"] << " then " << on_compute[i]["name"]);
            CHECK(end <= on_compute[i]["ts"].get<double>() + 0.002);
        }
        for (const json& s : step_spans) {
            const int step = s["args"]["step"].get<int>();
            double sum = 0.0;
            for (const json& e : on_compute)
                if (e["args"]["step"] == step) sum += e["dur"].get<double>();
            const double dur = s["dur"].get<double>();
            CHECK(sum <= dur + 0.01);
            CHECK(sum >= 0.97 * dur);
        }

        // A weight-gradient allreduce per layer with parameters, each step, on the allreduce track; but where
        // the processes split the samples' space alone, block3.1.conv, whose weights (64 x 64 x 3 x 3) outweigh
        // its input and output (4 x 64 x 8 x 8 each), computes its weight gradient by blocks of filters
        // (backend/src/train/filter_blocks.cpp): no allreduce, and each step a wait for the others' tiles. That
        // path needs the CPU's blocked tiles (AVX-512's): elsewhere it is off, and the layer allreduces too.
        for (const std::string& layer : parameterized) {
            const auto named = [&](const std::string& name, const std::string& category) {
                return std::count_if(mine.begin(), mine.end(),
                                     [&](const json& e) { return e["name"] == name && e["cat"] == category; });
            };
            INFO(layer);
            const bool by_filters = procs == 2 && layer == "block3.1.conv" && dsl::backend::cpu_kernels().blocked;
            CHECK(named(layer + " allreduce", "allreduce") == (by_filters ? 0 : steps));
            if (by_filters) CHECK(named(layer + " wait for sum", "wait") == steps);
        }
        // Halo exchanges, from post to completion: posted in the layer's first compute event (after the
        // padding is set and the halo packed), complete when its wait ends, then the rest of the compute. With
        // overlap the first event holds the interior (most of the rows), without it only the packing: in most
        // steps (a loaded machine may preempt any one) the first is the longer with overlap, the shorter without.
        const std::set<std::string> halos = names(mine, "halo");
        CHECK(halos.count("block1.1.conv halo") == 1);
        CHECK(halos.count("block1.1.conv halo back") == 1);
        for (const json& h : mine) {
            if (h["name"] != "block2.1.conv halo") continue;
            CHECK(h["args"]["bytes"].get<double>() > 0);
            std::vector<json> parts;
            for (const json& e : on_compute)
                if (e["name"] == "block2.1.conv forward" && e["args"]["step"] == h["args"]["step"]) parts.push_back(e);
            REQUIRE(parts.size() == 2);  // sorted by start
            const double h0 = h["ts"].get<double>(), h1 = h0 + h["dur"].get<double>();
            const double first0 = parts[0]["ts"].get<double>(), first1 = first0 + parts[0]["dur"].get<double>();
            CHECK(first0 <= h0 + 0.002);
            CHECK(h0 <= first1 + 0.002);
            CHECK(h1 <= parts[1]["ts"].get<double>() + 0.002);
            (parts[0]["dur"].get<double>() > parts[1]["dur"].get<double>() ? first_longer : first_shorter) += 1;
        }
        // Batch-norm statistics and the loss are summed over processes, and waited for.
        const std::set<std::string> sums = names(mine, "sum");
        CHECK(sums.count("block1.0.bn sum") == 1);
        CHECK(sums.count("loss sum") == 1);
        CHECK(names(mine, "wait").count("block1.0.bn wait for sum") == 1);
        // The mixed schedule splits block1, block2 and block3 differently: their inputs are shuffled.
        if (procs == 4) {
            CHECK(names(mine, "shuffle").count("block2.0.conv shuffle") == 1);
            CHECK(names(mine, "shuffle").count("block3.0.conv shuffle") == 1);
            CHECK(names(mine, "wait").count("block3.0.conv wait for shuffle") == 1);
        }
    }

    CHECK(first_longer + first_shorter == steps * procs);
    CHECK((overlap ? first_longer : first_shorter) > (steps * procs) / 2);

    // The processes' clocks share a zero: every process leaves the loss's sum at about the same time (in some
    // step: a loaded machine may preempt one process after it left).
    std::map<int, std::vector<double>> left;  // step: when each process left the sum
    std::map<int, double> step_dur;
    for (const json& e : events) {
        const int step = e["args"]["step"].get<int>();
        if (e["name"] == "loss sum") left[step].push_back(e["ts"].get<double>() + e["dur"].get<double>());
        if (e["cat"] == "step" && e["pid"] == 0) step_dur[step] = e["dur"].get<double>();
    }
    double closest = 1e300;
    for (const auto& [step, ends] : left) {
        REQUIRE(ends.size() == static_cast<std::size_t>(procs));
        const auto [lo, hi] = std::minmax_element(ends.begin(), ends.end());
        closest = std::min(closest, (*hi - *lo) / step_dur[step]);
    }
    CHECK(closest < 0.5);
}

TEST_CASE("run --trace under F parts: each block's allreduce among its holders alone", "[cli][trace][mpi]") {
    // N=2 F=2 on 4 processes: each block of a layer's weights has two holders (the two sample groups), which
    // allreduce its gradient every step: half of the bytes that N=2 allreduces. F=2 on 2 processes: no other
    // process holds a block, and nothing is allreduced.
    const int steps = 2;
    auto traced = [&](const std::string& sched) {
        dsl::test::TempDir dir;
        const std::string file = dir / "trace.json";
        const Result r = run_dsl("run samples/mesh_tiny.net " + sched + " --steps " + std::to_string(steps) +
                                 " --trace '" + file + "'");
        INFO(sched << "\n" << r.out << r.err);
        REQUIRE(r.exit_code == 0);
        return spans(read_trace(file));
    };
    // Bytes allreduced per layer on rank 0 in the last step.
    auto allreduced = [&](const std::vector<json>& events) {
        std::map<std::string, double> bytes;
        for (const json& e : events)
            if (e["cat"] == "allreduce" && e["pid"] == 0 && e["args"]["step"] == steps)
                bytes[e["name"].get<std::string>()] += e["args"]["bytes"].get<double>();
        return bytes;
    };
    const auto blocks = allreduced(traced("tests/dist/mesh_n2f2.sched"));
    const auto whole = allreduced(traced("samples/mesh_tiny_sample_2.sched"));
    for (const std::string& layer : parameterized) {
        INFO(layer);
        REQUIRE(blocks.count(layer + " allreduce") == 1);
        REQUIRE(whole.count(layer + " allreduce") == 1);
        CHECK(blocks.at(layer + " allreduce") == Approx(whole.at(layer + " allreduce") / 2));
    }
    CHECK(allreduced(traced("tests/dist/mesh_f2.sched")).empty());
}

TEST_CASE("run --trace on one process, --trace-steps keeps the last steps", "[cli][trace]") {
    dsl::test::TempDir dir;
    const std::string file = dir / "trace.json";
    const Result r = run_dsl("run samples/mesh_tiny.net --steps 3 --trace-steps 2 --trace '" + file + "'");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const json trace = read_trace(file);
    const std::vector<json> events = spans(trace);
    std::set<int> steps;
    for (const json& e : events) {
        CHECK(e["pid"] == 0);
        CHECK(e["cat"] != "allreduce");  // nothing to sum with
        CHECK(e["cat"] != "halo");
        steps.insert(e["args"]["step"].get<int>());
    }
    CHECK(steps == std::set<int>{2, 3});
    // Running again replaces the trace it wrote.
    CHECK(run_dsl("run samples/mesh_tiny.net --steps 1 --trace '" + file + "'").exit_code == 0);
}

TEST_CASE("explain --trace: the model's timeline, with the names of the measured one", "[cli][trace][model]") {
    dsl::test::TempDir dir;
    const std::string measured = dir / "measured.json", predicted = dir / "predicted.json";
    const std::string args = "samples/mesh_tiny.net samples/mesh_tiny_mixed_4.sched";
    const Result run = run_dsl("run " + args + " --steps 2 --trace '" + measured + "'");
    INFO(run.out << run.err);
    REQUIRE(run.exit_code == 0);
    const Result explain = run_dsl("explain " + args + " --trace '" + predicted + "'");
    INFO(explain.out << explain.err);
    REQUIRE(explain.exit_code == 0);
    CHECK(explain.out.find("step") != std::string::npos);  // the table is printed as before
    const json p = read_trace(predicted);
    const std::vector<json> model = spans(p), real = spans(read_trace(measured));
    // One process, the busiest, with one step as long as the predicted step.
    std::set<int> pids;
    for (const json& e : model) pids.insert(e["pid"].get<int>());
    CHECK(pids == std::set<int>{0});
    // Every kernel the run traced, and its allreduces, halos, shuffles and sums, by the same names.
    const std::set<std::string> predicted_compute = names(model, "compute");
    for (const std::string& n : names(real, "compute")) {
        INFO(n);
        CHECK(predicted_compute.count(n) == 1);
    }
    for (const char* category : {"allreduce", "shuffle", "halo"}) {
        const std::set<std::string> in_model = names(model, category);
        for (const std::string& n : names(real, category)) {
            if (n.find("halo back") != std::string::npos) continue;  // hidden behind dL/dw: no span of its own
            INFO(n);
            CHECK(in_model.count(n) == 1);
        }
    }
    // The compute track adds up to the step.
    const int compute = thread(p, 0, "compute");
    double sum = 0.0, step = 0.0;
    for (const json& e : model) {
        if (e["tid"] == compute) sum += e["dur"].get<double>();
        if (e["cat"] == "step") step = e["dur"].get<double>();
    }
    CHECK(step > 0.0);
    CHECK(sum == Approx(step).epsilon(0.01));
}

TEST_CASE("compare --measure: each layer's forward and backward, predicted and measured", "[cli][trace][model]") {
    const std::string args =
        "compare samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched samples/mesh_tiny_spatial_h_2.sched "
        "--measure --steps 3";
    const Result text = run_dsl(args);
    INFO(text.out << text.err);
    REQUIRE(text.exit_code == 0);
    for (const char* s : {"samples/mesh_tiny_sample_2.sched: per layer, predicted against measured",
                          "samples/mesh_tiny_spatial_h_2.sched: per layer, predicted against measured", "(update)"})
        CHECK(text.out.find(s) != std::string::npos);
    const Result r = run_dsl(args + " --json");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(r.out);
    REQUIRE(j["schedules"].size() == 2);
    for (const json& s : j["schedules"]) {
        REQUIRE(s["layers"].is_array());
        std::set<std::string> layers;
        double forward = 0.0, backward = 0.0;
        for (const json& l : s["layers"]) {
            layers.insert(l["layer"].get<std::string>());
            CHECK(l["predicted_forward_seconds"].get<double>() >= 0.0);
            REQUIRE(l.contains("measured_forward_seconds"));
            forward += l["measured_forward_seconds"].get<double>();
            backward += l["measured_backward_seconds"].get<double>();
            if (l["kind"] == "conv") {
                CHECK(l["measured_forward_seconds"].get<double>() > 0.0);
                CHECK(l["measured_backward_seconds"].get<double>() > 0.0);
            }
        }
        CHECK(layers.count("block2.1.conv") == 1);
        CHECK(layers.count("y") == 0);  // labels have no time
        // The layers and the update add up to about the measured step.
        const double step = s["measured_step_seconds"].get<double>();
        const double total = forward + backward + s["update"]["measured_seconds"].get<double>();
        CHECK(total == Approx(step).epsilon(0.5));
    }
}

TEST_CASE("run --trace refuses what it could not or should not write, before training", "[cli][trace]") {
    dsl::test::TempDir dir;
    const Result folder = run_dsl("run samples/mesh_tiny.net --steps 1 --trace '" + dir.path.string() + "'");
    CHECK(folder.exit_code == 1);
    CHECK(folder.err.find("error: --trace:") != std::string::npos);
    CHECK(folder.out.find("step") == std::string::npos);
    const std::string mine = dir / "notes.json";
    dsl::test::write_bytes(mine, "{\"my\": \"data\"}\n");
    const Result other = run_dsl("run samples/mesh_tiny.net --steps 1 --trace '" + mine + "'");
    CHECK(other.exit_code == 1);
    CHECK(other.err.find("is not a trace that dsl wrote") != std::string::npos);
    CHECK(dsl::test::read_bytes(mine) == "{\"my\": \"data\"}\n");
    const Result explain =
        run_dsl("explain samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --trace '" + mine + "'");
    CHECK(explain.exit_code == 1);
    CHECK(dsl::test::read_bytes(mine) == "{\"my\": \"data\"}\n");
    const Result steps = run_dsl("run samples/mesh_tiny.net --steps 1 --trace-steps 1");
    CHECK(steps.exit_code == 2);
    const Result zero =
        run_dsl("run samples/mesh_tiny.net --steps 1 --trace '" + (dir / "t.json") + "' --trace-steps 0");
    CHECK(zero.exit_code == 2);
}
