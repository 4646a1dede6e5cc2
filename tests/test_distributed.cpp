// Distributed training equals one process: real runs of `dsl run` on 2, 3 and 4 processes under mpirun
// (started by dsl itself), compared with the same network trained on one process: the loss of every step
// (from --log) and every tensor of the final checkpoint (from --save), within 1e-4 relative.
#include "temp_files.hpp"
#include "train_runs.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

TEST_CASE("distributed training gives the losses and weights of one process", "[distributed][mpi]") {
    struct Case {
        const char* net;
        const char* sched;
        std::int64_t batch;
        const char* extra = "";  // more of both runs' command lines
    };
    // Sample, rows, columns, both, hybrid, per-layer redistribution both ways (2 and 4 processes), overlap
    // on and off, stride 2, pooling, residual adds, a fully connected head (sample-parallel, and computed
    // whole by a spatial group), uneven tiles of samples, rows and columns, and several losses whose logits
    // other layers read (heads.net), sigmoids on planes and on vectors (sigmoid.net), group norm, tanh,
    // gelu and dropout at an odd size (modern.net: statistics over a sample's spatial group, masks of global
    // coordinates), a regression loss on float targets at odd sizes (regress.net), and weighted regression and
    // cross-entropy losses on pixels and on a vector (weighted.net), stdlib/unet2k.net's structure at a test's
    // size (unet.net: four levels down and up by deconv, concat skips, Adam with a warm-up) in rows, a grid and
    // split per level, and the README's regression sample (group norm, GELU, bilinear upsampling, Adam with a
    // cosine schedule) by samples and rows, and convolutions whose weight gradients each process computes for
    // its share of the filters (filters.net).
    const Case c = GENERATE(Case{"samples/mesh_tiny.net", "samples/mesh_tiny_sample_2.sched", 4},
                            Case{"samples/mesh_tiny.net", "samples/mesh_tiny_spatial_h_2.sched", 4},
                            Case{"samples/mesh_tiny.net", "samples/mesh_tiny_spatial_w_2.sched", 4},
                            Case{"samples/mesh_tiny.net", "samples/mesh_tiny_spatial_hw_4.sched", 4},
                            Case{"samples/mesh_tiny.net", "samples/mesh_tiny_spatial_h_4.sched", 4},
                            Case{"samples/mesh_tiny.net", "samples/mesh_tiny_hybrid_4.sched", 4},
                            Case{"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_2.sched", 4},
                            Case{"samples/mesh_tiny.net", "samples/mesh_tiny_mixed_4.sched", 4},
                            Case{"samples/resnet_tiny.net", "samples/resnet_tiny_hybrid_4.sched", 8},
                            Case{"samples/resnet_tiny.net", "tests/dist/resnet_tiny_spatial_4.sched", 2},
                            Case{"tests/dist/odd.net", "tests/dist/odd_h3.sched", 5},
                            Case{"tests/dist/odd.net", "tests/dist/odd_hybrid_4.sched", 5},
                            Case{"tests/dist/heads.net", "tests/dist/heads_h2.sched", 4},
                            Case{"tests/dist/heads.net", "tests/dist/heads_hw4.sched", 4},
                            Case{"tests/dist/heads.net", "tests/dist/heads_hybrid_4.sched", 4},
                            Case{"tests/dist/sigmoid.net", "tests/dist/sigmoid_h2.sched", 4},
                            Case{"tests/dist/sigmoid.net", "tests/dist/sigmoid_hw4.sched", 4},
                            Case{"tests/dist/sigmoid.net", "tests/dist/sigmoid_hybrid_4.sched", 4},
                            Case{"tests/dist/modern.net", "tests/dist/modern_h2.sched", 4},
                            Case{"tests/dist/modern.net", "tests/dist/modern_w2.sched", 4},
                            Case{"tests/dist/modern.net", "tests/dist/modern_hw4.sched", 4},
                            Case{"tests/dist/modern.net", "tests/dist/modern_hybrid_4.sched", 4},
                            Case{"tests/dist/regress.net", "tests/dist/regress_h2.sched", 4},
                            Case{"tests/dist/regress.net", "tests/dist/regress_hw4.sched", 4},
                            Case{"tests/dist/regress.net", "tests/dist/regress_hybrid_4.sched", 4},
                            Case{"tests/dist/weighted.net", "tests/dist/weighted_h2.sched", 4},
                            Case{"tests/dist/weighted.net", "tests/dist/weighted_hw4.sched", 4},
                            Case{"tests/dist/weighted.net", "tests/dist/weighted_hybrid_4.sched", 4},
                            Case{"tests/dist/filters.net", "tests/dist/filters_h2.sched", 2},
                            Case{"tests/dist/filters.net", "tests/dist/filters_hw4.sched", 2},
                            Case{"tests/dist/unet.net", "tests/dist/unet_h2.sched", 2},
                            Case{"tests/dist/unet.net", "tests/dist/unet_hw4.sched", 2},
                            // Under SGD: Adam divides each gradient by its own size, so its first steps move
                            // the near-zero gradients of batch-norm shifts (before another batch norm) by the
                            // whole learning rate whatever their rounding. Here one process keeps the deep
                            // levels' tiles blocked, summing batch-norm statistics in another order than the
                            // four processes' planar copies: under Adam the weights then differ by up to 5e-3
                            // of their size, under SGD by 2e-6. The other two cases train it with Adam.
                            Case{"tests/dist/unet.net", "tests/dist/unet_mixed_4.sched", 4, "--optimizer sgd"},
                            Case{"samples/regression_tiny.net", "samples/regression_tiny_hybrid_4.sched", 4});
    CAPTURE(c.net, c.sched, c.extra);
    check_same_training(c.net, c.sched, c.batch, c.extra);
}

TEST_CASE("channel and filter splits train as on one process", "[distributed][mpi]") {
    struct Case {
        const char* net;
        const char* sched;
        std::int64_t batch;
        const char* extra = "";
    };
    // F= (each process its block of the filters, from every input channel), C= (partial sums over a block of
    // the input channels, added where a reader reads them), both, with samples and rows (halos of a block of
    // channels, overlapped), and per layer (redistribution between spatial, filter and channel blocks), on the
    // sample network, ResNet's (adds, batch norm per block of channels, global pooling, fc), a U-Net's
    // (transposed convolutions, concat skips), upsampling, uneven channel counts (odd.net: 5 input channels, concat of 6
    // and 2), group norm, dropout and fc on vectors (modern.net), a regression loss and several losses. The
    // U-Net trains with SGD: under C=2 its partial sums round differently from one process's whole sums (within
    // 2e-6 after three steps), and under H=2 F=2 its batch-norm statistics are summed in another order than one
    // process's where one process keeps blocked tiles (AVX-512), both of which Adam's first steps magnify where a
    // gradient is nearly zero (to 2e-4; under H=2 F=2, 6e-5 of the tensor's size on an AVX-512 CPU).
    const Case c = GENERATE(Case{"samples/mesh_tiny.net", "tests/dist/mesh_f2.sched", 4},
                            Case{"samples/mesh_tiny.net", "tests/dist/mesh_c2.sched", 4},
                            Case{"samples/mesh_tiny.net", "tests/dist/mesh_f4.sched", 4},
                            Case{"samples/mesh_tiny.net", "tests/dist/mesh_n2f2.sched", 4},
                            Case{"samples/mesh_tiny.net", "tests/dist/mesh_h2f2.sched", 4},
                            Case{"samples/mesh_tiny.net", "tests/dist/mesh_channels_mixed_4.sched", 4},
                            Case{"samples/resnet_tiny.net", "tests/dist/resnet_tiny_cf4.sched", 8},
                            Case{"tests/dist/unet.net", "tests/dist/unet_c2.sched", 2, "--optimizer sgd"},
                            Case{"tests/dist/unet.net", "tests/dist/unet_h2f2.sched", 2, "--optimizer sgd"},
                            Case{"tests/dist/upsample.net", "tests/dist/upsample_c2h2.sched", 4},
                            Case{"tests/dist/odd.net", "tests/dist/odd_c2.sched", 5},
                            Case{"tests/dist/modern.net", "tests/dist/modern_cf4.sched", 4},
                            Case{"tests/dist/regress.net", "tests/dist/regress_f2.sched", 4},
                            Case{"tests/dist/heads.net", "tests/dist/heads_c2.sched", 4});
    CAPTURE(c.net, c.sched);
    check_same_training(c.net, c.sched, c.batch, c.extra);
}

TEST_CASE("under F and C parts each process holds its block of the weights: the memory saved is the model's",
          "[distributed][mpi]") {
    // wide_fc.net's fully connected layer holds 13M weights: with their gradients and momenta, 150 MiB on one
    // process, and half of that on each of two under F=2 or C=2 (a block of the filters, or of the inputs).
    // The peak memory a process measures falls by what `dsl explain` predicts, within 25%. (Against N=2, MPI's
    // allreduce of the whole gradient takes a temporary of its size, which the model leaves out.)
    for (const char* parts : {"tests/dist/mesh_f2.sched", "tests/dist/mesh_c2.sched"}) {
        CAPTURE(parts);
        const auto [measured, model] = memory_saved("tests/dist/wide_fc.net", schedule_with("", "batch = 4"), parts);
        CAPTURE(measured, model);
        CHECK(model > 60.0);  // MiB
        CHECK(measured == Approx(model).epsilon(0.25));
    }
}

TEST_CASE("volumes train as on one process under every split of depth, rows and columns", "[distributed][mpi]") {
    struct Case {
        const char* net;
        const char* sched;
        std::int64_t batch;
        const char* extra = "";  // more of both runs' command lines
    };
    // Depth, rows and columns alone; a 2x2x2 grid (8 processes: faces, edges and corners); three slabs of
    // depth over odd extents (17 x 15 x 13: uneven tiles, 6, 6 and 5 planes) with batch norm over each sample
    // group; hybrid samples x depth; a split per part with redistributions (overlap off); a 3-D U-Net in a
    // grid and split per level (its concats and trilinear upsampling redistribute); CosmoFlow's structure in
    // a grid and hybrid, its dense head computed whole or sample-parallel; periodic boundaries in depth
    // split 2 ways (both neighbours the same process) and 3 ways and in a grid, and on an image in a grid
    // and 3 columns; and the README's volume sample.
    const Case c = GENERATE(Case{"tests/dist/vol.net", "tests/dist/vol_d2.sched", 2},
                            Case{"tests/dist/vol.net", "tests/dist/vol_h2.sched", 2},
                            Case{"tests/dist/vol.net", "tests/dist/vol_w2.sched", 2},
                            Case{"tests/dist/vol.net", "tests/dist/vol_dhw8.sched", 2},
                            Case{"tests/dist/vol.net", "tests/dist/vol_d3.sched", 3},
                            Case{"tests/dist/vol.net", "tests/dist/vol_hybrid_4.sched", 4},
                            Case{"tests/dist/vol.net", "tests/dist/vol_mixed_4.sched", 2},
                            Case{"tests/dist/volunet.net", "tests/dist/volunet_dhw8.sched", 2},
                            Case{"tests/dist/volunet.net", "tests/dist/volunet_mixed_4.sched", 2},
                            Case{"tests/dist/cosmo.net", "tests/dist/cosmo_dhw8.sched", 2},
                            Case{"tests/dist/cosmo.net", "tests/dist/cosmo_hybrid_4.sched", 4},
                            Case{"tests/dist/periodic.net", "tests/dist/periodic_d2.sched", 2},
                            Case{"tests/dist/periodic.net", "tests/dist/periodic_d3.sched", 2},
                            Case{"tests/dist/periodic.net", "tests/dist/periodic_dhw8.sched", 2},
                            Case{"tests/dist/periodic2d.net", "tests/dist/periodic2d_hw4.sched", 2},
                            Case{"tests/dist/periodic2d.net", "tests/dist/periodic2d_w3.sched", 2},
                            Case{"samples/volume_tiny.net", "samples/volume_tiny_dhw_8.sched", 2},
                            Case{"samples/volume_tiny.net", "samples/volume_tiny_depth_3.sched", 2},
                            Case{"samples/volume_tiny.net", "samples/volume_tiny_hybrid_4.sched", 4});
    CAPTURE(c.net, c.sched);
    check_same_run(train(c.net, "", c.batch), train(c.net, c.sched, c.batch), 1e-4);
}

TEST_CASE("batch norm on volumes: statistics per sample group and per tile", "[distributed][mpi]") {
    // With the samples split (N=2), each group's statistics: over its tiles (bn=spatial, each sample split
    // in rows too), or over each process's own samples (bn=local, samples whole) are the same numbers, those
    // that two processes of data-parallel training compute.
    const Run groups = train("tests/dist/vol.net", "tests/dist/vol_n2.sched", 4);
    check_same_run(groups, train("tests/dist/vol.net", "tests/dist/vol_n2_spatial.sched", 4), 1e-4);
    check_same_run(groups, train("tests/dist/vol.net", "tests/dist/vol_n2_local.sched", 4), 1e-4);
    // And they are not the whole mini-batch's.
    const Run one = train("tests/dist/vol.net", "", 4);
    CHECK(groups.losses[1] != Approx(one.losses[1]).epsilon(1e-6));
}

TEST_CASE("under bn=spatial a checkpoint keeps group 0's running statistics", "[distributed][mpi]") {
    // Each sample group moves running statistics of its own; the first process writes the checkpoint, so it
    // holds those of the group of the mini-batch's first samples: one process's, trained on those samples
    // alone, and not the whole mini-batch's (as docs/language.md says).
    const std::string sched = schedule_with("samples/mesh_tiny_sample_2.sched", "default N=2 bn=spatial");
    const Run groups = train("samples/mesh_tiny.net", sched, 4, "", 1);
    const Run first = train("samples/mesh_tiny.net", "", 2, "", 1), whole = train("samples/mesh_tiny.net", "", 4, "", 1);
    // The largest difference of two tensors, relative to the first's largest magnitude.
    auto apart = [](const std::vector<float>& a, const std::vector<float>& b) {
        double scale = 1e-30, most = 0.0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            scale = std::max(scale, std::fabs(double(a[i])));
            most = std::max(most, std::fabs(double(a[i]) - double(b.at(i))));
        }
        return most / scale;
    };
    int statistics = 0;
    for (const auto& t : groups.checkpoint.tensors) {
        if (!t.name.ends_with(".running_mean") && !t.name.ends_with(".running_var")) continue;
        ++statistics;
        INFO(t.name);
        REQUIRE(first.checkpoint.find(t.name));
        REQUIRE(whole.checkpoint.find(t.name));
        CHECK(apart(t.data, first.checkpoint.find(t.name)->data) <= 1e-6);
        CHECK(apart(t.data, whole.checkpoint.find(t.name)->data) > 1e-4);
    }
    CHECK(statistics == 12);  // six batch norms' two
}

TEST_CASE("encoder-decoders with upsample and deconv train as on one process", "[distributed][mpi]") {
    // Odd sizes (66 x 70, 33 x 35, 17 x 18), so that the output tiles of an upsampling or a transposed
    // convolution are cut where their inputs' are not; rows, columns, a grid, hybrid and a split per layer
    // (the skip connections' concats redistribute their inputs); overlap on and off.
    const char* sched = GENERATE("tests/dist/upsample_h2.sched", "tests/dist/upsample_w2.sched",
                                 "tests/dist/upsample_hw4.sched", "tests/dist/upsample_hybrid_4.sched",
                                 "tests/dist/upsample_mixed_4.sched", "tests/dist/deconv_h2.sched",
                                 "tests/dist/deconv_w2.sched", "tests/dist/deconv_hw4.sched",
                                 "tests/dist/deconv_hybrid_4.sched", "tests/dist/deconv_mixed_4.sched");
    const std::string s = sched;
    const std::string net = s.find("upsample") != std::string::npos ? "tests/dist/upsample.net" : "tests/dist/deconv.net";
    CAPTURE(net, sched);
    const Run one = train(net, "", 4);
    const Run many = train(net, sched, 4);
    REQUIRE(one.losses.size() == 3);
    REQUIRE(many.losses.size() == one.losses.size());
    for (std::size_t i = 0; i < one.losses.size(); ++i) CHECK(many.losses[i] == Approx(one.losses[i]).epsilon(1e-4));
    CHECK(one.losses.back() != one.losses.front());  // it trained
    check_same_state(many.checkpoint, one.checkpoint, 1e-4);
}

namespace {

// Each schedule of `net` trains as one process does (every loss and every tensor of the final state within
// 1e-4), the one process trained once.
void check_same_as_one(const char* net, std::initializer_list<const char*> scheds, std::int64_t batch) {
    const Run one = train(net, "", batch);
    for (const char* sched : scheds) {
        CAPTURE(net, sched);
        check_same_run(one, train(net, sched, batch), 1e-4);
    }
}

}  // namespace

TEST_CASE("transposed convolutions of every shape train as on one process from tiles of one row or column",
          "[distributed][mpi]") {
    // tests/dist/deconvs.net: kernels 1 to 5, strides 1 to 3, pad up to kernel - 1, output_pad 0 and 1, side by
    // side; rows in 5 and columns in 4 (input tiles of one row or column, the halo that each tile's outputs
    // read the whole of the tile beside it), rows and columns in 3 (uneven), a 4 x 2 grid, and a 2 x 4 grid
    // whose concat redistributes.
    check_same_as_one("tests/dist/deconvs.net",
                      {"tests/dist/deconvs_h5.sched", "tests/dist/deconvs_w4.sched", "tests/dist/deconvs_h3.sched",
                       "tests/dist/deconvs_w3.sched", "tests/dist/deconvs_h4w2.sched", "tests/dist/deconvs_h2w4.sched"},
                      2);
}

TEST_CASE("transposed convolutions of volumes train as on one process from tiles of one plane, row or column",
          "[distributed][mpi]") {
    // tests/dist/deconvs3d.net: depth in 4 (stdlib/unet3d.net's kernel 2 stride 2 from tiles of one plane),
    // rows in 3, columns in 3, depth in 4 by columns in 2 (edges and corners), and depth in 3 by rows in 2, both
    // uneven.
    check_same_as_one("tests/dist/deconvs3d.net",
                      {"tests/dist/deconvs3d_d4.sched", "tests/dist/deconvs3d_h3.sched",
                       "tests/dist/deconvs3d_w3.sched", "tests/dist/deconvs3d_d4w2.sched",
                       "tests/dist/deconvs3d_d3h2.sched"},
                      2);
}

TEST_CASE("the step's loss is the weighted sum of the losses, which are logged unweighted", "[distributed][mpi]") {
    const Run one = train("tests/dist/weighted.net", "", 4);
    REQUIRE(one.losses.size() == 3);
    for (std::size_t i = 0; i < one.losses.size(); ++i) {
        const auto& e = one.each[i];
        REQUIRE(e.size() == 4);
        CHECK(one.losses[i] ==
              Approx(0.5 * e.at("sq") + 0.25 * e.at("abs") + 2.0 * e.at("bce") + e.at("seg")).epsilon(1e-6));
        // Unweighted: bce of logits near 0 against targets in (0, 1) is about log 2, not twice it.
        CHECK(e.at("bce") > 0.5);
        CHECK(e.at("bce") < 0.8);
    }
}

namespace {

// The losses of 5 steps of `common` on one process, and of steps 4 and 5 run under `rest_sched` from a
// checkpoint of 3 steps under `first_sched`; and the final checkpoint of each.
struct Resumed {
    std::vector<double> one, rest;
    Checkpoint one_state, rest_state;
};
Resumed resume(const std::string& common, const std::string& first_sched, const std::string& rest_sched) {
    const dsl::test::TempDir dir;
    Result r = run_dsl(common + "--steps 5 --log " + (dir / "one.jsonl") + " --save " + (dir / "one"));
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + first_sched + " --steps 3 --save " + (dir / "first"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + rest_sched + " --steps 2 --load " + (dir / "first") + " --log " + (dir / "rest.jsonl") +
                " --save " + (dir / "rest"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    Resumed out;
    std::ifstream a(dir / "one.jsonl"), b(dir / "rest.jsonl");
    for (std::string line; std::getline(a, line);) out.one.push_back(nlohmann::json::parse(line)["loss"]);
    for (std::string line; std::getline(b, line);) out.rest.push_back(nlohmann::json::parse(line)["loss"]);
    REQUIRE(out.one.size() == 5);
    REQUIRE(out.rest.size() == 2);
    std::string error;
    auto one = load_checkpoint(dir / "one", error), rest = load_checkpoint(dir / "rest", error);
    INFO(error);
    REQUIRE(one);
    REQUIRE(rest);
    out.one_state = std::move(*one);
    out.rest_state = std::move(*rest);
    return out;
}

}  // namespace

TEST_CASE("a checkpoint saved under one schedule resumes under another", "[distributed][mpi]") {
    // 5 steps on one process; 3 on 4 processes (hybrid), then 2 more on 2 (columns).
    const Resumed l = resume("run samples/mesh_tiny.net --seed 3 --batch 4 ", "samples/mesh_tiny_hybrid_4.sched",
                             "samples/mesh_tiny_spatial_w_2.sched");
    CHECK(l.rest[0] == Approx(l.one[3]).epsilon(1e-4));
    CHECK(l.rest[1] == Approx(l.one[4]).epsilon(1e-4));
    CHECK(l.rest_state.meta["step"] == 5);
    check_same_state(l.rest_state, l.one_state, 1e-4);
    // A volume network: 3 steps in a 2x2x2 grid, then 2 in three slabs of depth.
    const Resumed v = resume("run samples/volume_tiny.net --seed 3 --batch 2 ", "samples/volume_tiny_dhw_8.sched",
                             "samples/volume_tiny_depth_3.sched");
    CHECK(v.rest[0] == Approx(v.one[3]).epsilon(1e-4));
    CHECK(v.rest[1] == Approx(v.one[4]).epsilon(1e-4));
}

TEST_CASE("a checkpoint saved under channel and filter splits resumes under another", "[distributed][mpi]") {
    // 3 steps under filters, channels and rows per layer on 4 processes, then 2 under C=2 on 2; and dropout's
    // masks of global channels, from C=2 F=2 to rows.
    const Resumed l = resume("run samples/mesh_tiny.net --seed 3 --batch 4 ", "tests/dist/mesh_channels_mixed_4.sched",
                             "tests/dist/mesh_c2.sched");
    CHECK(l.rest[0] == Approx(l.one[3]).epsilon(1e-4));
    CHECK(l.rest[1] == Approx(l.one[4]).epsilon(1e-4));
    const Resumed m = resume("run tests/dist/modern.net --seed 3 --batch 4 ", "tests/dist/modern_cf4.sched",
                             "tests/dist/modern_h2.sched");
    CHECK(m.rest[0] == Approx(m.one[3]).epsilon(1e-4));
    CHECK(m.rest[1] == Approx(m.one[4]).epsilon(1e-4));
}

TEST_CASE(
    "dropout's masks resume where they left off: a resumed run under another schedule draws what one "
    "uninterrupted process draws",
    "[distributed][mpi]") {
    const Resumed l = resume("run tests/dist/modern.net --seed 3 --batch 4 ", "tests/dist/modern_hybrid_4.sched",
                             "tests/dist/modern_h2.sched");
    CHECK(l.rest[0] == Approx(l.one[3]).epsilon(1e-6));
    CHECK(l.rest[1] == Approx(l.one[4]).epsilon(1e-6));
}
