// `dsl eval`, `dsl predict` and `dsl run --eval-every` with real ranks: every split gives one process's
// figures (to rounding) and its prediction file (bitwise); the figures agree with an independent computation
// from the prediction and the labels.
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
void write_inputs(const std::string& path, std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
        x[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(0.37 * i) + 0.1 * std::cos(0.011 * i));
    std::string error;
    REQUIRE(dsl::backend::write_npy(path, shape, x.data(), error));
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
    CHECK(dsl::test::read_bytes(dir / "f1.npy") == dsl::test::read_bytes(dir / "f4.npy"));
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
    double correct = 0, loss = 0;
    std::vector<double> inter(C), uni(C);
    for (std::int64_t s = 0; s < S; ++s) {
        const float* l = &f[static_cast<std::size_t>(s * C)];
        const std::int64_t best = std::max_element(l, l + C) - l, truth = labels[static_cast<std::size_t>(s)];
        double m = l[0], sum = 0;
        for (std::int64_t k = 1; k < C; ++k) m = std::max(m, static_cast<double>(l[k]));
        for (std::int64_t k = 0; k < C; ++k) sum += std::exp(l[k] - m);
        loss += m + std::log(sum) - l[truth];
        correct += best == truth;
        inter[static_cast<std::size_t>(truth)] += best == truth;
        uni[static_cast<std::size_t>(truth)] += 1;
        if (best != truth) uni[static_cast<std::size_t>(best)] += 1;
    }
    double iou = 0, present = 0;
    for (std::int64_t k = 0; k < C; ++k)
        if (uni[static_cast<std::size_t>(k)] > 0)
            iou += inter[static_cast<std::size_t>(k)] / uni[static_cast<std::size_t>(k)], ++present;
    const json& fig = one["losses"]["loss"];
    CHECK(fig["accuracy"].get<double>() == Approx(correct / S));
    CHECK(fig["mean_iou"].get<double>() == Approx(iou / present));
    CHECK(fig["loss"].get<double>() == Approx(loss / S).epsilon(1e-5));
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
    std::vector<std::int64_t> shape;
    const std::vector<float> p = npy_floats(dir / "p1.npy", &shape);
    REQUIRE(shape == std::vector<std::int64_t>{S, 2, 8, 8});
    double correct = 0;
    std::vector<double> inter(2), uni(2);
    for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t i = 0; i < P; ++i) {
            const float l0 = p[static_cast<std::size_t>(s * 2 * P + i)],
                        l1 = p[static_cast<std::size_t>(s * 2 * P + P + i)];
            const int best = l1 > l0 ? 1 : 0, truth = labels[static_cast<std::size_t>(s * P + i)];
            correct += best == truth;
            inter[static_cast<std::size_t>(truth)] += best == truth;
            uni[static_cast<std::size_t>(truth)] += 1;
            if (best != truth) uni[static_cast<std::size_t>(best)] += 1;
        }
    double iou = 0, present = 0;
    for (int k = 0; k < 2; ++k)
        if (uni[static_cast<std::size_t>(k)] > 0)
            iou += inter[static_cast<std::size_t>(k)] / uni[static_cast<std::size_t>(k)], ++present;
    const json& fig = one["losses"]["loss"];
    CHECK(fig["accuracy"].get<double>() == Approx(correct / static_cast<double>(S * P)));
    CHECK(fig["mean_iou"].get<double>() == Approx(iou / present));
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
    REQUIRE(p.size() == targets.size());
    double squares = 0, absolutes = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        const double e = static_cast<double>(p[i]) - targets[i];
        squares += e * e;
        absolutes += std::abs(e);
    }
    const json& fig = one["losses"]["loss"];
    CHECK(fig["mse"].get<double>() == Approx(squares / static_cast<double>(p.size())));
    CHECK(fig["mae"].get<double>() == Approx(absolutes / static_cast<double>(p.size())));
    CHECK(fig["loss"].get<double>() == Approx(squares / static_cast<double>(p.size())).epsilon(1e-5));
}
