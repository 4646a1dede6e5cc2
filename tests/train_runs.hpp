// Training runs of the `dsl` command that tests compare: the loss of every step (from --log) and the final
// state (from --save), and the comparison of two states tensor by tensor.
#pragma once

#include "run_dsl.hpp"

#include <dsl/backend/checkpoint.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

using dsl::backend::Checkpoint;
using dsl::backend::load_checkpoint;

struct Run {
    std::vector<double> losses;
    std::vector<std::map<std::string, double>> each;  // per step: every loss layer's, by name
    std::vector<nlohmann::json> lines;                // the log's
    Checkpoint checkpoint;
    std::string out;  // what dsl printed
};

// Trains `net` (under `sched` when not empty) for a few steps and returns its losses and final state.
inline Run train(const std::string& net, const std::string& sched, std::int64_t batch, const std::string& extra = "",
                 int steps = 3) {
    const fs::path dir = fs::temp_directory_path() / ("dsl_dist_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const Result r =
        run_dsl("run " + net + " " + sched + " --steps " + std::to_string(steps) + " --seed 7 --batch " + std::to_string(batch) + " --log '" +
                (dir / "log.jsonl").string() + "' --save '" + (dir / "ckpt").string() + "' " + extra);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    Run out;
    std::ifstream log(dir / "log.jsonl");
    for (std::string line; std::getline(log, line);) {
        const auto j = nlohmann::json::parse(line);
        out.losses.push_back(j["loss"]);
        out.each.push_back(j["losses"]);
        out.lines.push_back(j);
    }
    out.out = r.out;
    std::string error;
    auto ckpt = load_checkpoint((dir / "ckpt").string(), error);
    INFO(error);
    REQUIRE(ckpt);
    out.checkpoint = std::move(*ckpt);
    fs::remove_all(dir);
    return out;
}

// A 16-bit run's losses (of a whole number of tens of steps) against float32's, as docs/language.md says: the
// mean loss of every ten steps within 10% of float32's (or 0.02, where the loss is small), and of the last ten
// within 3% (or 0.005).
inline void check_follows(const std::vector<double>& wide, const std::vector<double>& narrow) {
    REQUIRE(!wide.empty());
    REQUIRE(wide.size() % 10 == 0);
    REQUIRE(narrow.size() == wide.size());
    CHECK(wide.back() < 0.5 * wide.front());  // it learned
    for (std::size_t from = 0; from < wide.size(); from += 10) {
        double w = 0.0, n = 0.0;
        for (std::size_t i = from; i < from + 10; ++i) w += wide[i] / 10, n += narrow[i] / 10;
        const bool last = from + 10 == wide.size();
        CAPTURE(from, w, n);
        CHECK(n == Approx(w).epsilon(last ? 0.03 : 0.10).margin(last ? 0.005 : 0.02));
    }
}

// Every tensor of `b` in `a`, element by element within `rel` of the tensor's largest magnitude (or of 0.01,
// for tensors that are zero but for rounding: the bias of a convolution before batch norm gets no gradient).
inline void check_same_state(const Checkpoint& a, const Checkpoint& b, double rel) {
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (const auto& expected : b.tensors) {
        const auto* got = a.find(expected.name);
        INFO(expected.name);
        REQUIRE(got);
        REQUIRE(got->data.size() == expected.data.size());
        double scale = 0.0, worst = 0.0;
        for (std::size_t i = 0; i < expected.data.size(); ++i) {
            scale = std::max(scale, std::fabs(double(expected.data[i])));
            worst = std::max(worst, std::fabs(double(got->data[i]) - double(expected.data[i])));
        }
        CHECK(worst <= rel * std::max(scale, 0.01));
    }
}

// `net` trained under `sched` gives one process's losses (every step's, and every loss layer's) and final
// checkpoint within 1e-4 relative, and it trained; `extra`: more of the command line, for both runs.
inline void check_same_training(const std::string& net, const std::string& sched, std::int64_t batch,
                                const std::string& extra = "") {
    const Run one = train(net, "", batch, extra);
    const Run many = train(net, sched, batch, extra);
    REQUIRE(one.losses.size() == 3);
    REQUIRE(many.losses.size() == one.losses.size());
    for (std::size_t i = 0; i < one.losses.size(); ++i) {
        CHECK(many.losses[i] == Approx(one.losses[i]).epsilon(1e-4));
        // Every loss layer's own, by name (several in heads.net).
        REQUIRE(many.each[i].size() == one.each[i].size());
        for (const auto& [name, value] : one.each[i]) {
            INFO(name);
            REQUIRE(many.each[i].count(name) == 1);
            CHECK(many.each[i].at(name) == Approx(value).epsilon(1e-4));
        }
    }
    CHECK(one.losses.back() != one.losses.front());  // it trained
    check_same_state(many.checkpoint, one.checkpoint, 1e-4);
}

// `b` trained as `a` did: every step's loss (of three), and every tensor of the final checkpoint, within
// `rel` (0: bitwise); and `a` trained.
inline void check_same_run(const Run& a, const Run& b, double rel) {
    REQUIRE(a.losses.size() == 3);
    REQUIRE(b.losses.size() == a.losses.size());
    for (std::size_t i = 0; i < a.losses.size(); ++i) {
        if (rel == 0.0)
            CHECK(b.losses[i] == a.losses[i]);
        else
            CHECK(b.losses[i] == Approx(a.losses[i]).epsilon(rel));
    }
    CHECK(a.losses.back() != a.losses.front());  // it trained
    check_same_state(b.checkpoint, a.checkpoint, rel);
}

// A schedule file: `base`'s text (a file of the repository; none: one process) followed by `extra`.
inline std::string schedule_with(const std::string& base, const std::string& extra) {
    static int made = 0;
    const fs::path path = fs::temp_directory_path() /
                          ("dsl_schedule_" + std::to_string(::getpid()) + "_" + std::to_string(made++) + ".sched");
    std::ofstream out(path);
    // Top-level settings in `extra` go first (before any entry), the rest after `base`.
    std::string globals, entries;
    for (std::size_t start = 0; start < extra.size();) {
        const std::size_t end = std::min(extra.find('\n', start), extra.size());
        const std::string line = extra.substr(start, end - start);
        (line.rfind("batch", 0) == 0 || line.rfind("platform", 0) == 0 || line.rfind("procs", 0) == 0 ? globals
                                                                                                      : entries) +=
            line + "\n";
        start = end + 1;
    }
    const bool procs = globals.find("procs") != std::string::npos;
    out << globals
        << (base.empty() ? std::string(procs ? "default N=1\n" : "procs = 1\ndefault N=1\n")
                         : read(fs::path(source_dir()) / base))
        << "\n"
        << entries;
    return path.string();
}

// What the second schedule saves of `net`'s peak memory per process against the first, measured (in two runs
// of two steps) and as `dsl explain` predicts it, in MiB: {measured, predicted}. With `gpu`, on the GPU: the
// device memory in use after the steps, against the model of a GPU platform (dgx_h100).
inline std::pair<double, double> memory_saved(const std::string& net, const std::string& first,
                                              const std::string& second, bool gpu = false) {
    auto peak = [&](const std::string& sched) {
        const Result r = run_dsl("run " + net + " " + sched + " --steps 2" + (gpu ? " --device gpu" : ""));
        INFO(r.out << r.err);
        REQUIRE(r.exit_code == 0);
        if (gpu) {
            const auto at = r.out.find(" MiB in use on the GPU");
            REQUIRE(at != std::string::npos);
            const auto from = r.out.rfind(' ', at - 1);
            return std::stod(r.out.substr(from + 1, at - from - 1));
        }
        const auto at = r.out.find("peak memory ");
        REQUIRE(at != std::string::npos);
        return std::stod(r.out.substr(at + 12));
    };
    auto predicted = [&](const std::string& sched) {
        const Result r = run_dsl("explain " + net + " " + sched + " --json" + (gpu ? " --platform dgx_h100" : ""));
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        return nlohmann::json::parse(r.out)["memory_bytes"]["total"].get<double>() / (1 << 20);
    };
    return {peak(first) - peak(second), predicted(first) - predicted(second)};
}

}  // namespace
