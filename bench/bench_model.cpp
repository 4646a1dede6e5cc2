// bench_model: the performance model against measurement on this machine, through the `dsl` command as
// users run it. First a fresh calibration (into a copy of the stdlib's `local` platform: the machine's speed
// drifts over hours, so the model is calibrated just before it is checked), then, for the sample networks
// under hand-written schedules on 1, 2 and 4 processes, the predicted step (`dsl compare`) against the
// measured one (`dsl compare --measure`, each schedule measured BENCH_REPEAT times, interleaved, median),
// and the model's error. Then the auto-scheduler's schedule for 2 and 4 processes, measured beside the
// hand-written ones for the same count: its time over the best of theirs.
#include "common.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

using namespace dsl::bench;
namespace fs = std::filesystem;

namespace {

fs::path dir;

std::string run(const std::string& args, bool quiet = true) {
    const fs::path out = dir / "out.txt";
    const std::string cmd = fmt::format("cd '{}' && '{}' {} > '{}'{}", DSL_SOURCE_DIR, DSL_BINARY, args, out.string(),
                                        quiet ? " 2>/dev/null" : "");
    if (std::system(cmd.c_str()) != 0) {
        std::cerr << "bench_model: failed: dsl " << args << "\n";
        std::exit(1);
    }
    std::ifstream in(out);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

struct Row {
    std::string net, sched;
    std::int64_t procs = 1, batch = 1;
    double predicted = 0.0;
    std::vector<double> measured;
    std::string layout;  // every layer's split and overlap, to tell identical schedules apart
};

// Predicted and measured steps of `scheds` for `net` (one compare per repeat, so that a change in the
// machine's load hits every schedule alike).
std::vector<Row> measure(const std::string& net, std::int64_t batch, const std::vector<std::string>& scheds,
                         const std::string& platform, int repeat, int steps) {
    std::vector<Row> rows;
    std::string list;
    for (const auto& s : scheds) list += " " + s;
    for (int r = 0; r < repeat; ++r) {
        const auto j =
            nlohmann::json::parse(run(fmt::format("compare {}{} --batch {} --platform {} --measure "
                                                  "--steps {} --json",
                                                  net, list, batch, platform, steps)));
        const auto& all = j["schedules"];
        rows.resize(all.size());
        for (std::size_t k = 0; k < all.size(); ++k) {
            rows[k].net = net;
            rows[k].sched = all[k]["schedule"];
            rows[k].procs = all[k]["procs"];
            rows[k].batch = all[k]["batch"];
            rows[k].predicted = all[k]["prediction"]["seconds"]["step"];
            rows[k].layout.clear();
            for (const auto& l : all[k]["prediction"]["layers"])
                rows[k].layout += l["split"].dump() + l["overlap"].dump();
            if (all[k].contains("measured_step_seconds")) rows[k].measured.push_back(all[k]["measured_step_seconds"]);
        }
    }
    return rows;
}

std::string write_sched(const std::string& name, const std::string& text) {
    const fs::path p = dir / (name + ".sched");
    std::ofstream(p) << text;
    return p.string();
}

}  // namespace

int main() {
    const int repeat = static_cast<int>(env_int("BENCH_REPEAT", 3));
    const int steps = static_cast<int>(env_int("BENCH_STEPS", 20));
    const bool calibrate = env_int("BENCH_CALIBRATE", 1) != 0;
    dir = fs::temp_directory_path() / fmt::format("dsl_bench_model_{}", ::getpid());
    fs::create_directories(dir);
    std::cout << fmt::format("bench_model: {}; load average {}\n", cpu_model(), load_average());

    std::string platform = "local";
    if (calibrate) {
        const fs::path copy = dir / "here.platform";
        fs::copy_file(fs::path(DSL_SOURCE_DIR) / "stdlib/platforms/local.platform", copy);
        platform = copy.string();
        const auto t0 = Clock::now();
        run(fmt::format("calibrate samples/mesh_tiny.net --procs 1 2 4 --batch 4 -o {}", platform));
        run(fmt::format("calibrate samples/resnet_tiny.net --procs 1 2 4 --batch 8 -o {}", platform));
        std::cout << fmt::format("calibrated a copy of stdlib/platforms/local.platform in {:.0f} s\n",
                                 seconds_since(t0));
    }
    std::cout << fmt::format(
        "each schedule measured {} times (dsl compare --measure --steps {}: the median of steps "
        "3-{}), interleaved; the median of those\n\n",
        repeat, steps, steps);

    const std::vector<std::string> tiny_1 = {"samples/mesh_tiny_serial_1.sched"},
                                   tiny_2 = {"samples/mesh_tiny_sample_2.sched", "samples/mesh_tiny_spatial_h_2.sched",
                                             "samples/mesh_tiny_spatial_w_2.sched", "samples/mesh_tiny_mixed_2.sched"},
                                   tiny_4 = {"samples/mesh_tiny_sample_4.sched", "samples/mesh_tiny_spatial_h_4.sched",
                                             "samples/mesh_tiny_spatial_hw_4.sched", "samples/mesh_tiny_hybrid_4.sched",
                                             "samples/mesh_tiny_mixed_4.sched"};
    const std::vector<std::string> res_1 = {write_sched("resnet_serial_1", "procs = 1\ndefault N=1 overlap=off\n")},
                                   res_2 = {write_sched("resnet_sample_2", "procs = 2\ndefault N=2 overlap=off\n"),
                                            write_sched("resnet_rows_2", "procs = 2\ndefault H=2 overlap=on\n")},
                                   res_4 = {write_sched("resnet_sample_4", "procs = 4\ndefault N=4 overlap=off\n"),
                                            "samples/resnet_tiny_hybrid_4.sched"};
    struct Net {
        std::string path;
        std::int64_t batch;
        std::map<std::int64_t, std::vector<std::string>> by_procs;
    };
    const Net nets[] = {{"samples/mesh_tiny.net", 4, {{1, tiny_1}, {2, tiny_2}, {4, tiny_4}}},
                        {"samples/resnet_tiny.net", 8, {{1, res_1}, {2, res_2}, {4, res_4}}}};

    std::cout << fmt::format("{:<24} {:<38} {:>5} {:>6} {:>12} {:>12} {:>17} {:>8}\n", "network", "schedule", "procs",
                             "batch", "predicted ms", "measured ms", "(min - max)", "error");
    std::vector<double> errors;
    std::map<std::string, std::map<std::int64_t, double>> best_hand;  // per network and count: measured
    for (const Net& n : nets) {
        std::vector<std::string> all;
        for (const auto& [procs, scheds] : n.by_procs) all.insert(all.end(), scheds.begin(), scheds.end());
        for (const Row& r : measure(n.path, n.batch, all, platform, repeat, steps)) {
            const double m = median(r.measured);
            const double e = (r.predicted - m) / m;
            errors.push_back(std::fabs(e));
            auto& best = best_hand[n.path][r.procs];
            best = best == 0.0 ? m : std::min(best, m);
            std::cout << fmt::format("{:<24} {:<38} {:>5} {:>6} {:>12.3f} {:>12.3f} {:>8.3f} - {:<6.3f} {:>+7.1f}%\n",
                                     r.net, fs::path(r.sched).filename().string(), r.procs, r.batch, r.predicted * 1e3,
                                     m * 1e3, *std::min_element(r.measured.begin(), r.measured.end()) * 1e3,
                                     *std::max_element(r.measured.begin(), r.measured.end()) * 1e3, 100.0 * e);
        }
    }
    std::cout << fmt::format("\nmedian |error| over {} schedules: {:.1f}%  (target: at most 15%)\n\n", errors.size(),
                             100.0 * median(errors));

    std::cout << fmt::format("{:<24} {:>5} {:>14} {:>14} {:>16} {:>8}\n", "auto-schedule", "procs", "predicted ms",
                             "measured ms", "best hand ms", "ratio");
    for (const Net& n : nets)
        for (std::int64_t procs : {2, 4}) {
            const fs::path out = dir / fmt::format("auto_{}.sched", procs);
            fs::remove(out);
            run(fmt::format("schedule {} --procs {} --batch {} --platform {} -o {}", n.path, procs, n.batch, platform,
                            out.string()));
            std::vector<std::string> scheds{out.string()};
            const auto& hand = n.by_procs.at(procs);
            scheds.insert(scheds.end(), hand.begin(), hand.end());
            const auto rows = measure(n.path, n.batch, scheds, platform, repeat, steps);
            double best = 0.0;
            std::string same;
            for (std::size_t k = 1; k < rows.size(); ++k) {
                const double m = median(rows[k].measured);
                best = k == 1 ? m : std::min(best, m);
                if (rows[k].layout == rows[0].layout) same = fs::path(rows[k].sched).filename().string();
            }
            const double mine = median(rows[0].measured);
            std::cout << fmt::format("{:<24} {:>5} {:>14.3f} {:>14.3f} {:>16.3f} {:>8.3f}{}\n", n.path, procs,
                                     rows[0].predicted * 1e3, mine * 1e3, best * 1e3, mine / best,
                                     same.empty() ? "" : "  (the same schedule as " + same + ")");
        }
    std::cout << "(ratio: the auto-schedule's measured step over the best hand-written one measured in the same runs; "
                 "target: at most 1.05)\n";
    std::cout << fmt::format("\nload average at the end: {}\n", load_average());
    fs::remove_all(dir);
    return 0;
}
