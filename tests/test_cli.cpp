// The `dsl` command end to end: check's table and JSON, print's round trip, the planned verbs, help.
#include "run_dsl.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/gpu.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>
#include <thread>
#include <vector>

TEST_CASE("check prints every layer with its shape, and totals", "[cli]") {
    const Result r = run_dsl("check samples/mesh_tiny.net");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find("block1.0.conv") != std::string::npos);
    CHECK(r.out.find("[N, 16, 32, 32]") != std::string::npos);
    CHECK(r.out.find("[N, 2, 8, 8]") != std::string::npos);
    CHECK(r.out.find("parameters") != std::string::npos);
}

TEST_CASE("check with a schedule shows each layer's distribution and tile", "[cli]") {
    const Result r = run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_mixed_4.sched --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["schedule"]["procs"] == 4);
    CHECK(j["schedule"]["complete"] == true);
    bool seen_conv = false, seen_pred = false;
    for (const auto& l : j["layers"]) {
        if (l["name"] == "block1.0.conv") {
            seen_conv = true;
            CHECK(l["shape"] == nlohmann::json::array({"N", 16, 32, 32}));
            CHECK(l["distribution"]["split"] == nlohmann::json({{"N", 1}, {"H", 2}, {"W", 2}}));
            CHECK(l["distribution"]["tile"] == nlohmann::json::array({4, 16, 16, 16}));
            CHECK(l["distribution"]["overlap"] == true);
            CHECK(l["params"] == 16 * 18 * 9);
        }
        if (l["name"] == "pred") {
            seen_pred = true;
            CHECK(l["distribution"]["split"] == nlohmann::json({{"N", 4}, {"H", 1}, {"W", 1}}));
            CHECK(l["distribution"]["tile"] == nlohmann::json::array({1, 2, 8, 8}));
        }
    }
    CHECK(seen_conv);
    CHECK(seen_pred);
}

TEST_CASE("check shows a per-pixel label's tile split as its loss's logits are", "[cli]") {
    // The label y [N, 8, 8] is made in the distribution of the loss that reads it: H=2 halves its rows.
    const Result r = run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    bool seen_label = false;
    for (const auto& l : j["layers"]) {
        if (l["name"] == "y") {
            seen_label = true;
            CHECK(l["distribution"]["tile"] == nlohmann::json::array({4, 4, 8}));
        }
        if (l["name"] == "pred") CHECK(l["distribution"]["tile"] == nlohmann::json::array({4, 2, 4, 8}));
    }
    CHECK(seen_label);
    const Result table = run_dsl("check samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched");
    CHECK(table.out.find("[4, 4, 8]") != std::string::npos);
}

TEST_CASE("check reports ResNet-50's figures", "[cli]") {
    const Result r = run_dsl("check stdlib/resnet50.net --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["totals"]["params"] == 25557032);
    const double gmacs = j["totals"]["macs"].get<double>() / 1e9;
    CHECK(gmacs == Approx(4.09).epsilon(0.01));
    const Result table = run_dsl("check stdlib/resnet50.net");
    CHECK(table.out.find("25,557,032") != std::string::npos);
}

TEST_CASE("print gives text that prints the same again", "[cli]") {
    for (const std::string file : {"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_4.sched"}) {
        const Result first = run_dsl("print " + file);
        REQUIRE(first.exit_code == 0);
        const fs::path copy = fs::temp_directory_path() /
                              ("dsl_print_" + std::to_string(::getpid()) + fs::path(file).extension().string());
        std::ofstream(copy) << first.out;
        const Result second = run_dsl("print " + copy.string());
        fs::remove(copy);
        CHECK(second.exit_code == 0);
        CHECK(second.out == first.out);
        CHECK(nlohmann::json::parse(run_dsl("print --json " + file).out).is_object());
    }
}

TEST_CASE("explain predicts every layer's time, the step and the memory", "[cli][model]") {
    const Result table = run_dsl("explain samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched");
    INFO(table.err);
    REQUIRE(table.exit_code == 0);
    for (const char* text : {"block1.1.conv", "N=1 H=2 W=1", "ms predicted", "memory", "allreduce"})
        CHECK(table.out.find(text) != std::string::npos);
    const Result json = run_dsl("explain samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --json");
    REQUIRE(json.exit_code == 0);
    const auto j = nlohmann::json::parse(json.out);
    CHECK(j["procs"] == 2);
    CHECK(j["layers"].size() == 21);  // every layer but the label
    CHECK(j["seconds"]["step"].get<double>() > 0.0);
    double halo = 0.0;
    for (const auto& l : j["layers"]) halo += l["halo_bytes"].get<double>();
    CHECK(halo > 0.0);  // rows split in two exchange halos
    // Errors in the schedule are reported as dsl check reports them.
    const Result bad = run_dsl("explain samples/mesh_tiny.net tests/diag/fail_sched_product.sched");
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("fail_sched_product.sched:3:1: error:") != std::string::npos);
}

TEST_CASE("explain costs sigmoids: their kernels forward and backward, on their tiles", "[cli][model]") {
    const Result r = run_dsl("explain tests/dist/sigmoid.net tests/dist/sigmoid_hybrid_4.sched --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    int sigmoids = 0;
    for (const auto& l : j["layers"]) {
        if (l["kind"] != "sigmoid") continue;
        INFO(l["name"]);
        ++sigmoids;
        CHECK(l["seconds"]["forward"].get<double>() > 0.0);
        CHECK(l["seconds"]["backward_data"].get<double>() > 0.0);
        CHECK(l["memory_bytes"].get<double>() > 0.0);
    }
    CHECK(sigmoids == 3);
    const Result checked = run_dsl("check tests/dist/sigmoid.net --json");
    REQUIRE(checked.exit_code == 0);
    for (const auto& l : nlohmann::json::parse(checked.out)["layers"])
        if (l["name"] == "r1") CHECK(l["flops"].get<double>() == 4.0 * 8 * 12 * 9);  // 4 per element
}

TEST_CASE("schedule fills a partial schedule, keeping its fixed fields, into a file check accepts", "[cli][model]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_schedule_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string out = (dir / "filled.sched").string();
    const Result r = run_dsl("schedule samples/mesh_tiny.net samples/mesh_tiny_partial_4.sched -o " + out);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("ms per step predicted") != std::string::npos);
    const Result check = run_dsl("check samples/mesh_tiny.net " + out + " --json");
    INFO(check.err);
    REQUIRE(check.exit_code == 0);
    const auto j = nlohmann::json::parse(check.out);
    CHECK(j["schedule"]["complete"] == true);
    CHECK(j["schedule"]["procs"] == 4);
    for (const auto& l : j["layers"]) {
        const std::string name = l["name"];
        if (name.rfind("block1.", 0) == 0) {
            CHECK(l["distribution"]["split"] == nlohmann::json({{"N", 1}, {"H", 4}, {"W", 1}}));
            if (l["kind"] == "conv") CHECK(l["distribution"]["overlap"] == true);
        }
    }
    // Its own output may be replaced; a file of the user's may not.
    CHECK(run_dsl("schedule samples/mesh_tiny.net --procs 2 -o " + out).exit_code == 0);
    const fs::path mine = dir / "mine.sched";
    std::ofstream(mine) << "procs = 2\n";
    const Result refused = run_dsl("schedule samples/mesh_tiny.net --procs 2 -o " + mine.string());
    CHECK(refused.exit_code == 1);
    CHECK(refused.err.find("left as it is") != std::string::npos);
    CHECK(read(mine) == "procs = 2\n");
    // Without a process count: a usage error.
    CHECK(run_dsl("schedule samples/mesh_tiny.net").exit_code == 2);
    fs::remove_all(dir);
}

TEST_CASE("schedule says how much memory the smallest schedule needs when none fits", "[cli][model]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_small_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path platform = dir / "small.platform";
    std::ofstream(platform) << "device = cpu\nprocs_per_node = 2\nnodes = 1\nmemory = 512 KiB\nflops = 10 GFLOP/s\n"
                               "memory_bandwidth = 5 GB/s\nlatency = 1 us\nbandwidth = 1 GB/s\n";
    const Result r = run_dsl("schedule samples/mesh_tiny.net --procs 2 --batch 2 --platform " + platform.string());
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("no schedule of 2 processes fits in 0.5 MiB per process: the smallest needs") !=
          std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("compare shows schedules side by side, and measures them with --measure", "[cli][model][mpi]") {
    const Result table =
        run_dsl("compare samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched samples/mesh_tiny_spatial_w_2.sched");
    INFO(table.err);
    REQUIRE(table.exit_code == 0);
    CHECK(table.out.find("mesh_tiny_sample_2") != std::string::npos);
    CHECK(table.out.find("mesh_tiny_spatial_w_2") != std::string::npos);
    CHECK(table.out.find("step, predicted") != std::string::npos);
    const Result measured = run_dsl(
        "compare samples/mesh_tiny.net samples/mesh_tiny_serial_1.sched "
        "samples/mesh_tiny_spatial_h_2.sched --measure --steps 4 --json");
    INFO(measured.err);
    REQUIRE(measured.exit_code == 0);
    const auto j = nlohmann::json::parse(measured.out);
    REQUIRE(j["schedules"].size() == 2);
    for (const auto& s : j["schedules"]) {
        CHECK(s["measured_step_seconds"].get<double>() > 0.0);
        CHECK(std::isfinite(s["model_error"].get<double>()));
    }
}

TEST_CASE("calibrate measures kernels and communication into a platform the model reads", "[cli][model][mpi]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_calibrate_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string out = (dir / "here.platform").string();
    const Result r = run_dsl(
        "calibrate samples/mesh_tiny.net --procs 1 2 --batch 2 --reps 1 --warmup 0 --max-message 4096 -o " + out);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const std::string text = read(out);
    CHECK(text.find("time conv.forward ") != std::string::npos);
    CHECK(text.find("time conv.backward_weights ") != std::string::npos);
    CHECK(text.find("time batchnorm.forward ") != std::string::npos);
    CHECK(text.find("time sendrecv bytes=4096 ") != std::string::npos);  // the largest size asked for
    CHECK(text.find("time allreduce bytes=8 procs=2 ") != std::string::npos);
    CHECK(run_dsl("print " + out).exit_code == 0);  // it loads
    const Result explain =
        run_dsl("explain samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --batch 2 --platform " + out);
    CHECK(explain.exit_code == 0);
    // A file that is not a platform is never overwritten.
    const fs::path notes = dir / "notes.txt";
    std::ofstream(notes) << "my notes\n";
    const Result refused = run_dsl("calibrate samples/mesh_tiny.net --procs 1 -o " + notes.string());
    CHECK(refused.exit_code == 1);
    CHECK(read(notes) == "my notes\n");
    fs::remove_all(dir);
}

namespace {

std::vector<fs::path> platform_files(const fs::path& dir) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".platform") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("local is this machine: measured on first use, kept in a cache by machine, reused, refreshed by calibrate",
          "[cli][model][mpi][local]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_local_" + std::to_string(::getpid()));
    const fs::path cache = dir / "cache";
    fs::remove_all(dir);
    fs::create_directories(dir);
    // A network with few kernels, so that measuring it takes seconds.
    const std::string net = (dir / "small.net").string();
    std::ofstream(net) << "input x [N, 4, 16, 16]\nlabel y [N, 16, 16]\nc = conv(2, kernel = 3, pad = 1)\n"
                          "loss = pixel_cross_entropy from c, y\n";
    const std::string env = "env -u DSL_LOCAL_PLATFORM DSL_CACHE_DIR='" + cache.string() + "'";
    const std::string schedule = "schedule " + net + " --batch 2 --procs ";

    // The first command measures what it needs, says so on stderr, and keeps it in the cache.
    const Result first = run_dsl(schedule + "2", env);
    INFO(first.err);
    REQUIRE(first.exit_code == 0);
    CHECK(first.err.find("measuring this machine for " + net + " on 2 processes, mini-batch 2") != std::string::npos);
    CHECK(first.err.find("timing exchanges and allreduces on 2 processes") != std::string::npos);
    const auto files = platform_files(cache);
    REQUIRE(files.size() == 1);
    const fs::path file = files[0];
    CHECK(file.filename().string().rfind("local-", 0) == 0);
    CHECK(first.err.find("kept in " + file.string()) != std::string::npos);
    const std::string text = read(file);
    for (const char* part : {"# This machine: ", " cores, ", "# Measured for ", "time conv.forward ",
                             "time allreduce bytes=8 procs=2 ", "time sendrecv bytes=", "time factor.conv.forward "})
        CHECK(text.find(part) != std::string::npos);
    CHECK(first.out.find("platform = local") != std::string::npos);

    // The second reuses them: nothing measured, the same prediction, the file as it was.
    const Result second = run_dsl(schedule + "2", env);
    CHECK(second.exit_code == 0);
    CHECK(second.err.find("measuring") == std::string::npos);
    CHECK(second.out == first.out);
    CHECK(read(file) == text);

    // explain says where its figures come from.
    const std::string sched = (dir / "two.sched").string();
    std::ofstream(sched) << first.out;
    const Result explain = run_dsl("explain " + net + " " + sched + " --json", env);
    INFO(explain.err);
    REQUIRE(explain.exit_code == 0);
    CHECK(explain.err.find("measuring") == std::string::npos);
    const auto j = nlohmann::json::parse(explain.out);
    CHECK(j["platform"] == file.string());
    CHECK(j["platform_figures"].get<std::string>().rfind("measured on this machine (", 0) == 0);

    // Another process count: only what it adds is measured, into the same file.
    const Result one = run_dsl(schedule + "1", env);
    CHECK(one.exit_code == 0);
    CHECK(one.err.find("measuring this machine for " + net + " on 1 process, mini-batch 2") != std::string::npos);
    CHECK(platform_files(cache) == files);
    const std::string more = read(file);
    CHECK(more.find("on 1 process, mini-batch 2") != std::string::npos);
    CHECK(more.find("time step.update params=74 procs=1 ") != std::string::npos);
    CHECK(more.find("time step.update params=74 procs=2 ") != std::string::npos);  // kept

    // A cache that has only another key's file (another machine, or dsl version) measures again beside it.
    const fs::path other = cache / "local-0000000000000000.platform";
    fs::rename(file, other);
    const std::string others = read(other);
    const Result again = run_dsl(schedule + "2", env);
    CHECK(again.exit_code == 0);
    CHECK(again.err.find("measuring this machine") != std::string::npos);
    CHECK(fs::exists(file));
    CHECK(read(other) == others);

    // A damaged cache file is measured again, not an error.
    std::ofstream(file) << "not a platform\n";
    const Result damaged = run_dsl(schedule + "2", env);
    CHECK(damaged.exit_code == 0);
    CHECK(damaged.err.find("ignoring the damaged cache file") != std::string::npos);
    CHECK(damaged.err.find("measuring this machine") != std::string::npos);

    // calibrate without -o measures this machine's local again, keeping what it does not measure.
    const Result refresh = run_dsl("calibrate " + net + " --procs 2 --batch 2 --reps 1 --warmup 0", env);
    INFO(refresh.err);
    CHECK(refresh.exit_code == 0);
    CHECK(refresh.out.find("wrote " + file.string()) != std::string::npos);
    const std::string refreshed = read(file);
    CHECK(refreshed.find("# Calibrated by 'dsl calibrate " + net + " --procs 2 --batch 2'") != std::string::npos);
    CHECK(refreshed.find("# Measured for ") != std::string::npos);
    CHECK(run_dsl(schedule + "2", env).err.find("measuring") == std::string::npos);

    // Counts this machine cannot run are not measured (100000 processes would never start): the model's
    // analytic figures answer for them, at once.
    const std::string many = read(file);
    const Result huge = run_dsl(schedule + "100000", env);
    INFO(huge.err);
    CHECK(huge.err.find("for 100000 the model uses its analytic figures") != std::string::npos);
    CHECK(huge.err.find("measuring") == std::string::npos);
    CHECK(read(file) == many);
    fs::remove_all(dir);
}

TEST_CASE("explain says where its figures come from", "[cli][model]") {
    const std::string args = "explain samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched";
    const Result fixture = run_dsl(args);
    INFO(fixture.err);
    CHECK(fixture.out.find("figures: the file ") != std::string::npos);
    CHECK(fixture.out.find("local_epyc_2core.platform ($DSL_LOCAL_PLATFORM)") != std::string::npos);
    const Result lassen = run_dsl(args + " --platform lassen");
    CHECK(lassen.out.find("figures: the published figures of the stdlib platform 'lassen'") != std::string::npos);
}

TEST_CASE("run --auto-schedule trains under the schedule the auto-scheduler chose", "[cli][model][mpi]") {
    const Result r = run_dsl("run samples/mesh_tiny.net --auto-schedule --procs 2 --batch 4 --steps 2");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("auto-schedule for 2 processes") != std::string::npos);
    CHECK(r.out.find("step     2  loss") != std::string::npos);
    // A partial schedule without --auto-schedule: the run says how to fill it.
    const Result open = run_dsl("run samples/mesh_tiny.net samples/mesh_tiny_partial_4.sched --steps 1");
    CHECK(open.exit_code == 2);
    CHECK(open.err.find("--auto-schedule") != std::string::npos);
}

namespace {

std::vector<double> logged_losses(const fs::path& log) {
    std::vector<double> out;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    return out;
}

}  // namespace

TEST_CASE("run trains, logs every step, and resumes exactly from a checkpoint", "[cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_run_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string d = dir.string();
    const std::string common = "run samples/mesh_tiny.net --batch 2 --seed 3 ";

    const Result whole = run_dsl(common + "--steps 4 --log " + d + "/whole.jsonl");
    INFO(whole.err);
    REQUIRE(whole.exit_code == 0);
    CHECK(whole.out.find("step     4  loss") != std::string::npos);
    CHECK(whole.out.find("samples/s") != std::string::npos);
    const auto losses = logged_losses(dir / "whole.jsonl");
    REQUIRE(losses.size() == 4);

    REQUIRE(run_dsl(common + "--steps 2 --save " + d + "/ckpt").exit_code == 0);
    CHECK(fs::exists(dir / "ckpt" / "manifest.json"));
    CHECK(fs::exists(dir / "ckpt" / "block1.0.conv.weight.npy"));
    const Result resumed = run_dsl(common + "--steps 2 --load " + d + "/ckpt --log " + d + "/resumed.jsonl");
    INFO(resumed.err);
    REQUIRE(resumed.exit_code == 0);
    const auto after = logged_losses(dir / "resumed.jsonl");
    REQUIRE(after.size() == 2);
    CHECK(after[0] == losses[2]);
    CHECK(after[1] == losses[3]);

    // A log never replaces a file that is not one of ours.
    std::ofstream(dir / "notes.txt") << "my notes\n";
    const Result refused = run_dsl(common + "--steps 1 --log " + d + "/notes.txt");
    CHECK(refused.exit_code == 1);
    CHECK(read(dir / "notes.txt") == "my notes\n");
    fs::remove_all(dir);
}

TEST_CASE("run trains several losses, logging each by name beside their sum", "[cli][run]") {
    // heads.net: logits that a loss and other layers read, and two heads each with its loss.
    const fs::path dir = fs::temp_directory_path() / ("dsl_heads_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const Result r = run_dsl("run tests/dist/heads.net --batch 2 --steps 2 --log " + (dir / "log.jsonl").string());
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("step     2  loss ") != std::string::npos);
    CHECK(r.out.find(" (seg ") != std::string::npos);
    CHECK(r.out.find(", cls ") != std::string::npos);
    CHECK(r.out.find(", aux ") != std::string::npos);
    std::ifstream in(dir / "log.jsonl");
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) {
        const auto j = nlohmann::json::parse(line);
        const auto& each = j["losses"];
        REQUIRE(each.size() == 3);
        const double sum = each["seg"].get<double>() + each["cls"].get<double>() + each["aux"].get<double>();
        CHECK(j["loss"].get<double>() == Approx(sum).epsilon(1e-12));
    }
    CHECK(lines == 2);
    // The model costs such a network, and the auto-scheduler plans it.
    const Result explained = run_dsl("explain tests/dist/heads.net tests/dist/heads_hybrid_4.sched");
    INFO(explained.err);
    CHECK(explained.exit_code == 0);
    CHECK(explained.out.find("predicted") != std::string::npos);
    const Result scheduled = run_dsl("schedule tests/dist/heads.net --procs 4");
    INFO(scheduled.err);
    CHECK(scheduled.exit_code == 0);
    CHECK(scheduled.out.find("procs = 4") != std::string::npos);
    // One loss: the step line is as before, and the log names it.
    const Result one = run_dsl("run samples/mesh_tiny.net --batch 2 --steps 1 --log " + (dir / "one.jsonl").string());
    REQUIRE(one.exit_code == 0);
    CHECK(one.out.find(" (loss ") == std::string::npos);
    CHECK(nlohmann::json::parse(read(dir / "one.jsonl"))["losses"].count("loss") == 1);
    fs::remove_all(dir);
}

TEST_CASE("run refuses an output it could not write before anything is trained", "[cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_outputs_" + std::to_string(::getpid()));
    fs::create_directories(dir / "mine");
    std::ofstream(dir / "mine" / "notes.txt") << "my notes\n";
    std::ofstream(dir / "notes.txt") << "my notes\n";
    std::ofstream(dir / "file") << "a file\n";
    const std::string d = dir.string();
    for (const std::string& args : {"--save " + d + "/mine", "--save " + d + "/file/ckpt", "--log " + d + "/notes.txt",
                                    "--log " + d + "/file/log.jsonl", "--log " + d + "/nowhere/log.jsonl",
                                    "--save " + d + "/ckpt --log " + d + "/ckpt/log.jsonl",
                                    "samples/mesh_tiny_sample_2.sched --save " + d + "/mine"}) {
        const Result r = run_dsl("run samples/mesh_tiny.net --steps 1 " + args);
        INFO(args << "\n" << r.out << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.rfind("error: ", 0) == 0);
        CHECK(r.err.find("error:", 1) == std::string::npos);  // once, with two processes too
        CHECK(r.out.find("training") == std::string::npos);
    }
    CHECK(read(dir / "mine" / "notes.txt") == "my notes\n");
    CHECK(read(dir / "notes.txt") == "my notes\n");
    CHECK_FALSE(fs::exists(dir / "ckpt"));
    // Before the setup, too: the log is refused before a checkpoint is looked for.
    const Result early =
        run_dsl("run samples/mesh_tiny.net --steps 1 --load " + d + "/nowhere --log " + d + "/notes.txt");
    CHECK(early.exit_code == 1);
    CHECK(early.err.find("--log") != std::string::npos);
    // --save-every saves into --save's folder.
    const Result every = run_dsl("run samples/mesh_tiny.net --steps 1 --save-every 1");
    CHECK(every.exit_code == 2);
    CHECK(every.err.find("--save") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("schedule and calibrate refuse an -o they could not write before they search or measure", "[cli]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_o_" + std::to_string(::getpid()));
    fs::create_directories(dir / "folder");
    std::ofstream(dir / "file") << "a file\n";
    for (const std::string o : {"nowhere/x", "file/x", "folder"}) {
        const std::string path = (dir / o).string();
        const Result s = run_dsl("schedule samples/mesh_tiny.net --procs 2 -o " + path);
        INFO(o << "\n" << s.err);
        CHECK(s.exit_code == 1);
        CHECK(s.err.find("error: -o") != std::string::npos);
        CHECK(s.err.find("searched") == std::string::npos);
        const Result c = run_dsl("calibrate samples/mesh_tiny.net --procs 1 -o " + path);
        INFO(c.err);
        CHECK(c.exit_code == 1);
        CHECK(c.err.find("error: -o") != std::string::npos);
        CHECK(c.err.find("timing") == std::string::npos);
    }
    CHECK(read(dir / "file") == "a file\n");
    fs::remove_all(dir);
}

TEST_CASE("run --save never removes a folder of the user's, whatever its name or manifest", "[cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_mine_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    // Named like the temporary folders of a save by a process that is gone.
    for (const char* name : {".ck.tmp-999999", ".ck.old-999999"}) {
        fs::create_directories(dir / name);
        std::ofstream(dir / name / "mine.txt") << "mine\n";
    }
    Result r = run_dsl("run samples/mesh_tiny.net --steps 1 --save " + (dir / "ck").string());
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(read(dir / ".ck.tmp-999999" / "mine.txt") == "mine\n");
    CHECK(read(dir / ".ck.old-999999" / "mine.txt") == "mine\n");
    // A manifest of dsl's format that lists a file of the user's.
    fs::create_directories(dir / "forged");
    std::ofstream(dir / "forged" / "manifest.json")
        << R"({"format": "dsl-checkpoint", "version": 1, "tensors": [{"name": "x", "file": "data.csv", "shape": [1]}]})";
    std::ofstream(dir / "forged" / "data.csv") << "a,b\n";
    r = run_dsl("run samples/mesh_tiny.net --steps 1 --save " + (dir / "forged").string());
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("not a dsl checkpoint") != std::string::npos);
    CHECK(r.out.find("step") == std::string::npos);
    CHECK(read(dir / "forged" / "data.csv") == "a,b\n");
    fs::remove_all(dir);
}

TEST_CASE("run refuses a checkpoint whose step would count samples beyond 2^63-1", "[cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_step_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string ck = (dir / "ck").string();
    REQUIRE(run_dsl("run samples/mesh_tiny.net --steps 1 --batch 4 --save " + ck).exit_code == 0);
    const auto manifest = nlohmann::json::parse(read(dir / "ck" / "manifest.json"));
    auto with_step = [&](const nlohmann::json& step) {
        auto m = manifest;
        m["meta"]["step"] = step;
        std::ofstream(dir / "ck" / "manifest.json", std::ios::trunc) << m.dump();
        return run_dsl("run samples/mesh_tiny.net --steps 10 --batch 4 --load " + ck);
    };
    for (const nlohmann::json& step : {nlohmann::json(std::numeric_limits<std::int64_t>::max()),
                                       nlohmann::json(std::int64_t{1} << 61), nlohmann::json(std::uint64_t{1} << 63),
                                       nlohmann::json(std::numeric_limits<std::uint64_t>::max()), nlohmann::json(-1)}) {
        const Result r = with_step(step);
        INFO(step.dump() << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(step.get<std::int64_t>() >= 0 ? "beyond 2^63-1" : "no step") != std::string::npos);
        CHECK(r.out.find("step ") == std::string::npos);
    }
    // A large step that fits trains on.
    const Result r = with_step(std::int64_t{1} << 40);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("step 1099511627786  loss") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("run --save-every: a run killed after a checkpoint resumes from it exactly", "[cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_every_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string d = dir.string(), common = "run samples/mesh_tiny.net --batch 2 --seed 3 ";
    // A long run, killed as a job's time limit would kill it, once it has saved a checkpoint.
    const std::string cmd = "cd '" + source_dir() + "' && NO_COLOR=1 exec '" + dsl_binary() + "' " + common +
                            "--steps 100000 --save-every 3 --save " + d + "/ck >" + d + "/out 2>&1";
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    REQUIRE(pid > 0);
    for (int i = 0; i < 24000 && !fs::exists(dir / "ck" / "manifest.json"); ++i)  // 2 minutes at most
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    INFO(read(dir / "out"));
    REQUIRE(WIFSIGNALED(status));
    std::string error;
    const auto saved = dsl::backend::load_checkpoint(d + "/ck", error);
    INFO(error);
    REQUIRE(saved);
    const std::int64_t step = saved->meta["step"].get<std::int64_t>();
    CHECK(step >= 3);
    CHECK(step % 3 == 0);

    // The same run uninterrupted, and the killed one resumed (saving over the checkpoint it loaded).
    const std::string steps = std::to_string(step + 3);
    Result r = run_dsl(common + "--steps " + steps + " --log " + d + "/whole.jsonl --save " + d + "/whole");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + "--steps 3 --save-every 3 --load " + d + "/ck --log " + d + "/rest.jsonl --save " + d + "/ck");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("saved checkpoint to " + d + "/ck at step " + steps) != std::string::npos);
    const auto whole = logged_losses(dir / "whole.jsonl"), rest = logged_losses(dir / "rest.jsonl");
    REQUIRE(rest.size() == 3);
    REQUIRE(whole.size() == static_cast<std::size_t>(step + 3));
    for (std::size_t i = 0; i < 3; ++i) CHECK(rest[i] == whole[static_cast<std::size_t>(step) + i]);
    const auto expected = dsl::backend::load_checkpoint(d + "/whole", error),
               got = dsl::backend::load_checkpoint(d + "/ck", error);
    REQUIRE(expected);
    REQUIRE(got);
    CHECK(got->meta == expected->meta);
    REQUIRE(got->tensors.size() == expected->tensors.size());
    for (const auto& t : expected->tensors) {
        INFO(t.name);
        REQUIRE(got->find(t.name));
        CHECK(got->find(t.name)->data == t.data);
    }
    // Whatever the killed save left beside the checkpoint is gone.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"ck", "out", "rest.jsonl", "whole", "whole.jsonl"});
    fs::remove_all(dir);
}

TEST_CASE("run --save-every on several processes resumes exactly", "[cli][run][mpi]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_every_mpi_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string d = dir.string(),
                      common = "run samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --batch 2 --seed 3 ";
    Result r = run_dsl(common + "--steps 6 --save-every 3 --save " + d + "/whole --log " + d + "/whole.jsonl");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    for (const char* step : {"3", "6"}) {
        const std::string line = "saved checkpoint to " + d + "/whole at step " + step + "\n";
        const auto at = r.out.find(line);
        CHECK(at != std::string::npos);
        CHECK(r.out.find(line, at + 1) == std::string::npos);
    }
    r = run_dsl(common + "--steps 3 --save-every 3 --save " + d + "/ck");
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + "--steps 3 --save-every 2 --load " + d + "/ck --save " + d + "/ck --log " + d + "/rest.jsonl");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("at step 4\n") != std::string::npos);  // every 2nd step, counted from the first
    const auto whole = logged_losses(dir / "whole.jsonl"), rest = logged_losses(dir / "rest.jsonl");
    REQUIRE(whole.size() == 6);
    REQUIRE(rest.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) CHECK(rest[i] == whole[3 + i]);
    std::string error;
    const auto expected = dsl::backend::load_checkpoint(d + "/whole", error),
               got = dsl::backend::load_checkpoint(d + "/ck", error);
    REQUIRE(expected);
    REQUIRE(got);
    CHECK(got->meta["step"] == 6);
    for (const auto& t : expected->tensors) {
        INFO(t.name);
        REQUIRE(got->find(t.name));
        CHECK(got->find(t.name)->data == t.data);
    }
    fs::remove_all(dir);
}

TEST_CASE("run checks that the schedule fits the run before starting processes", "[cli][run]") {
    struct Case {
        std::string args, message;
    };
    const Case c = GENERATE(
        Case{"samples/mesh_tiny_hybrid_4.sched --procs 2",
             "samples/mesh_tiny_hybrid_4.sched:4:9: error: --procs 2 differs from the schedule's procs = 4"},
        Case{"--procs 2", "--procs 2 needs a schedule"},
        Case{"samples/mesh_tiny_partial_4.sched", "the schedule leaves the split of layer 'block2.0.conv' open"},
        Case{"samples/mesh_tiny_sample_4.sched --batch 2",
             "split N=4 H=1 W=1 does not fit layer 'block1.0.conv': the mini-batch has only 2 samples"});
    const Result r = run_dsl("run samples/mesh_tiny.net " + c.args + " --steps 1");
    INFO(r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.out.find("step") == std::string::npos);
}

TEST_CASE("a --procs that the schedule's procs contradicts is an error at that line, for every verb", "[cli]") {
    for (const std::string verb : {"run", "explain", "schedule"}) {
        const Result r = run_dsl(verb + " samples/mesh_tiny.net samples/mesh_tiny_hybrid_4.sched --procs 2");
        INFO(verb << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.rfind(
                  "samples/mesh_tiny_hybrid_4.sched:4:9: error: --procs 2 differs from the schedule's procs = 4", 0) ==
              0);
        CHECK(r.out.empty());
    }
}

TEST_CASE("a network without a loss is refused by run, at its output, and check warns", "[cli][run]") {
    const Result run = run_dsl("run tests/diag/warn_no_loss.net --steps 1");
    INFO(run.err);
    CHECK(run.exit_code == 1);
    CHECK(run.err.find("tests/diag/warn_no_loss.net:12:1: error: the network has no loss layer: there is nothing "
                       "to train") != std::string::npos);
    CHECK(run.err.find("add a loss such as 'loss = pixel_cross_entropy from head.relu, y'") != std::string::npos);
    CHECK(run.out.find("loss") == std::string::npos);
    const Result check = run_dsl("check tests/diag/warn_no_loss.net");
    CHECK(check.exit_code == 0);
    CHECK(check.err.find("tests/diag/warn_no_loss.net:12:1: warning: the network has no loss layer") !=
          std::string::npos);
}

TEST_CASE("check and run refuse the same mini-batch, at the schedule's line", "[cli][run]") {
    const std::string message =
        "samples/mesh_tiny_sample_4.sched:5:1: error: split N=4 H=1 W=1 does not fit layer 'block1.0.conv': the "
        "mini-batch has only 2 samples";
    for (const std::string verb : {"check", "run", "explain"}) {
        const Result r = run_dsl(verb + " samples/mesh_tiny.net samples/mesh_tiny_sample_4.sched --batch 2");
        INFO(verb << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(message) != std::string::npos);
        CHECK(r.err.find("note: the mini-batch is set by --batch 2") != std::string::npos);
        CHECK(r.out.empty());
    }
}

TEST_CASE("a schedule's process count that no split can run is an error at its line", "[cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_procs_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "many.sched") << "procs = 100000\nbatch = 4\n";
    std::ofstream(dir / "open.sched") << "default N=2\n";
    const std::string many = (dir / "many.sched").string(), open = (dir / "open.sched").string();
    for (const std::string& args : {"check samples/mesh_tiny.net " + many, "explain samples/mesh_tiny.net " + many,
                                    "run samples/mesh_tiny.net " + many + " --auto-schedule --steps 1"}) {
        const Result r = run_dsl(args);
        INFO(args << "\n" << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(many + ":1:9: error: no split of 100000 processes fits layer 'block1.0.conv' with a "
                                "mini-batch of 4") != std::string::npos);
    }
    const Result r = run_dsl("run samples/mesh_tiny.net " + open + " --procs 4 --steps 1");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find(open + ":1:1: error: split N=2 H=1 W=1 uses 2 processes, but the run has 4 (--procs 4)") !=
          std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("a schedule that splits only the samples needs no overlap", "[cli][run][mpi]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_sample_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "n2.sched") << "procs = 2\nbatch = 4\ndefault N=2\n";
    const Result r = run_dsl("run samples/mesh_tiny.net " + (dir / "n2.sched").string() + " --steps 1");
    fs::remove_all(dir);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("step     1") != std::string::npos);
}

TEST_CASE("without a GPU, a GPU run or calibration says why and trains nothing", "[cli][run]") {
    std::string why;
    if (dsl::backend::gpu_devices(&why) > 0) return;  // tests/gpu trains there
    for (const std::string args : {"run samples/mesh_tiny.net --device gpu --steps 1",
                                   "run samples/mesh_tiny.net --auto-schedule --platform dgx_h100 --steps 1",
                                   "run samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --device gpu --steps 1",
                                   "calibrate samples/mesh_tiny.net --device gpu -o /nonexistent/x.platform"}) {
        const Result r = run_dsl(args);
        INFO(args << "\n" << r.out << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(why) != std::string::npos);
        CHECK(r.out.find("loss") == std::string::npos);  // trained nothing ("per step" is a prediction's)
    }
    // The CPU stays the default with a CPU platform, and --device cpu overrides a GPU one.
    const Result r = run_dsl("run samples/mesh_tiny.net --auto-schedule --platform dgx_h100 --device cpu --steps 1");
    INFO(r.err);
    CHECK(r.exit_code == 0);
}

TEST_CASE("run under mpirun with the wrong process count says so once", "[cli][run][mpi]") {
    const char* root = ::geteuid() == 0 ? "--allow-run-as-root " : "";
    const fs::path dir = fs::temp_directory_path() / ("dsl_np_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string cmd = std::string("cd '" DSL_SOURCE_DIR "' && mpirun -np 3 --oversubscribe ") + root +
                            "'" DSL_BINARY "' run samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --steps 1 >'" +
                            (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
    const int status = std::system(cmd.c_str());
    const std::string err = read(dir / "err");
    fs::remove_all(dir);
    INFO(err);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
    const std::string message = "the run has 3 processes, but the schedule needs 2";
    const auto first = err.find(message);
    CHECK(first != std::string::npos);
    CHECK(err.find(message, first + 1) == std::string::npos);
}

TEST_CASE("every verb has help with an example", "[cli]") {
    for (const std::string verb : {"check", "print", "run", "schedule", "explain", "compare", "calibrate"}) {
        const Result r = run_dsl(verb + " --help");
        INFO(verb);
        CHECK(r.exit_code == 0);
        CHECK(r.out.find("Example:") != std::string::npos);
        CHECK(r.out.find("dsl " + verb) != std::string::npos);
    }
}

TEST_CASE("a failure on one process of a run stops them all and is said once", "[cli][run][mpi]") {
    // Only the first process writes checkpoints: here it cannot, and the others must not wait for it.
    const fs::path dir = fs::temp_directory_path() / ("dsl_fail1_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "file") << "not a folder\n";
    const Result r = run_dsl("run samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --steps 1 --save '" +
                             (dir / "file" / "ckpt").string() + "'");
    fs::remove_all(dir);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    const auto first = r.err.find("error: cannot save to");
    CHECK(first != std::string::npos);
    CHECK(r.err.find("error:", first + 1) == std::string::npos);
    CHECK(r.err.find("mpirun") == std::string::npos);  // no banner from mpirun
}

TEST_CASE("run --profile prints every layer's time, with the waits of several processes", "[cli][mpi]") {
    const Result r = run_dsl("run samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --steps 3 --profile");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const auto table = r.out.find("per-layer time");
    REQUIRE(table != std::string::npos);
    for (const char* layer : {"block1.0.conv", "block3.1.relu", "pred", "(update)", "total"})
        CHECK(r.out.find(layer, table) != std::string::npos);
    // The total line: forward, its wait, backward, its wait; rows split in two wait for their halos.
    std::istringstream total(r.out.substr(r.out.find("\ntotal", table) + 6));
    double f = 0, fw = -1, b = 0, bw = -1;
    total >> f >> fw >> b >> bw;
    CHECK(f > 0.0);
    CHECK(b > 0.0);
    CHECK(fw > 0.0);
    CHECK(fw < f);
    CHECK(bw >= 0.0);
    CHECK(bw < b);
}
