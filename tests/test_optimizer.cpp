// Adam, AdamW and the learning-rate schedules: the update against PyTorch's rules written out in double, the
// CPU kernel against the reference, the schedules' rate at every step, exact resumption from checkpoints
// (also under another schedule of processes), and distributed training with Adam equal to one process.
#include "support.hpp"
#include "train_runs.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/frontend/network.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

using namespace dsl::backend;
using dsl::frontend::LrSchedule;

namespace {

// The learning rate and gradient of step t (from 1) of the closed-form runs, and the starting weights.
double lr_of(int t) { return 0.01 / t; }
double grad_of(int t, int i) { return std::sin(0.7 * i + 1.3 * t) + 0.1 * i; }
double weight_of(int i) { return 0.5 - 0.3 * i; }

// Three steps of Adam (or AdamW) as the textbook and PyTorch's documentation write it, in double: bias-corrected
// moments m / (1 - beta1^t) and v / (1 - beta2^t), eps added to the root of the second.
std::vector<double> closed_form(bool decoupled, int elements, double beta1, double beta2, double eps, double wd) {
    std::vector<double> w(elements), m(elements, 0.0), v(elements, 0.0);
    for (int i = 0; i < elements; ++i) w[i] = weight_of(i);
    for (int t = 1; t <= 3; ++t)
        for (int i = 0; i < elements; ++i) {
            double g = grad_of(t, i);
            if (decoupled)
                w[i] *= 1.0 - lr_of(t) * wd;
            else
                g += wd * w[i];
            m[i] = beta1 * m[i] + (1.0 - beta1) * g;
            v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
            const double m_hat = m[i] / (1.0 - std::pow(beta1, t)), v_hat = v[i] / (1.0 - std::pow(beta2, t));
            w[i] -= lr_of(t) * m_hat / (std::sqrt(v_hat) + eps);
        }
    return w;
}

std::vector<float> kernel_run(Kernels k, bool decoupled, int elements, double beta1, double beta2, double eps,
                              double wd) {
    std::vector<float> w(elements), m(elements, 0.0f), v(elements, 0.0f), g(elements);
    for (int i = 0; i < elements; ++i) w[i] = static_cast<float>(weight_of(i));
    for (int t = 1; t <= 3; ++t) {
        for (int i = 0; i < elements; ++i) g[i] = static_cast<float>(grad_of(t, i));
        k.eltwise->adam(w.data(), m.data(), v.data(), g.data(), elements,
                        adam_step(decoupled, lr_of(t), beta1, beta2, eps, wd, t));
    }
    return w;
}

std::vector<nlohmann::json> log_lines(const fs::path& log) {
    std::vector<nlohmann::json> out;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

// Every tensor of `a` in `b` with the same bits, and nothing else in either.
void check_identical(const Checkpoint& a, const Checkpoint& b) {
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (const auto& t : a.tensors) {
        INFO(t.name);
        const auto* u = b.find(t.name);
        REQUIRE(u);
        CHECK(t.data == u->data);
    }
}

}  // namespace

TEST_CASE("adam and adamw update as PyTorch's rules say", "[optimizer][kernels]") {
    struct Case {
        bool decoupled;
        double beta1, beta2, eps, wd;
    };
    const Case c = GENERATE(Case{false, 0.9, 0.999, 1e-8, 0.0}, Case{false, 0.8, 0.99, 1e-6, 0.1},
                            Case{true, 0.9, 0.999, 1e-8, 0.01}, Case{true, 0.5, 0.9, 1e-3, 0.5});
    CAPTURE(c.decoupled, c.beta1, c.beta2, c.eps, c.wd);
    constexpr int elements = 37;
    const std::vector<double> expected = closed_form(c.decoupled, elements, c.beta1, c.beta2, c.eps, c.wd);
    const std::vector<float> ref =
        kernel_run(reference_kernels(), c.decoupled, elements, c.beta1, c.beta2, c.eps, c.wd);
    const std::vector<float> cpu = kernel_run(cpu_kernels(), c.decoupled, elements, c.beta1, c.beta2, c.eps, c.wd);
    for (int i = 0; i < elements; ++i) {
        INFO(i);
        // Each step moves a weight by about lr: float's rounding of the weight is what is left.
        CHECK(ref[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-7));
        CHECK(cpu[i] == ref[i]);
    }
    // The weights moved.
    CHECK(std::fabs(expected[3] - weight_of(3)) > 1e-4);
}

TEST_CASE("adam's first step moves every weight by lr against its gradient's sign", "[optimizer][kernels]") {
    // With m and v from zero, the bias-corrected step is lr * g / (|g| + eps): lr times the sign.
    std::vector<float> w{1.0f, 1.0f, 1.0f}, m(3, 0.0f), v(3, 0.0f), g{0.5f, -2.0f, 1e-3f};
    reference_kernels().eltwise->adam(w.data(), m.data(), v.data(), g.data(), 3,
                                      adam_step(false, 0.1, 0.9, 0.999, 0.0, 0.0, 1));
    CHECK(w[0] == Approx(0.9f));
    CHECK(w[1] == Approx(1.1f));
    CHECK(w[2] == Approx(0.9f));
}

TEST_CASE("learning-rate schedules give PyTorch's rate at every step", "[optimizer]") {
    LrSchedule warm;
    warm.warmup = 4;  // LinearLR(start_factor = 1/4, total_iters = 4), then constant
    const std::vector<double> warm_rates{0.25, 0.4375, 0.625, 0.8125, 1.0, 1.0};
    for (int i = 0; i < 6; ++i) CHECK(warm.lr(2.0, i) == Approx(2.0 * warm_rates[i]).epsilon(1e-12));

    LrSchedule cosine;
    cosine.kind = LrSchedule::Kind::cosine;
    cosine.warmup = 2;
    cosine.steps = 4;  // after 2 steps of warmup: CosineAnnealingLR(T_max = 4), 0 from its step 4 on
    const std::vector<double> cosine_rates{0.5, 0.75, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0, 0.0};
    for (int i = 0; i < 8; ++i) CHECK(cosine.lr(1.0, i) == Approx(cosine_rates[i]).margin(1e-15));

    LrSchedule step;
    step.kind = LrSchedule::Kind::step;
    step.every = 2;
    step.gamma = 0.5;  // StepLR(step_size = 2, gamma = 0.5)
    const std::vector<double> step_rates{0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125};
    for (int i = 0; i < 7; ++i) CHECK(step.lr(0.1, i) == Approx(step_rates[i]).epsilon(1e-12));

    LrSchedule none;
    CHECK(none.lr(0.3, 0) == 0.3);
    CHECK(none.lr(0.3, 1000) == 0.3);
}

TEST_CASE("adam with a schedule logs its rate and resumes bit for bit", "[optimizer][cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_adam_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string d = dir.string();
    // adam.net: adam(lr = 0.01, ..., warmup = 2, schedule = cosine(steps = 4)).
    const std::string common = "run tests/dist/adam.net --batch 2 --seed 5 ";

    Result r = run_dsl(common + "--steps 5 --log " + d + "/whole.jsonl --save " + d + "/whole");
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("adam, lr 0.01, warmup 2, cosine over 4 steps, betas (0.9, 0.99)") != std::string::npos);
    CHECK(r.out.find("step     3  loss") != std::string::npos);
    CHECK(r.out.find("lr 0.01 ") != std::string::npos);  // step 3's
    const auto whole = log_lines(dir / "whole.jsonl");
    REQUIRE(whole.size() == 5);
    const std::vector<double> rates{0.005, 0.0075, 0.01, 0.008535533905932738, 0.005};
    for (std::size_t i = 0; i < 5; ++i) CHECK(whole[i]["lr"].get<double>() == Approx(rates[i]).epsilon(1e-12));

    r = run_dsl(common + "--steps 2 --save " + d + "/part");
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + "--steps 3 --load " + d + "/part --log " + d + "/rest.jsonl --save " + d + "/rest");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto rest = log_lines(dir / "rest.jsonl");
    REQUIRE(rest.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(rest[i]["step"] == whole[i + 2]["step"]);
        CHECK(rest[i]["loss"].get<double>() == whole[i + 2]["loss"].get<double>());
        CHECK(rest[i]["lr"].get<double>() == whole[i + 2]["lr"].get<double>());
    }
    std::string error;
    const auto a = load_checkpoint(d + "/whole", error), b = load_checkpoint(d + "/rest", error);
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->meta["optimizer"] == "adam");
    CHECK(a->meta["step"] == 5);
    REQUIRE(a->find("c1.weight.exp_avg"));
    REQUIRE(a->find("c2.bias.exp_avg_sq"));
    CHECK_FALSE(a->find("c1.weight.momentum"));
    check_identical(*a, *b);
    fs::remove_all(dir);
}

TEST_CASE("adam resumes under another schedule of processes", "[optimizer][distributed][mpi]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_adam_resume_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string d = dir.string();
    const std::string common = "run tests/dist/adam.net --seed 3 --batch 4 --optimizer adamw ";
    // 5 steps on one process; 3 on 4 processes (hybrid), then 2 more on 2 (rows).
    Result r = run_dsl(common + "--steps 5 --log " + d + "/one.jsonl --save " + d + "/one");
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + "tests/dist/adam_hybrid_4.sched --steps 3 --save " + d + "/first");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    r = run_dsl(common + "tests/dist/adam_h2.sched --steps 2 --load " + d + "/first --log " + d +
                "/rest.jsonl --save " + d + "/rest");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto one = log_lines(dir / "one.jsonl"), rest = log_lines(dir / "rest.jsonl");
    REQUIRE(one.size() == 5);
    REQUIRE(rest.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
        CHECK(rest[i]["loss"].get<double>() == Approx(one[i + 3]["loss"].get<double>()).epsilon(1e-4));
        CHECK(rest[i]["lr"].get<double>() == one[i + 3]["lr"].get<double>());
    }
    std::string error;
    const auto expected = load_checkpoint(d + "/one", error), got = load_checkpoint(d + "/rest", error);
    REQUIRE(expected);
    REQUIRE(got);
    CHECK(got->meta["optimizer"] == "adamw");
    check_same_state(*got, *expected, 1e-4);
    fs::remove_all(dir);
}

TEST_CASE("a learning rate of 0, on the train line or with --lr 0, trains and moves no weight",
          "[optimizer][cli][run]") {
    // PyTorch takes lr = 0: a run that measures, or saves the initial weights (as the oracle does). The train
    // line takes it as the command line does; a negative rate is refused by both (tests/diag, and below).
    const fs::path dir = fs::temp_directory_path() / ("dsl_lr0_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string text = read(fs::path(source_dir()) / "samples" / "mesh_tiny.net");
    const std::string line = "train sgd(lr = 0.05,";
    REQUIRE(text.find(line) != std::string::npos);
    text.replace(text.find(line), line.size(), "train sgd(lr = 0,");
    const std::string net = (dir / "lr0.net").string();
    std::ofstream(net) << text;

    const Run still = train(net, "", 4, "", 3), first = train(net, "", 4, "", 1);
    const Run adamw = train("samples/mesh_tiny.net", "", 4, "--optimizer adamw --lr 0", 3);
    const Run moved = train("samples/mesh_tiny.net", "", 4, "", 3);
    for (const auto& step : still.lines) CHECK(step["lr"].get<double>() == 0.0);
    // The weights after three steps at rate 0 are those after one (the initial ones): bitwise, under sgd with
    // momentum and weight decay and under adamw; at the network's rate they move.
    int weights = 0, moved_weights = 0;
    for (const auto& t : first.checkpoint.tensors) {
        if (!t.name.ends_with(".weight") && !t.name.ends_with(".bias")) continue;
        ++weights;
        INFO(t.name);
        REQUIRE(still.checkpoint.find(t.name));
        REQUIRE(adamw.checkpoint.find(t.name));
        REQUIRE(moved.checkpoint.find(t.name));
        CHECK(still.checkpoint.find(t.name)->data == t.data);
        CHECK(adamw.checkpoint.find(t.name)->data == t.data);
        moved_weights += moved.checkpoint.find(t.name)->data != t.data;
    }
    CHECK(weights == 20);  // six convolutions' weights, the prediction's weight and bias, six batch norms' two
    CHECK(moved_weights == weights);
    // The steps ran: the momentum holds their gradients.
    const auto* momentum = still.checkpoint.find("pred.weight.momentum");
    REQUIRE(momentum);
    CHECK(std::any_of(momentum->data.begin(), momentum->data.end(), [](float m) { return m != 0.0f; }));

    // A negative rate, or one that is not a finite number, on the command line: a usage error, as on the
    // train line.
    for (const char* lr : {"-0.01", "inf", "nan"}) {
        const Result r = run_dsl(std::string("run samples/mesh_tiny.net --steps 1 --lr ") + lr);
        CHECK(r.exit_code == 2);
        CHECK(r.err.find(std::string("--lr: the learning rate must be a non-negative number, not ") + lr) !=
              std::string::npos);
    }
    fs::remove_all(dir);
}

TEST_CASE("an sgd checkpoint does not resume an adam run, nor the reverse", "[optimizer][cli][run]") {
    const fs::path dir = fs::temp_directory_path() / ("dsl_adam_sgd_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string d = dir.string();
    const std::string common = "run tests/dist/adam.net --batch 2 --steps 1 ";
    REQUIRE(run_dsl(common + "--optimizer sgd --save " + d + "/sgd").exit_code == 0);
    REQUIRE(run_dsl(common + "--save " + d + "/adam").exit_code == 0);
    Result r = run_dsl(common + "--load " + d + "/sgd");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("the checkpoint holds the state of optimizer 'sgd', and this run trains with 'adam'") !=
          std::string::npos);
    r = run_dsl(common + "--optimizer sgd --load " + d + "/adam");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("the checkpoint holds the state of optimizer 'adam', and this run trains with 'sgd'") !=
          std::string::npos);
    // Adam's moments are AdamW's.
    r = run_dsl(common + "--optimizer adamw --load " + d + "/adam");
    INFO(r.err);
    CHECK(r.exit_code == 0);
    fs::remove_all(dir);
}

TEST_CASE("distributed training with adam and a schedule gives one process's losses and state",
          "[optimizer][distributed][mpi]") {
    const char* sched =
        GENERATE("tests/dist/adam_h2.sched", "tests/dist/adam_hw4.sched", "tests/dist/adam_hybrid_4.sched");
    const char* extra = GENERATE("", "--optimizer adamw");
    CAPTURE(sched, extra);
    const Run one = train("tests/dist/adam.net", "", 4, extra);
    const Run many = train("tests/dist/adam.net", sched, 4, extra);
    REQUIRE(one.losses.size() == 3);
    REQUIRE(many.losses.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) CHECK(many.losses[i] == Approx(one.losses[i]).epsilon(1e-4));
    CHECK(one.losses.back() != one.losses.front());
    check_same_state(many.checkpoint, one.checkpoint, 1e-4);
}
