// The `dsl` command end to end: check's table and JSON, print's round trip, the planned verbs, help.
#include "run_dsl.hpp"

#include <dsl/backend/gpu.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
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

TEST_CASE("run checks that the schedule fits the run before starting processes", "[cli][run]") {
    struct Case {
        std::string args, message;
    };
    const Case c = GENERATE(
        Case{"samples/mesh_tiny_hybrid_4.sched --procs 2", "--procs 2 differs from the schedule's procs = 4"},
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
    for (const std::string args :
         {"run samples/mesh_tiny.net --device gpu --steps 1", "run samples/mesh_tiny.net --platform dgx_h100 --steps 1",
          "run samples/mesh_tiny.net samples/mesh_tiny_sample_2.sched --device gpu --steps 1",
          "calibrate samples/mesh_tiny.net --device gpu -o /nonexistent/x.platform"}) {
        const Result r = run_dsl(args);
        INFO(args << "\n" << r.out << r.err);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find(why) != std::string::npos);
        CHECK(r.out.find("step") == std::string::npos);
    }
    // The CPU stays the default with a CPU platform, and --device cpu overrides a GPU one.
    const Result r = run_dsl("run samples/mesh_tiny.net --platform dgx_h100 --device cpu --steps 1");
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
