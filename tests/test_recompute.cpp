// Recomputation (recompute=on in a schedule) changes when values are made, not what they are: real runs of
// `dsl run` with and without it, on one process bitwise (every step's loss and every tensor of the final
// checkpoint), and on 2 to 8 processes within 1e-6, under splits of rows and columns, hybrid, mixed per layer
// with redistributions, with overlap on and off, and on every layer kind.
#include "temp_files.hpp"
#include "train_runs.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

TEST_CASE("recomputation gives one process's losses and weights bitwise", "[recompute]") {
    struct Case {
        const char* net;
        const char* recompute;
        std::int64_t batch;
    };
    // Every layer recomputed (backward makes the whole forward again from the input, then each value lives
    // until its last use), and the usual pattern of keeping only block outputs; every layer kind: conv,
    // batch norm, ReLU, residual adds and pooling (resnet_tiny), group norm, GELU, tanh and dropout
    // (modern.net), sigmoids, several heads and losses, regression, upsampling, transposed convolutions, a
    // U-Net's concatenated skips, volumes, periodic padding and CosmoFlow's dense head.
    const Case c = GENERATE(Case{"samples/mesh_tiny.net", "default recompute=on", 4},
                            Case{"samples/mesh_tiny.net", "layer *.conv recompute=on\nlayer *.bn recompute=on", 4},
                            Case{"samples/resnet_tiny.net", "default recompute=on", 4},
                            Case{"samples/regression_tiny.net", "default recompute=on", 4},
                            Case{"tests/dist/modern.net", "default recompute=on", 4},
                            Case{"tests/dist/heads.net", "default recompute=on", 4},
                            Case{"tests/dist/sigmoid.net", "default recompute=on", 4},
                            Case{"tests/dist/weighted.net", "default recompute=on", 4},
                            Case{"tests/dist/upsample.net", "default recompute=on", 4},
                            Case{"tests/dist/deconv.net", "default recompute=on", 4},
                            Case{"tests/dist/unet.net", "default recompute=on", 2},
                            Case{"tests/dist/unet.net", "layer enc1.* recompute=on\nlayer dec1.* recompute=on", 2},
                            Case{"tests/dist/vol.net", "default recompute=on", 2},
                            Case{"tests/dist/periodic.net", "default recompute=on", 2},
                            Case{"tests/dist/cosmo.net", "default recompute=on", 2});
    CAPTURE(c.net, c.recompute);
    check_same_run(train(c.net, "", c.batch), train(c.net, schedule_with("", c.recompute), c.batch), 0.0);
}

TEST_CASE("recomputation under splits gives the same run within 1e-6", "[recompute][mpi]") {
    struct Case {
        const char* net;
        const char* sched;
        const char* recompute;
        std::int64_t batch;
    };
    // Rows and columns (with and without overlap), hybrid, mixed per layer (a recomputed layer's copies in
    // its readers' splits are made again too), batch norm per tile, group norm and dropout, a U-Net with
    // part of its levels recomputed, a 2x2x2 grid of volumes and periodic halos.
    const Case c =
        GENERATE(Case{"samples/mesh_tiny.net", "samples/mesh_tiny_spatial_hw_4.sched",
                      "layer *.conv recompute=on\nlayer *.bn recompute=on", 4},
                 Case{"samples/mesh_tiny.net", "samples/mesh_tiny_hybrid_4.sched", "default recompute=on", 4},
                 Case{"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_4.sched", "default recompute=on", 4},
                 Case{"samples/resnet_tiny.net", "samples/resnet_tiny_hybrid_4.sched", "default recompute=on", 8},
                 Case{"tests/dist/modern.net", "tests/dist/modern_hw4.sched", "default recompute=on", 4},
                 Case{"tests/dist/heads.net", "tests/dist/heads_hybrid_4.sched", "default recompute=on", 4},
                 Case{"tests/dist/upsample.net", "tests/dist/upsample_mixed_4.sched", "default recompute=on", 4},
                 Case{"tests/dist/deconv.net", "tests/dist/deconv_mixed_4.sched", "default recompute=on", 4},
                 Case{"tests/dist/unet.net", "tests/dist/unet_mixed_4.sched",
                      "layer enc1.* recompute=on\nlayer dec1.* recompute=on\nlayer cat0 recompute=on", 4},
                 Case{"tests/dist/unet.net", "tests/dist/unet_hw4.sched", "default recompute=on", 2},
                 Case{"tests/dist/vol.net", "tests/dist/vol_dhw8.sched", "default recompute=on", 2},
                 Case{"tests/dist/vol.net", "tests/dist/vol_n2_local.sched", "default recompute=on", 2},
                 Case{"tests/dist/periodic.net", "tests/dist/periodic_d2.sched", "default recompute=on", 2});
    CAPTURE(c.net, c.sched, c.recompute);
    check_same_run(train(c.net, c.sched, c.batch), train(c.net, schedule_with(c.sched, c.recompute), c.batch), 1e-6);
}

TEST_CASE("recompute takes on, off or ?, and data and losses ignore it", "[recompute]") {
    const Result bad = run_dsl("check samples/mesh_tiny.net " + schedule_with("", "default recompute=yes"));
    CHECK(bad.exit_code != 0);
    CHECK(bad.err.find("error: 'recompute' must be 'on', 'off' or '?', not 'yes'") != std::string::npos);
    // The plan runs each recomputed layer again before the first backward that reads it.
    const Result plan =
        run_dsl("check samples/mesh_tiny.net " +
                schedule_with("", "layer block1.0.relu recompute=on\nlayer loss recompute=on") + " --dump-after plan");
    INFO(plan.out << plan.err);
    REQUIRE(plan.exit_code == 0);
    const std::string dump = plan.out + plan.err;
    CHECK(dump.find("before backward, forward again: 'block1.0.relu'") != std::string::npos);
    CHECK(dump.find("buffers of gradients and recomputed values:") != std::string::npos);
}

TEST_CASE("eval and predict under recomputation read a loss's input, kept to the end of forward", "[recompute]") {
    // Forward alone frees a recomputed layer's memory after its last reader, but a loss's input stays until
    // forward ends, where eval and predict read it: a schedule that recomputes every layer evaluates and
    // predicts bitwise as one that keeps them. A layer whose memory later layers took is a clear error.
    dsl::test::TempDir dir;
    const std::string ck = dir / "ck", common = " --load " + ck + " --samples 8";
    REQUIRE(run_dsl("run samples/mesh_tiny.net --steps 2 --batch 4 --save " + ck).exit_code == 0);
    const std::string kept = schedule_with("", "batch = 4"),
                      recomputed = schedule_with("", "batch = 4\ndefault recompute=on");
    const Result a = run_dsl("eval samples/mesh_tiny.net " + kept + common + " --json"),
                 b = run_dsl("eval samples/mesh_tiny.net " + recomputed + common + " --json");
    INFO(a.out << a.err << b.out << b.err);
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    CHECK(nlohmann::json::parse(a.out)["losses"] == nlohmann::json::parse(b.out)["losses"]);
    const std::string fa = dir / "a.npy", fb = dir / "b.npy";
    REQUIRE(run_dsl("predict samples/mesh_tiny.net " + kept + common + " --output " + fa).exit_code == 0);
    REQUIRE(run_dsl("predict samples/mesh_tiny.net " + recomputed + common + " --output " + fb).exit_code == 0);
    CHECK(dsl::test::read_bytes(fa) == dsl::test::read_bytes(fb));
    const Result middle = run_dsl("predict samples/mesh_tiny.net " + recomputed + common +
                                  " --layer block1.0.conv --output " + (dir / "c.npy"));
    CHECK(middle.exit_code == 1);
    CHECK(middle.err.find("layer 'block1.0.conv' is recomputed under this schedule") != std::string::npos);
}

TEST_CASE("a layer that only a relu reads is not made again: the relu's backward reads its own output", "[recompute]") {
    // Convolutions and batch norms recomputed, the ReLUs kept: a batch norm's backward reads its input (the
    // convolution's output, made again), and its output only its ReLU read, whose sign the ReLU's keeps.
    const std::string sched = schedule_with("", "default recompute=on\nlayer *.relu recompute=off");
    const Result plan = run_dsl("check samples/mesh_tiny.net " + sched + " --dump-after plan");
    INFO(plan.out << plan.err);
    REQUIRE(plan.exit_code == 0);
    const std::string dump = plan.out + plan.err;
    CHECK(dump.find("before backward, forward again: 'block1.0.conv'\n") != std::string::npos);
    CHECK(dump.find("forward again: 'block1.0.conv' 'block1.0.bn'") == std::string::npos);
    // explain costs no recomputation for them, and the run is the one without recomputation, bitwise.
    const Result explain = run_dsl("explain samples/mesh_tiny.net " + sched + " --json");
    REQUIRE(explain.exit_code == 0);
    for (const auto& layer : nlohmann::json::parse(explain.out)["layers"])
        if (layer["kind"] == "batchnorm") CHECK(layer["seconds"]["recompute"] == 0.0);
    check_same_run(train("samples/mesh_tiny.net", schedule_with("", ""), 4), train("samples/mesh_tiny.net", sched, 4),
                   0.0);
}

TEST_CASE("explain and run say plainly when a schedule does not fit, and by how much", "[recompute]") {
    // mesh2k at a mini-batch of 4 on one process needs about 62 GiB, each of its layers' tiles within what the
    // kernels address and what a process holds (a larger mini-batch is refused for those first, at the layer).
    const std::string sched = schedule_with("", "batch = 4\nplatform = lassen");
    const Result explain = run_dsl("explain stdlib/mesh2k.net " + sched);
    INFO(explain.out << explain.err);
    REQUIRE(explain.exit_code == 0);
    CHECK(explain.out.find("note: this schedule does not fit: it needs ") != std::string::npos);
    CHECK(explain.out.find("more than the 16.0 GiB a process has") != std::string::npos);
    // dsl run refuses it before training, with the same sentence (this machine's memory instead of Lassen's).
    const Result run = run_dsl("run stdlib/mesh2k.net " + sched + " --steps 1");
    INFO(run.out << run.err);
    CHECK(run.exit_code != 0);
    CHECK(run.err.find("this schedule does not fit: it needs ") != std::string::npos);
    CHECK(run.out.find("step") == std::string::npos);
}

TEST_CASE("the auto-scheduler meets a platform's memory first by recomputing layers", "[recompute]") {
    // mesh2k on 2048 Lassen GPUs at a mini-batch of 2048 needs 17.5 GiB per process without recomputation.
    const Result r = run_dsl("schedule stdlib/mesh2k.net --procs 2048 --batch 2048 --platform lassen");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("recompute=on") != std::string::npos);
    const auto at = r.out.find(" GiB per process (of 16.0 GiB)");
    REQUIRE(at != std::string::npos);
    const auto from = r.out.rfind(", ", at);
    CHECK(std::stod(r.out.substr(from + 2, at - from - 2)) <= 16.0);
    // A layer fixed at recompute=off stays so.
    const Result fixed = run_dsl("schedule stdlib/mesh2k.net " +
                                 schedule_with("",
                                               "procs = 2048\nbatch = 2048\nplatform = lassen\n"
                                               "default recompute=off") +
                                 " --procs 2048");
    INFO(fixed.out << fixed.err);
    CHECK(fixed.out.find("recompute=on") == std::string::npos);
}

TEST_CASE("the model's memory saved by recomputation is the measured one", "[recompute]") {
    // bench/mesh_stack_256 at 4 samples, its convolutions and batch norms recomputed: the peak memory a
    // process measures falls by what `dsl explain` predicts, within 25%.
    const auto [measured, model] =
        memory_saved("bench/mesh_stack_256.net", schedule_with("", "batch = 4"),
                     schedule_with("", "batch = 4\nlayer *.conv recompute=on\nlayer *.bn recompute=on"));
    CAPTURE(measured, model);
    CHECK(model > 0);
    CHECK(measured == Approx(model).epsilon(0.25));
}

TEST_CASE("recomputing every layer makes it again in segments, saving at least what keeping the ReLUs saves",
          "[recompute]") {
    // bench/mesh_stack_256 at 4 samples with every layer recompute=on: backward makes the network again a segment
    // at a time from values it keeps (rather than all of forward again from the input at once, which saved
    // almost nothing), and saves at least what recomputing all but the ReLUs saves; the model predicts the
    // saving within 25%, and `dsl explain` names the segments and the values they start from.
    const std::string net = "bench/mesh_stack_256.net", kept = schedule_with("", "batch = 4");
    const std::string every = schedule_with("", "batch = 4\ndefault recompute=on");
    const auto [measured, model] = memory_saved(net, kept, every);
    const auto [measured_relus, model_relus] =
        memory_saved(net, kept, schedule_with("", "batch = 4\ndefault recompute=on\nlayer *.relu recompute=off"));
    CAPTURE(measured, model, measured_relus, model_relus);
    CHECK(model >= model_relus);
    CHECK(measured >= 0.95 * measured_relus);  // the peak's page rounding
    CHECK(measured == Approx(model).epsilon(0.25));
    const Result r = run_dsl("explain " + net + " " + every + " --json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["segments"].size() > 1);
    std::size_t starts = 0;
    for (const auto& l : j["layers"]) starts += l["segment_start"].get<bool>() ? 1 : 0;
    CHECK(starts > 0);
}

TEST_CASE("a layer asked to be recomputed alone is recomputed: keeping it would save nothing", "[recompute]") {
    const Result r =
        run_dsl("explain samples/mesh_tiny.net " + schedule_with("", "batch = 4\nlayer block2.0.conv recompute=on") +
                " --json");
    REQUIRE(r.exit_code == 0);
    const auto j = nlohmann::json::parse(r.out);
    for (const auto& l : j["layers"])
        if (l["name"] == "block2.0.conv") {
            CHECK(l["recomputed"].get<bool>());
            CHECK_FALSE(l["segment_start"].get<bool>());
        }
}
