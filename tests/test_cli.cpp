// The `dsl` command end to end: check's table and JSON, print's round trip, explain, schedule, compare,
// calibrate, and help (`dsl run` is test_cli_run.cpp).
#include "run_dsl.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
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
    // Calibration times the sigmoid kernels under their own names, which the model looks up.
    const fs::path dir = fs::temp_directory_path() / ("dsl_sigmoid_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string platform = (dir / "here.platform").string();
    const Result calibrated =
        run_dsl("calibrate tests/dist/sigmoid.net --procs 1 --batch 2 --reps 1 --warmup 0 -o " + platform);
    INFO(calibrated.err);
    REQUIRE(calibrated.exit_code == 0);
    CHECK(calibrated.err.find("cannot time") == std::string::npos);
    const std::string text = read(platform);
    CHECK(text.find("time sigmoid.forward threads=") != std::string::npos);
    CHECK(text.find("time sigmoid.backward threads=") != std::string::npos);
    CHECK(text.find("time factor.sigmoid.forward ") != std::string::npos);
    fs::remove_all(dir);
    const Result checked = run_dsl("check tests/dist/sigmoid.net --json");
    REQUIRE(checked.exit_code == 0);
    for (const auto& l : nlohmann::json::parse(checked.out)["layers"])
        if (l["name"] == "r1") CHECK(l["flops"].get<double>() == 4.0 * 8 * 12 * 9);  // 4 per element
}

TEST_CASE("explain costs upsample and deconv: their kernels, halos and memory on their tiles", "[cli][model]") {
    for (const char* sched : {"tests/dist/upsample_hybrid_4.sched", "tests/dist/deconv_hw4.sched"}) {
        const std::string s = sched;
        const bool up = s.find("upsample") != std::string::npos;
        const std::string net = up ? "tests/dist/upsample.net" : "tests/dist/deconv.net";
        const Result r = run_dsl("explain " + net + " " + s + " --json");
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        int layers = 0, with_halo = 0;
        const auto j = nlohmann::json::parse(r.out);
        for (const auto& l : j["layers"]) {
            if (l["kind"] != (up ? "upsample" : "deconv")) continue;
            INFO(l["name"]);
            ++layers;
            CHECK(l["seconds"]["forward"].get<double>() > 0.0);
            CHECK(l["seconds"]["backward_data"].get<double>() > 0.0);
            if (!up) CHECK(l["seconds"]["backward_weights"].get<double>() > 0.0);
            CHECK(l["memory_bytes"].get<double>() > 0.0);
            if (l["halo_bytes"].get<double>() > 0.0) ++with_halo;
        }
        CHECK(layers == (up ? 3 : 4));
        CHECK(with_halo > 0);  // a spatial split reads halos
    }
    // Calibration times them under their own names, which the model looks up.
    const fs::path dir = fs::temp_directory_path() / ("dsl_resample_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* net : {"tests/dist/upsample.net", "tests/dist/deconv.net"}) {
        const std::string platform = (dir / "p.platform").string();
        const Result cal = run_dsl(std::string("calibrate ") + net + " --procs 1 --batch 1 --reps 1 --warmup 0 -o " +
                                   platform);
        INFO(cal.err);
        REQUIRE(cal.exit_code == 0);
        std::ifstream in(platform);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (std::string(net).find("upsample") != std::string::npos) {
            CHECK(text.find("time upsample.forward ") != std::string::npos);
            CHECK(text.find("time upsample.backward ") != std::string::npos);
        } else {
            CHECK(text.find("time deconv.forward ") != std::string::npos);
            CHECK(text.find("time deconv.backward_weights ") != std::string::npos);
        }
        CHECK(text.find("warning: cannot time") == std::string::npos);
        CHECK(cal.err.find("cannot time") == std::string::npos);
    }
    fs::remove_all(dir);
}

TEST_CASE("explain costs group norm, dropout, tanh and gelu on their tiles", "[cli][model]") {
    const Result r = run_dsl("explain tests/dist/modern.net tests/dist/modern_hybrid_4.sched --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    std::map<std::string, int> seen;
    for (const auto& l : j["layers"]) {
        const std::string kind = l["kind"];
        if (kind != "groupnorm" && kind != "dropout" && kind != "tanh" && kind != "gelu") continue;
        INFO(l["name"]);
        ++seen[kind];
        CHECK(l["seconds"]["forward"].get<double>() > 0.0);
        CHECK(l["seconds"]["backward_data"].get<double>() > 0.0);
        CHECK(l["memory_bytes"].get<double>() > 0.0);
    }
    CHECK(seen == std::map<std::string, int>{{"dropout", 2}, {"gelu", 1}, {"groupnorm", 3}, {"tanh", 1}});
    const Result checked = run_dsl("check tests/dist/modern.net --json");
    REQUIRE(checked.exit_code == 0);
    for (const auto& l : nlohmann::json::parse(checked.out)["layers"]) {
        if (l["name"] == "n1") CHECK(l["params"].get<double>() == 2 * 8);  // a scale and a shift per channel
        if (l["name"] == "e1") CHECK(l["flops"].get<double>() == 6.0 * 6 * 33 * 35);
    }
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

TEST_CASE("the auto-scheduler fills the U-Net's schedule, and explain costs its every layer", "[cli][model]") {
    // A network with long skip connections: the branching case of the longest-path search.
    const fs::path dir = fs::temp_directory_path() / ("dsl_unet_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string out = (dir / "unet64.sched").string();
    const Result r = run_dsl("schedule stdlib/unet2k.net --procs 64 --platform dgx_h100 --batch 16 -o " + out);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    for (const std::string& sched : {out, std::string("stdlib/unet2k_dgx_64.sched")}) {
        CAPTURE(sched);
        const Result e = run_dsl("explain stdlib/unet2k.net " + sched + " --json");
        INFO(e.err);
        REQUIRE(e.exit_code == 0);
        const auto j = nlohmann::json::parse(e.out);
        CHECK(j["procs"] == 64);
        CHECK(j["layers"].size() == 65);  // every layer but the label
        int fused = 0;  // ReLUs that run in the batch norm's pass before them: no forward of their own
        std::string before;
        for (const auto& l : j["layers"]) {
            const std::string kind = l["kind"];
            if (kind == "input") continue;
            INFO(l["name"].get<std::string>() << " " << kind);
            if (kind == "relu" && before == "batchnorm" && l["seconds"]["forward"].get<double>() == 0.0) {
                ++fused;
                CHECK(l["seconds"]["backward_data"].get<double>() > 0.0);
            } else {
                CHECK(l["seconds"]["forward"].get<double>() > 0.0);
            }
            if (kind == "deconv" || kind == "conv")
                CHECK(l["seconds"]["backward_weights"].get<double>() > 0.0);
            before = kind;
        }
        CHECK(fused > 0);
        CHECK(j["memory_bytes"]["total"].get<double>() < j["memory_bytes"]["limit"].get<double>());
    }
    // The 4-process schedule fits a quarter of a sample's activations per process.
    const Result four = run_dsl("check stdlib/unet2k.net stdlib/unet2k_4.sched");
    INFO(four.err);
    CHECK(four.exit_code == 0);
    fs::remove_all(dir);
}

TEST_CASE(
    "explain on lassen: one mesh1k sample fits a V100, one mesh2k sample does not: allreduces across nodes "
    "are hierarchical",
    "[cli][model]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_lassen_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    auto write = [&](const std::string& name, const std::string& text) {
        std::ofstream((dir / name).string()) << text;
        return (dir / name).string();
    };
    const std::string one = write("one.sched", "procs = 1\nbatch = 1\ndefault N=1 overlap=off\n");
    const std::string rows = write("rows.sched", "procs = 2\nbatch = 1\ndefault H=2 overlap=on\n");
    auto memory = [&](const std::string& net, const std::string& sched) {
        const Result r = run_dsl("explain " + net + " " + sched + " --platform lassen --json");
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        const auto j = nlohmann::json::parse(r.out);
        return std::pair{j["memory_bytes"]["total"].get<double>(), j["memory_bytes"]["limit"].get<double>()};
    };
    const auto [mesh1k, limit] = memory("stdlib/mesh1k.net", one);
    CHECK(limit == 16.0 * (1 << 30));
    CHECK(mesh1k < limit);
    CHECK(memory("stdlib/mesh2k.net", one).first > limit);   // spatial parallelism is required
    CHECK(memory("stdlib/mesh2k.net", rows).first < limit);  // and two GPUs suffice
    // 8 processes are two nodes of four: the gradients' allreduce is hierarchical, halos stay within a node.
    const std::string eight = write("eight.sched", "procs = 8\nbatch = 4\ndefault N=4 H=2 overlap=on\n");
    const Result r = run_dsl("explain stdlib/mesh1k.net " + eight + " --platform lassen --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["communication"]["allreduce"].get<std::string>().rfind("hierarchical", 0) == 0);
    CHECK(j["communication"]["halo"].get<std::string>().rfind("within a node", 0) == 0);
    const Result text = run_dsl("explain stdlib/mesh1k.net " + eight + " --platform lassen");
    CHECK(text.out.find("algorithm       hierarchical") != std::string::npos);
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
    // float16 products are a GPU's: on the CPU, --float16 is refused before anything is measured.
    const Result half =
        run_dsl("calibrate samples/mesh_tiny.net --procs 1 --float16 -o " + (dir / "f16.platform").string());
    CHECK(half.exit_code == 1);
    CHECK(half.err.find("error: --float16: only a GPU's convolutions multiply in float16 (--device gpu)") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(dir / "f16.platform"));
    fs::remove_all(dir);
}

TEST_CASE("calibrate times the regression losses' kernel, which explain then reads", "[cli][model]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_calibrate_regression_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string out = (dir / "here.platform").string();
    const Result r =
        run_dsl("calibrate tests/dist/weighted.net --procs 1 --batch 2 --reps 1 --warmup 0 --kernels-only -o " + out);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const std::string text = read(out);
    CHECK(text.find("time regression.forward threads=") != std::string::npos);
    CHECK(text.find(" x=2x2x15x11 = ") != std::string::npos);  // mse and l1 of the pixels
    CHECK(text.find(" x=2x3x1x1 = ") != std::string::npos);    // bce of the vector head
    const Result explain =
        run_dsl("explain tests/dist/weighted.net tests/dist/weighted_h2.sched --batch 2 --platform " + out);
    INFO(explain.err);
    CHECK(explain.exit_code == 0);
    CHECK(explain.out.find("bce") != std::string::npos);
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
    // It says how long it expects to take, before it starts and as each part starts: a figure of the order of
    // what it took (the model's times of what it measures, then corrected by the parts done).
    {
        auto seconds_after = [&](const std::string& text, std::size_t from) {
            const std::size_t at = first.err.find(text, from);
            return at == std::string::npos ? -1.0 : std::atof(first.err.c_str() + at + text.size());
        };
        const double said = seconds_after("; about ", first.err.find("measuring this machine"));
        const double took = seconds_after("measured ", 0) < 0 ? -1.0 : seconds_after(" times in ", 0);
        INFO("said " << said << " s, took " << took << " s");
        CHECK(said > 0.0);
        CHECK(took >= 0.0);
        CHECK(said <= 10 * took + 10);
        CHECK(said >= took / 10 - 1);
        std::size_t parts = 0;
        for (std::size_t at = first.err.find(" left)...\n"); at != std::string::npos;
             at = first.err.find(" left)...\n", at + 1))
            ++parts;
        CHECK(parts == 3);  // kernels, communication, training steps
        CHECK(first.err.find("(about ") != std::string::npos);
    }
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

TEST_CASE("every verb has help with an example", "[cli]") {
    for (const std::string verb : {"check", "print", "run", "schedule", "explain", "compare", "calibrate"}) {
        const Result r = run_dsl(verb + " --help");
        INFO(verb);
        CHECK(r.exit_code == 0);
        CHECK(r.out.find("Example:") != std::string::npos);
        CHECK(r.out.find("dsl " + verb) != std::string::npos);
    }
}
