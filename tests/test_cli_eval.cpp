// `dsl eval`, `dsl predict` and `dsl run --eval-every` with real ranks, on images and volumes: every split
// gives one process's figures (to rounding) and its prediction file (bitwise); the figures agree with an
// independent computation from the prediction and the labels.
#include "hdf5_files.hpp"
#include "run_dsl.hpp"
#include "temp_files.hpp"

#include <dsl/backend/npy.hpp>

#include <hdf5.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using dsl::test::TempDir;
using nlohmann::json;

// Runs dsl, requiring it to succeed.
std::string dsl_ok(const std::string& args) {
    const Result r = run_dsl(args);
    INFO("dsl " << args << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    return r.out;
}

json eval_json(const std::string& args) { return json::parse(dsl_ok("eval " + args + " --json")); }

std::vector<float> npy_floats(const std::string& path, std::vector<std::int64_t>* shape = nullptr) {
    std::string error;
    auto f = dsl::backend::NpyFile::open(path, error);
    REQUIRE(f);
    if (shape) *shape = f->shape();
    std::vector<float> out(static_cast<std::size_t>(f->elements()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(f->at(static_cast<std::int64_t>(i)));
    return out;
}

std::vector<float> h5_floats(const std::string& path, const std::string& dataset) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(file >= 0);
    const hid_t set = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
    REQUIRE(set >= 0);
    const hid_t space = H5Dget_space(set);
    std::vector<float> out(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
    REQUIRE(H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0);
    H5Sclose(space);
    H5Dclose(set);
    H5Fclose(file);
    return out;
}

// Inputs that vary smoothly and by sample, and labels (classes) or targets drawn from an index hash.
std::vector<float> write_inputs(const std::string& path, std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
        x[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(0.37 * i) + 0.1 * std::cos(0.011 * i));
    std::string error;
    REQUIRE(dsl::backend::write_npy(path, shape, x.data(), error));
    return x;
}

std::vector<std::int32_t> write_labels(const std::string& path, std::vector<std::int64_t> shape, int classes) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<std::int32_t> y(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
        y[static_cast<std::size_t>(i)] =
            static_cast<std::int32_t>((static_cast<std::uint64_t>(i) * 2654435761u >> 7) % classes);
    std::string error;
    REQUIRE(dsl::backend::write_npy(path, shape, y.data(), error));
    return y;
}

void same_figures(const json& a, const json& b) {
    CHECK(a["samples"] == b["samples"]);
    CHECK(a["loss"].get<double>() == Approx(b["loss"].get<double>()).epsilon(1e-6));
    for (const auto& [name, fa] : a["losses"].items()) {
        const json& fb = b["losses"][name];
        for (const auto& [key, v] : fa.items()) {
            INFO(name << "." << key);
            CHECK(v.get<double>() == Approx(fb[key].get<double>()).epsilon(1e-6));
        }
    }
}

// `a` is `b` within float32 rounding: 1e-6 of b's largest magnitude.
void same_values(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    float scale = 0.0f, worst = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i)
        scale = std::max(scale, std::fabs(b[i])), worst = std::max(worst, std::fabs(a[i] - b[i]));
    CAPTURE(worst, scale);
    CHECK(worst <= 1e-6f * scale);
}

// A classification's figures from logits [S, K, P] (P places per sample, 1 for a class per sample) and labels
// [S, P], as numpy would compute them: accuracy (argmax, the first of equal maxima), mean IoU over the classes
// present in the labels or the predictions, and the mean cross-entropy of the logits.
struct Figures {
    double accuracy = 0, mean_iou = 0, loss = 0;
};

Figures classification(const std::vector<float>& logits, const std::vector<std::int32_t>& labels, std::int64_t S,
                       std::int64_t K, std::int64_t P) {
    double correct = 0, loss = 0;
    std::vector<double> inter(static_cast<std::size_t>(K)), uni(static_cast<std::size_t>(K));
    for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t p = 0; p < P; ++p) {
            auto l = [&](std::int64_t k) {
                return static_cast<double>(logits[static_cast<std::size_t>((s * K + k) * P + p)]);
            };
            std::int64_t best = 0;
            for (std::int64_t k = 1; k < K; ++k)
                if (l(k) > l(best)) best = k;
            const std::int64_t truth = labels[static_cast<std::size_t>(s * P + p)];
            double sum = 0;
            for (std::int64_t k = 0; k < K; ++k) sum += std::exp(l(k) - l(best));
            loss += l(best) + std::log(sum) - l(truth);
            correct += best == truth;
            inter[static_cast<std::size_t>(truth)] += best == truth;
            uni[static_cast<std::size_t>(truth)] += 1;
            if (best != truth) uni[static_cast<std::size_t>(best)] += 1;
        }
    double iou = 0, present = 0;
    for (std::int64_t k = 0; k < K; ++k)
        if (uni[static_cast<std::size_t>(k)] > 0)
            iou += inter[static_cast<std::size_t>(k)] / uni[static_cast<std::size_t>(k)], ++present;
    const double n = static_cast<double>(S * P);
    return {correct / n, iou / present, loss / n};
}

// A regression's figures from a prediction and its targets, element by element: mean squared and absolute error.
std::pair<double, double> mse_mae(const std::vector<float>& p, const std::vector<float>& targets) {
    REQUIRE(p.size() == targets.size());
    double squares = 0, absolutes = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        const double e = static_cast<double>(p[i]) - targets[i];
        squares += e * e;
        absolutes += std::abs(e);
    }
    return {squares / static_cast<double>(p.size()), absolutes / static_cast<double>(p.size())};
}

}  // namespace

TEST_CASE("eval and predict give one process's figures and file under every split", "[cli][eval][mpi]") {
    TempDir dir;
    const std::string x = dir / "x.npy", y = dir / "y.npy", ck = dir / "ck";
    const std::int64_t S = 9, C = 3;
    write_inputs(x, {S, 5, 30, 26});
    const auto labels = write_labels(y, {S}, static_cast<int>(C));
    const std::string data = " --data x=" + x + " --data y=" + y;
    dsl_ok("run tests/dist/odd.net --steps 2 --batch 5 --save " + ck + data);

    // One process, then 3 (rows, an odd count) and 4 (samples x columns): batch 5, so 9 samples end in a
    // mini-batch of 4.
    const std::string common = " --load " + ck + data;
    const json one = eval_json("tests/dist/odd.net --batch 5" + common);
    CHECK(one["samples"] == S);
    for (const char* sched : {"tests/dist/odd_h3.sched", "tests/dist/odd_hybrid_4.sched"}) {
        INFO(sched);
        same_figures(eval_json(std::string("tests/dist/odd.net ") + sched + common), one);
    }
    // A last mini-batch of 2 that the hybrid schedule cannot split (its global pooling splits the samples 4
    // ways): those samples are left out, and said to be.
    const Result partial = run_dsl("eval tests/dist/odd.net tests/dist/odd_hybrid_4.sched --json --samples 7" + common);
    CHECK(partial.exit_code == 0);
    const json left = json::parse(partial.out);
    CHECK(left["samples"] == 5);
    CHECK(left["left_out"] == 2);
    CHECK(partial.err.find("note: the last 2 samples are left out") != std::string::npos);
    same_figures(left, eval_json("tests/dist/odd.net --batch 5 --samples 5" + common));
    dsl_ok("predict tests/dist/odd.net --batch 5 --output " + (dir / "f1.npy") + common);
    dsl_ok("predict tests/dist/odd.net tests/dist/odd_hybrid_4.sched --output " + (dir / "f4.npy") + common);
    // The same values but for rounding: 4 processes of one thread each sum the head's products in another
    // order than one of two threads may (oneDNN's GEMM splits its sums among threads on some CPUs).
    same_values(npy_floats(dir / "f4.npy"), npy_floats(dir / "f1.npy"));
    // A layer split over the rows, each process writing its own rows, to .npy and to HDF5.
    dsl_ok("predict tests/dist/odd.net --batch 5 --layer c4 --output " + (dir / "c1.npy") + common);
    dsl_ok("predict tests/dist/odd.net tests/dist/odd_h3.sched --layer c4 --output " + (dir / "c3.npy") + common);
    CHECK(dsl::test::read_bytes(dir / "c1.npy") == dsl::test::read_bytes(dir / "c3.npy"));
    dsl_ok("predict tests/dist/odd.net tests/dist/odd_hybrid_4.sched --layer c4 --output " + (dir / "c.h5") +
           ":/run/c4" + common);
    std::vector<std::int64_t> shape;
    const std::vector<float> c1 = npy_floats(dir / "c1.npy", &shape);
    CHECK(shape == std::vector<std::int64_t>{S, 4, 7, 6});
    CHECK(h5_floats(dir / "c.h5", "/run/c4") == c1);
    // HDF5's collective writes: one process without MPI (HDF5's default driver), 3 with rows of uneven height
    // (3, 2, 2), and the head on 4 sample-parallel, where the last mini-batch of 4 samples (the fifth is past
    // the end) leaves a process with nothing to write, which takes part in the writes all the same.
    dsl_ok("predict tests/dist/odd.net --batch 5 --layer c4 --output " + (dir / "h.h5") + ":/c4_1" + common);
    CHECK(h5_floats(dir / "h.h5", "/c4_1") == c1);
    dsl_ok("predict tests/dist/odd.net tests/dist/odd_h3.sched --layer c4 --output " + (dir / "h.h5") + ":/c4_3" +
           common);
    CHECK(h5_floats(dir / "h.h5", "/c4_3") == c1);
    dsl_ok("predict tests/dist/odd.net tests/dist/odd_hybrid_4.sched --output " + (dir / "h.h5") + ":/f4" + common);
    same_values(h5_floats(dir / "h.h5", "/f4"), npy_floats(dir / "f1.npy"));
    // The file keeps what it holds: the same data set again is refused, another is added beside it.
    const Result again =
        run_dsl("predict tests/dist/odd.net --layer c4 --output " + (dir / "c.h5") + ":/run/c4" + common);
    CHECK(again.exit_code == 1);
    CHECK(again.err.find("holds '/run/c4' already (--force replaces it)") != std::string::npos);
    dsl_ok("predict tests/dist/odd.net --batch 5 --output " + (dir / "c.h5") + ":/f" + common);
    CHECK(h5_floats(dir / "c.h5", "/run/c4") == c1);
    CHECK(h5_floats(dir / "c.h5", "/f") == npy_floats(dir / "f1.npy"));

    // The figures from the prediction and the labels: argmax, and the cross-entropy of the logits.
    const std::vector<float> f = npy_floats(dir / "f1.npy", &shape);
    REQUIRE(shape == std::vector<std::int64_t>{S, C});
    const Figures expect = classification(f, labels, S, C, 1);
    const json& fig = one["losses"]["loss"];
    CHECK(fig["accuracy"].get<double>() == Approx(expect.accuracy));
    CHECK(fig["mean_iou"].get<double>() == Approx(expect.mean_iou));
    CHECK(fig["loss"].get<double>() == Approx(expect.loss).epsilon(1e-5));
}

TEST_CASE("eval and predict under channel and filter splits", "[cli][eval][mpi]") {
    TempDir dir;
    const std::string x = dir / "x.npy", y = dir / "y.npy", ck = dir / "ck";
    write_inputs(x, {9, 5, 30, 26});
    write_labels(y, {9}, 3);
    const std::string data = " --data x=" + x + " --data y=" + y;
    dsl_ok("run tests/dist/odd.net --steps 2 --batch 5 --save " + ck + data);
    const std::string common = " --load " + ck + data;
    // Every layer under C=2: the logits' fully connected layer holds partial sums, which the loss reads whole.
    same_figures(eval_json("tests/dist/odd.net tests/dist/odd_c2.sched" + common),
                 eval_json("tests/dist/odd.net --batch 5" + common));
    dsl_ok("predict tests/dist/odd.net --batch 5 --output " + (dir / "f1.npy") + common);
    dsl_ok("predict tests/dist/odd.net tests/dist/odd_c2.sched --output " + (dir / "f2.npy") + common);
    std::vector<std::int64_t> one_shape, two_shape;
    const std::vector<float> one = npy_floats(dir / "f1.npy", &one_shape), two = npy_floats(dir / "f2.npy", &two_shape);
    CHECK(two_shape == one_shape);
    REQUIRE(two.size() == one.size());
    for (std::size_t i = 0; i < one.size(); ++i) CHECK(two[i] == Approx(one[i]).epsilon(1e-5).margin(1e-6));
    // c4 holds partial sums that only global pooling reads, a block of channels each: there is no whole copy
    // to write, and predict says so.
    const Result partial =
        run_dsl("predict tests/dist/odd.net tests/dist/odd_c2.sched --layer c4 --output " + (dir / "c4.npy") + common);
    CHECK(partial.exit_code == 1);
    CHECK(partial.err.find("layer 'c4' is split over its channels under this schedule") != std::string::npos);
    CHECK(!fs::exists(dir / "c4.npy"));
}

TEST_CASE("eval counts per pixel and predict writes per pixel alike under every split", "[cli][eval][mpi]") {
    TempDir dir;
    const std::string x = dir / "x.npy", y = dir / "y.npy", ck = dir / "ck";
    const std::int64_t S = 6, P = 64;
    write_inputs(x, {S, 18, 64, 64});
    const auto labels = write_labels(y, {S, 8, 8}, 2);
    const std::string data = " --data x=" + x + " --data y=" + y;
    dsl_ok("run samples/mesh_tiny.net --steps 2 --save " + ck + data);
    const std::string common = " --load " + ck + data;
    const json one = eval_json("samples/mesh_tiny.net" + common);
    for (const char* sched : {"samples/mesh_tiny_spatial_h_2.sched", "samples/mesh_tiny_sample_2.sched",
                              "samples/mesh_tiny_spatial_hw_4.sched", "samples/mesh_tiny_hybrid_4.sched"}) {
        INFO(sched);
        same_figures(eval_json(std::string("samples/mesh_tiny.net ") + sched + common), one);
    }
    dsl_ok("predict samples/mesh_tiny.net --output " + (dir / "p1.npy") + common);
    dsl_ok("predict samples/mesh_tiny.net samples/mesh_tiny_spatial_hw_4.sched --output " + (dir / "p4.npy") + common);
    CHECK(dsl::test::read_bytes(dir / "p1.npy") == dsl::test::read_bytes(dir / "p4.npy"));
    dsl_ok("predict samples/mesh_tiny.net samples/mesh_tiny_spatial_h_2.sched --output " + (dir / "p2.npy") + common);
    CHECK(dsl::test::read_bytes(dir / "p1.npy") == dsl::test::read_bytes(dir / "p2.npy"));
    // New data has no labels: predict needs only the inputs, and gives the same output.
    dsl_ok("predict samples/mesh_tiny.net samples/mesh_tiny_spatial_hw_4.sched --output " + (dir / "p0.npy") +
           " --load " + ck + " --data x=" + x);
    CHECK(dsl::test::read_bytes(dir / "p1.npy") == dsl::test::read_bytes(dir / "p0.npy"));
    CHECK(run_dsl("eval samples/mesh_tiny.net --load " + ck + " --data x=" + x).exit_code != 0);
    std::vector<std::int64_t> shape;
    const std::vector<float> p = npy_floats(dir / "p1.npy", &shape);
    REQUIRE(shape == std::vector<std::int64_t>{S, 2, 8, 8});
    const Figures expect = classification(p, labels, S, 2, P);
    const json& fig = one["losses"]["loss"];
    CHECK(fig["accuracy"].get<double>() == Approx(expect.accuracy));
    CHECK(fig["mean_iou"].get<double>() == Approx(expect.mean_iou));
}

TEST_CASE("eval of a regression: MSE and MAE of the prediction, the same under a hybrid split", "[cli][eval][mpi]") {
    TempDir dir;
    const std::string x = dir / "x.npy", t = dir / "t.npy", ck = dir / "ck", log = dir / "log.jsonl";
    const std::int64_t S = 6;
    write_inputs(x, {S, 4, 64, 64});
    std::vector<float> targets(static_cast<std::size_t>(S * 2 * 64 * 64));
    for (std::size_t i = 0; i < targets.size(); ++i)
        targets[i] = static_cast<float>(std::cos(0.05 * static_cast<double>(i)));
    std::string error;
    REQUIRE(dsl::backend::write_npy(t, {S, 2, 64, 64}, targets.data(), error));
    const std::string data = " --data x=" + x + " --data y=" + t;
    // Evaluation during training: after steps 2 and 4, on the first 3 samples.
    dsl_ok("run samples/regression_tiny.net --steps 4 --batch 2 --save " + ck + " --log " + log + data +
           " --eval-every 2 --eval-data x=" + x + " --eval-data y=" + t + " --eval-samples 3");
    std::vector<json> lines;
    {
        std::ifstream in(log);
        for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    }
    REQUIRE(lines.size() == 6);
    CHECK(lines[1]["step"] == 2);
    CHECK(lines[2]["eval"] == 2);
    CHECK(lines[4]["step"] == 4);
    CHECK(lines[5]["eval"] == 4);
    CHECK(lines[5]["samples"] == 3);
    // The last of them is what `dsl eval` says of the checkpoint at step 4.
    same_figures(lines[5], eval_json("samples/regression_tiny.net --samples 3 --load " + ck + data));

    const std::string common = " --load " + ck + data;
    const json one = eval_json("samples/regression_tiny.net" + common);
    CHECK(one["samples"] == S);
    same_figures(eval_json("samples/regression_tiny.net samples/regression_tiny_hybrid_4.sched" + common), one);
    dsl_ok("predict samples/regression_tiny.net --output " + (dir / "p1.npy") + common);
    dsl_ok("predict samples/regression_tiny.net samples/regression_tiny_hybrid_4.sched --output " + (dir / "p.h5") +
           ":/pred" + common);
    const std::vector<float> p = npy_floats(dir / "p1.npy");
    CHECK(h5_floats(dir / "p.h5", "/pred") == p);
    const auto [mse, mae] = mse_mae(p, targets);
    const json& fig = one["losses"]["loss"];
    CHECK(fig["mse"].get<double>() == Approx(mse));
    CHECK(fig["mae"].get<double>() == Approx(mae));
    CHECK(fig["loss"].get<double>() == Approx(mse).epsilon(1e-5));
}

TEST_CASE("eval and predict of volumes give one process's figures and file in slabs of depth and in a 2x2x2 grid",
          "[cli][eval][mpi]") {
    TempDir dir;
    const std::string x = dir / "x.npy", y = dir / "y.npy", ck = dir / "ck";
    const std::int64_t S = 5, K = 3, P = 9 * 8 * 7;
    write_inputs(x, {S, 3, 17, 15, 13});
    const auto labels = write_labels(y, {S, 9, 8, 7}, static_cast<int>(K));
    const std::string data = " --data x=" + x + " --data y=" + y;
    dsl_ok("run tests/dist/vol.net --steps 2 --batch 2 --save " + ck + data);

    // One process; two slabs of depth (9 and 8 planes); 8 tiles of 2x2x2 (odd extents, uneven tiles); batch 2,
    // so the 5 samples end in a mini-batch of 1.
    const std::string common = " --load " + ck + data;
    const json one = eval_json("tests/dist/vol.net --batch 2" + common);
    CHECK(one["samples"] == S);
    dsl_ok("predict tests/dist/vol.net --batch 2 --output " + (dir / "p1.npy") + common);
    std::vector<std::int64_t> shape;
    const std::vector<float> p1 = npy_floats(dir / "p1.npy", &shape);
    CHECK(shape == std::vector<std::int64_t>{S, K, 9, 8, 7});
    for (const char* sched : {"tests/dist/vol_d2.sched", "tests/dist/vol_dhw8.sched"}) {
        INFO(sched);
        same_figures(eval_json(std::string("tests/dist/vol.net ") + sched + common), one);
        const std::string out = dir / "p.npy";
        dsl_ok(std::string("predict tests/dist/vol.net ") + sched + " --force --output " + out + common);
        CHECK(dsl::test::read_bytes(out) == dsl::test::read_bytes(dir / "p1.npy"));
    }
    // Without labels, as for new data: the same file.
    dsl_ok("predict tests/dist/vol.net tests/dist/vol_dhw8.sched --force --output " + (dir / "p.npy") + " --load " +
           ck + " --data x=" + x);
    CHECK(dsl::test::read_bytes(dir / "p.npy") == dsl::test::read_bytes(dir / "p1.npy"));
    // A full-size layer, each of the 8 processes writing its tile, to .npy and to HDF5.
    dsl_ok("predict tests/dist/vol.net --batch 2 --layer r1 --output " + (dir / "r1.npy") + common);
    dsl_ok("predict tests/dist/vol.net tests/dist/vol_dhw8.sched --layer r1 --output " + (dir / "r8.npy") + common);
    dsl_ok("predict tests/dist/vol.net tests/dist/vol_dhw8.sched --layer r1 --output " + (dir / "r.h5") + ":/r1" +
           common);
    CHECK(dsl::test::read_bytes(dir / "r1.npy") == dsl::test::read_bytes(dir / "r8.npy"));
    const std::vector<float> r1 = npy_floats(dir / "r1.npy", &shape);
    CHECK(shape == std::vector<std::int64_t>{S, 6, 17, 15, 13});
    CHECK(h5_floats(dir / "r.h5", "/r1") == r1);

    // The figures from the prediction and the labels, voxel by voxel.
    const Figures expect = classification(p1, labels, S, K, P);
    const json& fig = one["losses"]["loss"];
    CHECK(fig["accuracy"].get<double>() == Approx(expect.accuracy));
    CHECK(fig["mean_iou"].get<double>() == Approx(expect.mean_iou));
    CHECK(fig["loss"].get<double>() == Approx(expect.loss).epsilon(1e-5));
}

TEST_CASE("eval and predict of a volume regression: voxel by voxel, and a vector head, under a 2x2x2 grid",
          "[cli][eval][mpi][hdf5]") {
    TempDir dir;
    // Float targets at every voxel, at odd extents.
    dsl::test::write_bytes(dir / "field.net",
                           "input x [N, 2, 11, 9, 7]\n"
                           "label y [N, 2, 11, 9, 7] float\n"
                           "c1 = conv(4, kernel = 3, pad = 1)\n"
                           "g1 = groupnorm(2)\n"
                           "r1 = relu\n"
                           "pred = conv(2, kernel = 3, pad = 1)\n"
                           "loss = mse from pred, y\n");
    dsl::test::write_bytes(dir / "field_dhw8.sched", "procs = 8\nbatch = 2\n\ndefault D=2 H=2 W=2 overlap=on\n");
    struct Case {
        std::string net, sched;
        std::vector<std::int64_t> input, target;
    };
    // And tests/dist/cosmo.net: 4 targets per volume from its dense head.
    const std::vector<Case> cases{{dir / "field.net", dir / "field_dhw8.sched", {2, 11, 9, 7}, {2, 11, 9, 7}},
                                  {"tests/dist/cosmo.net", "tests/dist/cosmo_dhw8.sched", {2, 16, 16, 16}, {4}}};
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        INFO(c.net);
        const std::int64_t S = 3;
        std::vector<std::int64_t> input{S}, target{S};
        input.insert(input.end(), c.input.begin(), c.input.end());
        target.insert(target.end(), c.target.begin(), c.target.end());
        const std::string k = std::to_string(i), x = dir / ("x" + k + ".npy"), t = dir / ("t" + k + ".npy"),
                          h5 = dir / ("d" + k + ".h5"), ck = dir / ("ck" + k), out = dir / ("p" + k + "_");
        const std::vector<float> inputs = write_inputs(x, input);
        std::int64_t n = 1;
        for (auto d : target) n *= d;
        std::vector<float> targets(static_cast<std::size_t>(n));
        for (std::size_t j = 0; j < targets.size(); ++j)
            targets[j] = static_cast<float>(0.8 * std::cos(0.07 * static_cast<double>(j)));
        std::string error;
        REQUIRE(dsl::backend::write_npy(t, target, targets.data(), error));
        // The same data in HDF5, which the processes of the grid read tile by tile.
        dsl::test::write_h5(h5, "/x", input, inputs, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
        dsl::test::write_h5(h5, "/y", target, std::vector<double>(targets.begin(), targets.end()), H5T_NATIVE_DOUBLE,
                            H5T_IEEE_F64LE);
        const std::string data = " --data x=" + x + " --data y=" + t;
        const std::string grid = " " + c.sched + " --load " + ck + " --data x=" + h5 + ":/x --data y=" + h5 + ":/y";
        const std::string common = " --load " + ck + data;
        dsl_ok("run " + c.net + " --steps 2 --batch 2 --save " + ck + data);
        const json one = eval_json(c.net + " --batch 2" + common);
        CHECK(one["samples"] == S);
        same_figures(eval_json(c.net + grid), one);
        dsl_ok("predict " + c.net + " --batch 2 --output " + out + "1.npy" + common);
        dsl_ok("predict " + c.net + grid + " --output " + out + "8.npy");
        std::vector<std::int64_t> shape;
        const std::vector<float> p1 = npy_floats(out + "1.npy", &shape);
        CHECK(shape == target);
        CHECK(dsl::test::read_bytes(out + "8.npy") == dsl::test::read_bytes(out + "1.npy"));
        const auto [mse, mae] = mse_mae(p1, targets);
        const json& fig = one["losses"]["loss"];
        CHECK(fig["mse"].get<double>() == Approx(mse));
        CHECK(fig["mae"].get<double>() == Approx(mae));
        CHECK(fig["loss"].get<double>() == Approx(mse).epsilon(1e-5));
    }
}

TEST_CASE("eval and predict take --auto-schedule and --platform as run does", "[cli][eval][mpi]") {
    TempDir dir;
    const std::string ck = dir / "ck";
    dsl_ok("run samples/mesh_tiny.net --steps 2 --save " + ck);
    const std::string common = "samples/mesh_tiny.net --load " + ck + " --samples 8";
    const json one = eval_json(common);
    CHECK(one["processes"] == 1);

    // The auto-scheduler's schedule for 2 processes of `local` (the fixture): the same figures, and with
    // --json stdout holds the JSON alone, the chosen schedule going to stderr.
    const Result two = run_dsl("eval " + common + " --auto-schedule --procs 2 --json");
    INFO(two.err);
    REQUIRE(two.exit_code == 0);
    const json figures = json::parse(two.out);
    CHECK(figures["processes"] == 2);
    same_figures(figures, one);
    CHECK(two.err.find("auto-schedule for 2 processes on 'local'") != std::string::npos);

    // A platform named by its file: predict writes what one process writes, and says what it chose.
    dsl_ok("predict " + common + " --output " + (dir / "p1.npy"));
    const std::string chosen = dsl_ok("predict " + common + " --auto-schedule --procs 2 --platform " +
                                      "tests/fixtures/local_epyc_2core.platform --output " + (dir / "p2.npy"));
    INFO(chosen);
    CHECK(chosen.find("auto-schedule for 2 processes on '\"") != std::string::npos);
    CHECK(chosen.find("/tests/fixtures/local_epyc_2core.platform\"'") != std::string::npos);
    const std::vector<float> p1 = npy_floats(dir / "p1.npy"), p2 = npy_floats(dir / "p2.npy");
    REQUIRE(p1.size() == p2.size());
    for (std::size_t i = 0; i < p1.size(); ++i) REQUIRE(p2[i] == Approx(p1[i]).margin(1e-5));

    // --platform without --auto-schedule plans nothing: a usage error, as for run.
    for (const std::string& verb : std::vector<std::string>{"eval ", "predict --output " + (dir / "p3.npy") + " "}) {
        const Result r = run_dsl(verb + common + " --platform lassen");
        CHECK(r.exit_code == 2);
        CHECK(r.err.find("error: --platform is the platform --auto-schedule plans for") != std::string::npos);
    }
}
