// The reference loss kernels (cross-entropy, and the regression losses mse, l1 and bce with logits) against
// values worked out by hand, and their gradients against central finite differences of their own losses (with
// the step and the tolerance explained in test_reference_kernels.cpp), on vectors, images and volumes: the
// loss, its gradient, and the scale that multiplies the gradient and leaves the loss alone.
#include "reference_checks.hpp"

#include <dsl/backend/kernels.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace dsl::backend;
using std::int64_t;

}  // namespace

TEST_CASE("reference loss: cross-entropy by hand", "[reference]") {
    LossKernels& loss = *reference_kernels().loss;
    // Sample 0: logits 1, 2, 3, label 2; sample 1: logits 0, 0, 0, label 0.
    std::vector<float> logits{1, 2, 3, 0, 0, 0}, dlogits(6);
    const std::vector<std::int32_t> labels{2, 0};
    const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    const double total = loss.cross_entropy(dense_view(logits.data(), {2, 3, {}}), label_view(labels, {2, 1, {}}), 0.5f,
                                            dense_view(dlogits.data(), {2, 3, {}}));
    CHECK(total == Approx((lse - 3.0) + std::log(3.0)));
    CHECK(total == Approx(0.4076059644 + 1.0986122887));
    for (int k = 0; k < 3; ++k) {
        CHECK(dlogits[k] == Approx(0.5 * (std::exp(k + 1.0 - lse) - (k == 2 ? 1.0 : 0.0))));
        CHECK(dlogits[3 + k] == Approx(0.5 * (1.0 / 3.0 - (k == 0 ? 1.0 : 0.0))));
    }
    // Without dlogits only the loss; large logits do not overflow: log(e^1000 + e^1001) - 1000 = log(1 + e).
    std::vector<float> big{1000.0f, 1001.0f};
    const std::vector<std::int32_t> zero{0};
    CHECK(loss.cross_entropy(dense_view(big.data(), {1, 2, {}}), label_view(zero, {1, 1, {}}), 1.0f, View{}) ==
          Approx(std::log(1.0 + std::exp(1.0))));
}

TEST_CASE("reference loss: cross-entropy gradient by finite differences", "[reference]") {
    // classification, per pixel and per voxel
    const Dims d = GENERATE(Dims{3, 5, {}}, Dims{2, 4, {3, 2}}, Dims{2, 3, {2, 3, 2}});
    CAPTURE(d);
    std::mt19937 rng(17);
    Tile logits(d, rng, -2.0f, 2.0f), dlogits(d, rng);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(d.n * d.points()));
    for (auto& l : labels) l = static_cast<std::int32_t>(rng() % d.c);
    const LabelView lv = label_view(labels, {d.n, 1, d.space});
    LossKernels& loss = *reference_kernels().loss;
    auto objective = [&] { return loss.cross_entropy(logits.view, lv, 1.0f, View{}); };

    dlogits.save();
    const double total = loss.cross_entropy(logits.view, lv, 1.0f, dlogits.view);
    CHECK(dlogits.changed_outside() == 0);
    CHECK(total == Approx(objective()));
    // The loss and its gradient written out independently, pixel by pixel, so that a kernel reading the
    // wrong label or pixel (which finite differences of itself cannot see) is caught.
    double expected = 0.0;
    int64_t wrong_gradient = 0;
    std::size_t next = 0;  // the pixels in order, as the labels are stored
    for_each_element(Dims{d.n, 1, d.space}, [&](int64_t n, int64_t, const Index& i) {
        const std::int32_t label = labels[next++];
        double sum_exp = 0.0;
        for (int64_t k = 0; k < d.c; ++k) sum_exp += std::exp(double(logits.view.at(n, k, i)));
        expected += std::log(sum_exp) - logits.view.at(n, label, i);
        for (int64_t k = 0; k < d.c; ++k) {
            const double g = std::exp(double(logits.view.at(n, k, i))) / sum_exp - (k == label ? 1.0 : 0.0);
            if (std::abs(dlogits.view.at(n, k, i) - g) > 1e-6) ++wrong_gradient;
        }
    });
    CHECK(total == Approx(expected).epsilon(1e-9));
    CHECK(wrong_gradient == 0);
    // A sum over samples and pixels: each loss is positive and below log(K) + 4 (logits in [-2, 2]).
    CHECK(total > 0.0);
    CHECK(total < double(labels.size()) * (std::log(double(d.c)) + 4.0));
    check_gradient("dlogits", to_vector(dlogits.view), numeric_gradient(logits.view, objective));

    // scale multiplies the gradient and leaves the loss alone.
    const std::vector<double> unscaled = to_vector(dlogits.view);
    CHECK(loss.cross_entropy(logits.view, lv, 0.25f, dlogits.view) == Approx(total));
    const std::vector<double> scaled = to_vector(dlogits.view);
    for (std::size_t i = 0; i < scaled.size(); ++i) CHECK(scaled[i] == Approx(0.25 * unscaled[i]).margin(1e-7));
}

TEST_CASE("reference loss: regression losses by hand", "[reference]") {
    using dsl::frontend::Regression;
    LossKernels& loss = *reference_kernels().loss;
    std::vector<float> x{1.0f, -2.0f, 0.5f, 0.0f}, t{0.0f, 1.0f, 0.5f, 1.0f}, dx(4);
    const Dims d{2, 2, {}};
    auto run = [&](Regression r, float scale) {
        return loss.regression(r, dense_view(x.data(), d), dense_view(t.data(), d), scale, dense_view(dx.data(), d));
    };
    CHECK(run(Regression::mse, 0.5f) == Approx(1.0 + 9.0 + 0.0 + 1.0));
    CHECK(dx == std::vector<float>{1.0f, -3.0f, 0.0f, -1.0f});  // 2 (x - t) * 0.5
    CHECK(run(Regression::l1, 0.25f) == Approx(1.0 + 3.0 + 0.0 + 1.0));
    CHECK(dx == std::vector<float>{0.25f, -0.25f, 0.0f, -0.25f});  // sign(x - t), 0 where equal, as torch
    // -t log sigmoid(x) - (1 - t) log(1 - sigmoid(x))
    auto bce = [](double xv, double tv) {
        const double p = 1.0 / (1.0 + std::exp(-xv));
        return -tv * std::log(p) - (1.0 - tv) * std::log(1.0 - p);
    };
    CHECK(run(Regression::bce_with_logits, 1.0f) ==
          Approx(bce(1.0, 0.0) + bce(-2.0, 1.0) + bce(0.5, 0.5) + bce(0.0, 1.0)));
    CHECK(dx[0] == Approx(1.0 / (1.0 + std::exp(-1.0))));
    CHECK(dx[3] == Approx(-0.5));
    // The stable form: logits far beyond exp's range give the exact limits, not infinities.
    std::vector<float> big{1000.0f, -1000.0f}, targets{0.0f, 0.0f};
    CHECK(loss.regression(Regression::bce_with_logits, dense_view(big.data(), {1, 2, {}}),
                          dense_view(targets.data(), {1, 2, {}}), 1.0f, View{}) == Approx(1000.0));
}

TEST_CASE("reference loss: regression gradients by finite differences", "[reference]") {
    using dsl::frontend::Regression;
    const Regression r = GENERATE(Regression::mse, Regression::l1, Regression::bce_with_logits);
    const Dims d = GENERATE(Dims{3, 5, {}}, Dims{2, 3, {4, 5}}, Dims{2, 2, {3, 2, 3}});  // fc's, per pixel, per voxel
    CAPTURE(static_cast<int>(r), d);
    std::mt19937 rng(23);
    Tile x(d, rng, -2.0f, 2.0f), t(d, rng, 0.0f, 1.0f), dx(d, rng);
    // l1 has a kink at x == t: keep every prediction at least 0.1 from its target.
    for_each_element(d, [&](int64_t n, int64_t c, const Index& i) {
        x.view.at(n, c, i) = t.view.at(n, c, i) + 2.0f * off_zero(rng);
    });
    LossKernels& loss = *reference_kernels().loss;
    auto objective = [&] { return loss.regression(r, x.view, t.view, 1.0f, View{}); };
    dx.save();
    const double total = loss.regression(r, x.view, t.view, 1.0f, dx.view);
    CHECK(dx.changed_outside() == 0);
    CHECK(total == Approx(objective()));
    CHECK(total > 0.0);
    check_gradient("dprediction", to_vector(dx.view), numeric_gradient(x.view, objective));
    // scale multiplies the gradient and leaves the loss alone.
    const std::vector<double> unscaled = to_vector(dx.view);
    CHECK(loss.regression(r, x.view, t.view, 0.25f, dx.view) == Approx(total));
    const std::vector<double> scaled = to_vector(dx.view);
    for (std::size_t i = 0; i < scaled.size(); ++i) CHECK(scaled[i] == Approx(0.25 * unscaled[i]).margin(1e-7));
}
