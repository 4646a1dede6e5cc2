// `dsl run` end to end: training and its log, checkpoints and exact resumption, the refusals made before
// anything is trained, and runs on several processes.
#include "logged_losses.hpp"
#include "run_dsl.hpp"
#include "skip.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/gpu.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

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
    CHECK(read(dir / "ckpt" / "latest") == "step-00000002\n");
    CHECK(fs::exists(dir / "ckpt" / "step-00000002" / "manifest.json"));
    CHECK(fs::exists(dir / "ckpt" / "step-00000002" / "block1.0.conv.weight.npy"));
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
    const fs::path saved = dir / "ck" / "step-00000001" / "manifest.json";
    const auto manifest = nlohmann::json::parse(read(saved));
    auto with_step = [&](const nlohmann::json& step) {
        auto m = manifest;
        m["meta"]["step"] = step;
        std::ofstream(saved, std::ios::trunc) << m.dump();
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
    for (int i = 0; i < 24000 && !fs::exists(dir / "ck" / "latest"); ++i)  // 2 minutes at most
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
    if (dsl::backend::gpu_devices(&why) > 0) return dsl::test::skip("this machine has a GPU (tests/gpu trains on it)");
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

TEST_CASE("run says at each step how long is left, at the pace of the steps so far", "[cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_left_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path log = dir / "steps.jsonl";
    const std::int64_t steps = 6;
    const Result r = run_dsl("run samples/mesh_tiny.net --batch 2 --steps 6 --log " + log.string());
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<std::string> lines;
    std::istringstream out(r.out);
    for (std::string line; std::getline(out, line);)
        if (line.rfind("step ", 0) == 0) lines.push_back(line);
    std::vector<nlohmann::json> records;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == static_cast<std::size_t>(steps));
    REQUIRE(records.size() == lines.size());
    // The time so far (at least the steps' own) over the steps done, times the steps to go: never less than
    // the steps' own pace says, and not much more (the rest is the log's writing).
    double so_far = 0.0;
    for (std::int64_t k = 0; k < steps; ++k) {
        INFO("step " << k + 1 << ": " << lines[static_cast<std::size_t>(k)]);
        const nlohmann::json& j = records[static_cast<std::size_t>(k)];
        REQUIRE(j.contains("seconds_left"));
        const double left = j["seconds_left"].get<double>();
        so_far += j["seconds"].get<double>();
        const double pace = so_far / static_cast<double>(k + 1) * static_cast<double>(steps - k - 1);
        CHECK(left >= pace * (1 - 1e-9));
        CHECK(left <= 2 * pace + 1.0);
        // The line says it as the log has it: "... samples/s  0.4 s left".
        char said[64];
        std::snprintf(said, sizeof said, "  %.1f s left", left);
        if (left < 9.9) CHECK(lines[static_cast<std::size_t>(k)].find(said) != std::string::npos);
        CHECK(lines[static_cast<std::size_t>(k)].size() > 7);
        CHECK(lines[static_cast<std::size_t>(k)].substr(lines[static_cast<std::size_t>(k)].size() - 5) == " left");
    }
    CHECK(records.back()["seconds_left"].get<double>() == 0.0);
    CHECK(lines.back().find("  0.0 s left") != std::string::npos);
    fs::remove_all(dir);
}
