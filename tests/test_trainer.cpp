// The trainer end to end on one process: whole-network gradients against finite differences, the CPU
// kernels against the reference ones, determinism, and a decreasing loss.
#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>

#include "../backend/src/kernels/rounded_conv.hpp"
#include "../backend/src/tensors/planes.hpp"
#include "support.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

using namespace dsl;
using namespace dsl::backend;

namespace {

// Inputs and labels from a hash of the global index, so any tile of them is the same numbers. The networks
// here are images: a tile is seen as planes (a label per sample is one 1 x 1 plane at row and column 0).
class HashData : public DataSource {
public:
    explicit HashData(std::uint64_t seed) : seed_(seed) {}

    void inputs(const frontend::Layer&, std::int64_t first, const Index& at, View tile) override {
        const Planes t = planes(tile);
        const PlanePlace p = plane_place(at);
        for (std::int64_t n = 0; n < t.dims.n; ++n)
            for (std::int64_t c = 0; c < t.dims.c; ++c)
                for (std::int64_t y = 0; y < t.dims.h; ++y)
                    for (std::int64_t x = 0; x < t.dims.w; ++x)
                        t.at(n, c, y, x) = value(first + n, c, p.y + y, p.x + x);
    }
    void labels(const frontend::Layer&, std::int64_t first, const Index& at, BasicView<std::int32_t> tile) override {
        const PlaneView<std::int32_t> t = planes(tile);
        const PlanePlace p = plane_place(at);
        for (std::int64_t n = 0; n < t.dims.n; ++n)
            for (std::int64_t y = 0; y < t.dims.h; ++y)
                for (std::int64_t x = 0; x < t.dims.w; ++x)
                    t.at(n, 0, y, x) = value(first + n, 7, p.y + y, p.x + x) > 0 ? 1 : 0;
    }

private:
    float value(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) const {
        std::uint64_t h =
            seed_ * 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(((n * 31 + c) * 1009 + y) * 1013 + x);
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        return static_cast<float>(static_cast<double>(h % 20001) / 10000.0 - 1.0);
    }
    std::uint64_t seed_;
};

using Loaded = test::NetworkFromText;

// Every kind of layer but batch norm (whose training statistics make a finite difference of one weight
// move every output): stride and padding, overlapping max pooling, average pooling, a residual add, a
// concat, global pooling and a fully connected head.
const char* small_net = R"(
input x [N, 2, 9, 7]
label y [N]
c1 = conv(3, kernel = 3, stride = 2, pad = 1)
r1 = leaky_relu(slope = 0.1)
c2 = conv(3, kernel = [3, 1], pad = [1, 0], dilation = 1)
s = add from r1, c2
p = maxpool(kernel = 3, stride = 1, pad = 1)
q = avgpool(kernel = 2, stride = 2) from s
cat = concat from p, s
c3 = conv(4, kernel = 1, bias = false) from cat
g = global_avgpool
f = fc(3)
loss = softmax_cross_entropy from f, y
)";

double loss_at(const frontend::Network& net, Kernels k, std::vector<std::vector<float>>* weights, HashData& data) {
    TrainConfig cfg;
    cfg.batch = 3;
    cfg.lr = 0.0;
    Trainer t(net, k, cfg, test::one_process(net, cfg.batch));
    if (weights) {
        auto st = t.state();
        for (std::size_t i = 0; i < weights->size(); ++i)
            std::copy((*weights)[i].begin(), (*weights)[i].end(), st[i].data);
    }
    return t.step(data, 0);
}

// Several losses, and logits that other layers read: per-pixel logits that a loss, an activation and a
// strided convolution read (the convolution's window reaches into the logits' margins), and a head with
// two losses on the same logits, whose logits also feed a second head with its own loss. The step
// minimizes the sum of the losses, so each path's gradient must be added to the others'.
const char* heads_net = R"(
input x [N, 2, 9, 7]
label y [N, 9, 7]
label z [N]
c1 = conv(3, kernel = 3, pad = 1)
p = conv(2, kernel = 3, pad = 1)
seg = pixel_cross_entropy from p, y
q = leaky_relu(slope = 0.2) from p
c2 = conv(3, kernel = 3, stride = 2, pad = 1) from p
c3 = conv(3, kernel = 3, stride = 2, pad = 1) from q
s = add from c2, c3
g = global_avgpool
f = fc(2)
cls = softmax_cross_entropy from f, z
again = softmax_cross_entropy from f, z
h = fc(2) from f
aux = softmax_cross_entropy from h, z
)";

// Every parameter's gradient from one step of the reference kernels (lr = 1, no momentum or decay: one step
// subtracts the gradient, g = w0 - w1) against central finite differences of the loss, in double.
void check_gradients(const char* text) {
    Loaded l(text);
    HashData data(3);
    const Kernels k = reference_kernels();
    TrainConfig cfg;
    cfg.batch = 3;
    cfg.lr = 1.0;
    cfg.momentum = 0.0;
    Trainer t(l.net, k, cfg, test::one_process(l.net, cfg.batch));
    std::vector<std::vector<float>> w0;
    for (const auto& s : t.state()) w0.emplace_back(s.data, s.data + s.size);
    t.step(data, 0);
    const auto st = t.state();
    int checked = 0;
    for (std::size_t i = 0; i < st.size(); ++i) {
        if (st[i].name.find("momentum") != std::string::npos) continue;
        for (std::int64_t j = 0; j < st[i].size; j += std::max<std::int64_t>(1, st[i].size / 5)) {
            const double grad = w0[i][static_cast<std::size_t>(j)] - st[i].data[j];
            const float eps = 2e-3f;  // small enough not to cross a ReLU kink or change a max
            auto plus = w0, minus = w0;
            plus[i][static_cast<std::size_t>(j)] += eps;
            minus[i][static_cast<std::size_t>(j)] -= eps;
            const double fd = (loss_at(l.net, k, &plus, data) - loss_at(l.net, k, &minus, data)) / (2 * eps);
            INFO(st[i].name << "[" << j << "] gradient " << grad << " finite difference " << fd);
            CHECK(grad == Approx(fd).margin(2e-3).epsilon(2e-2));
            ++checked;
        }
    }
    CHECK(checked > 20);
}

// A few steps of the CPU kernels against the reference kernels: the losses, and every weight after.
void check_cpu_like_reference(const char* text, const Kernels& kernels = cpu_kernels()) {
    Loaded l(text);
    TrainConfig cfg;
    cfg.batch = 3;
    cfg.lr = 0.05;
    const scheduler::Plan plan = test::one_process(l.net, cfg.batch);
    Trainer ref(l.net, reference_kernels(), cfg, plan), cpu(l.net, kernels, cfg, plan);
    HashData data(5);
    for (int step = 0; step < 4; ++step) {
        const double a = ref.step(data, step * 3), b = cpu.step(data, step * 3);
        CHECK(b == Approx(a).epsilon(1e-4));
        REQUIRE(ref.last_losses().size() == cpu.last_losses().size());
        for (std::size_t i = 0; i < ref.last_losses().size(); ++i)
            CHECK(cpu.last_losses()[i].value == Approx(ref.last_losses()[i].value).epsilon(1e-4));
    }
    const auto sa = ref.state(), sb = cpu.state();
    REQUIRE(sa.size() == sb.size());
    for (std::size_t i = 0; i < sa.size(); ++i) {
        INFO(sa[i].name);
        for (std::int64_t j = 0; j < sa[i].size; ++j) REQUIRE(sb[i].data[j] == Approx(sa[i].data[j]).margin(1e-4));
    }
}

}  // namespace

TEST_CASE("whole-network gradients agree with finite differences", "[trainer]") { check_gradients(small_net); }

TEST_CASE("several losses and logits with other readers: gradients agree with finite differences", "[trainer]") {
    check_gradients(heads_net);
}

// Sigmoids on planes and on a vector.
const char* sigmoid_net = R"(
input x [N, 2, 6, 5]
label y [N]
c1 = conv(3, kernel = 3, pad = 1)
s1 = sigmoid
c2 = conv(2, kernel = 3, stride = 2)
g = global_avgpool
f = fc(3)
s2 = sigmoid
h = fc(3)
loss = softmax_cross_entropy from h, y
)";

TEST_CASE("sigmoid: gradients agree with finite differences, and the CPU kernels train like the reference",
          "[trainer]") {
    check_gradients(sigmoid_net);
    check_cpu_like_reference(sigmoid_net);
}

// An encoder-decoder: a strided convolution down, every way up (nearest and bilinear upsampling, transposed
// convolutions with output_pad, and one whose stride beyond its kernel leaves outputs that no input
// reaches, without a bias), and a skip connection by concat: 4 x 3 back to 7 x 6 each way.
const char* decoder_net = R"(
input x [N, 2, 7, 6]
label y [N, 7, 6]
e = conv(3, kernel = 3, pad = 1)
d = conv(3, kernel = 3, stride = 2, pad = 1)
n = upsample(mode = nearest)
m = conv(2, kernel = [2, 1])
b = upsample(3, mode = bilinear) from d
kb = conv(2, kernel = [6, 4])
t = deconv(2, kernel = 3, stride = 2, pad = 1, output_pad = [0, 1]) from d
o = deconv(2, kernel = 2, stride = 3, pad = 2, output_pad = [0, 2], bias = false) from d
c = concat from t, e, o, m, kb
p = conv(3, kernel = 1)
loss = pixel_cross_entropy from p, y
)";

TEST_CASE("upsample and deconv: gradients agree with finite differences, and the CPU kernels train like the "
          "reference",
          "[trainer]") {
    check_gradients(decoder_net);
    check_cpu_like_reference(decoder_net);
}

// Group norm (on planes, one group per channel, and on a vector), tanh, gelu and dropout (on planes, in a
// residual branch, and on a vector).
const char* modern_net = R"(
input x [N, 4, 6, 5]
label y [N]
c1 = conv(4, kernel = 3, pad = 1)
n1 = groupnorm(2)
t1 = tanh
d1 = dropout(0.3)
c2 = conv(4, kernel = 3, pad = 1)
s = add from d1, c2
c3 = conv(4, kernel = 3, stride = 2) from s
n2 = groupnorm(groups = 4, eps = 1e-3)
e1 = gelu
g = global_avgpool
f = fc(4)
n3 = groupnorm(2)
d2 = dropout(p = 0.5)
h = fc(3)
loss = softmax_cross_entropy from h, y
)";

TEST_CASE("groupnorm, tanh, gelu and dropout: gradients agree with finite differences, and the CPU kernels train "
          "like the reference",
          "[trainer]") {
    check_gradients(modern_net);
    check_cpu_like_reference(modern_net);
}

TEST_CASE("dropout drops in training steps only: evaluation and training = false are the identity", "[trainer]") {
    auto with_p = [](const char* p) {
        std::string text = modern_net;
        for (const char* from : {"dropout(0.3)", "dropout(p = 0.5)"}) text.replace(text.find(from), std::strlen(from), p);
        return text;
    };
    const Loaded dropping(with_p("dropout(0.5)")), keeping(with_p("dropout(0)"));
    HashData data(6);
    TrainConfig cfg;
    cfg.batch = 3;
    cfg.lr = 0.05;
    auto losses = [&](const frontend::Network& net, bool training) {
        TrainConfig c = cfg;
        c.training = training;
        Trainer t(net, reference_kernels(), c, test::one_process(net, c.batch));
        std::vector<double> out;
        for (int step = 0; step < 3; ++step) out.push_back(t.step(data, step * 3));
        out.push_back(t.evaluate(data, 9));
        return out;
    };
    const auto on = losses(dropping.net, true), off = losses(dropping.net, false), none = losses(keeping.net, true);
    CHECK(off == none);       // training = false: dropout is the identity in steps and their backward
    CHECK(on[0] != none[0]);  // in training, it drops
    // Evaluation never drops: the same weights give the same loss with p = 0.5 and p = 0.
    TrainConfig c = cfg;
    Trainer a(dropping.net, reference_kernels(), c, test::one_process(dropping.net, c.batch)),
        b(keeping.net, reference_kernels(), c, test::one_process(keeping.net, c.batch));
    CHECK(a.evaluate(data, 0) == b.evaluate(data, 0));
    // And a step's mask is drawn again alike: the same seed and samples give the same step, bit for bit.
    Trainer again(dropping.net, reference_kernels(), c, test::one_process(dropping.net, c.batch));
    CHECK(again.step(data, 0) == a.step(data, 0));
}

TEST_CASE("the CPU kernels train like the reference kernels", "[trainer]") { check_cpu_like_reference(small_net); }

TEST_CASE("several losses and logits with other readers: the CPU kernels train like the reference kernels",
          "[trainer]") {
    check_cpu_like_reference(heads_net);
}

// Blocks of 16 and 32 channels between convolutions, batch norms, (leaky) ReLUs and a residual add, whose tiles
// the CPU kernels keep blocked; the input, the last convolution (read by pooling) and the head stay planar.
const char* blocked_net = R"(
input x [N, 3, 12, 10]
label y [N]
c1 = conv(16, kernel = 3, pad = 1)
b1 = batchnorm
r1 = relu
c2 = conv(16, kernel = 3, pad = 1, bias = false)
b2 = batchnorm
s = add from r1, b2
r2 = relu
c3 = conv(32, kernel = 3, stride = 2, pad = 1)
r3 = leaky_relu(slope = 0.1)
c4 = conv(32, kernel = 1)
m = maxpool(kernel = 2, stride = 2)
g = global_avgpool
f = fc(3)
loss = softmax_cross_entropy from f, y
)";

// The CPU kernels, counting the views of each layout that batch norm and the convolutions are given.
struct CountingKernels {
    struct Conv final : ConvKernels {
        ConvKernels* inner;
        int blocked = 0, planar = 0;
        void count(ConstView x) { ++(x.blocked() ? blocked : planar); }
        void forward(ConstView x, ConstView w, const float* b, View y, const Window& win) override {
            count(x), inner->forward(x, w, b, y, win);
        }
        bool forward_relu(ConstView x, ConstView w, const float* b, float slope, View y, const Window& win) override {
            const bool fused = inner->forward_relu(x, w, b, slope, y, win);
            if (fused) count(x);  // else the trainer calls forward
            return fused;
        }
        void backward_data(ConstView dy, ConstView w, View dx, const Window& win) override {
            count(dx), inner->backward_data(dy, w, dx, win);
        }
        void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& win) override {
            count(x), inner->backward_weights(x, dy, dw, db, win);
        }
        bool blocks_weights(const Dims& w) const override { return inner->blocks_weights(w); }
    } conv;
    Kernels kernels = cpu_kernels();
    CountingKernels() {
        conv.inner = kernels.conv;
        kernels.conv = &conv;
    }
};

TEST_CASE("blocked tiles: the CPU kernels train like the reference kernels, with blocked views where they can",
          "[trainer][blocked]") {
    // Blocked on any CPU: on one without AVX-512 the kernel set keeps tiles planar (its oneDNN convolutions on
    // blocks of 16 channels would be the reference ones, slower but as exact), and the trainer's blocked
    // tiles are tested all the same.
    CountingKernels counting;
    counting.kernels.blocked = true;
    check_cpu_like_reference(blocked_net, counting.kernels);
    // Per step: c1 reads the planar input, forward and backward-weights (no backward-data); c2, c3 and c4
    // read blocked tiles in all three passes.
    CHECK(counting.conv.planar == 4 * 2);
    CHECK(counting.conv.blocked == 4 * 3 * 3);
    // Without the kernel set's say-so, every tile stays planar.
    CountingKernels planar;
    planar.kernels.blocked = false;
    check_cpu_like_reference(blocked_net, planar.kernels);
    CHECK(planar.conv.blocked == 0);
}

TEST_CASE("a step's loss is the sum of its loss layers', each reported by name", "[trainer]") {
    Loaded l(heads_net);
    TrainConfig cfg;
    cfg.batch = 3;
    Trainer t(l.net, reference_kernels(), cfg, test::one_process(l.net, cfg.batch));
    HashData data(4);
    const double loss = t.step(data, 0);
    const auto& each = t.last_losses();
    REQUIRE(each.size() == 4);
    CHECK(each[0].name == "seg");
    CHECK(each[1].name == "cls");
    CHECK(each[2].name == "again");
    CHECK(each[3].name == "aux");
    CHECK(each[1].value == each[2].value);  // the same logits and labels
    CHECK(loss == Approx(each[0].value + each[1].value + each[2].value + each[3].value).epsilon(1e-12));
    for (const auto& e : each) CHECK(e.value > 0.0);
    // Forward only reports them too.
    const double evaluated = t.evaluate(data, 3);
    REQUIRE(t.last_losses().size() == 4);
    double sum = 0.0;
    for (const auto& e : t.last_losses()) sum += e.value;
    CHECK(evaluated == Approx(sum).epsilon(1e-12));
}

TEST_CASE("training the tiny mesh network lowers the loss, the same on every run", "[trainer]") {
    SourceManager sources;
    Diagnostics diags;
    auto net = frontend::load_network(std::string(DSL_SOURCE_DIR) + "/samples/mesh_tiny.net", sources, diags);
    REQUIRE(net);
    auto run = [&] {
        TrainConfig cfg;
        cfg.batch = 4;
        cfg.lr = 0.05;
        cfg.seed = 11;
        Trainer t(net->net, cpu_kernels(), cfg, test::one_process(net->net, cfg.batch));
        HashData data(1);
        std::vector<double> losses;
        for (int step = 0; step < 8; ++step) losses.push_back(t.step(data, 0));  // the same 4 samples
        return losses;
    };
    const auto first = run(), second = run();
    CHECK(first == second);
    CHECK(first.back() < 0.8 * first.front());
}

TEST_CASE("gradients that are never needed at once share memory", "[trainer]") {
    // mesh_tiny is a chain: its gradients are live two or three at a time, so the trainer holds far less
    // than a gradient per activation.
    SourceManager sources;
    Diagnostics diags;
    auto net = frontend::load_network(std::string(DSL_SOURCE_DIR) + "/samples/mesh_tiny.net", sources, diags);
    REQUIRE(net);
    TrainConfig cfg;
    cfg.batch = 4;
    Trainer t(net->net, cpu_kernels(), cfg, test::one_process(net->net, cfg.batch));
    std::int64_t activations = 0, params = 0;
    for (const auto& l : net->net.layers) activations += l.activation_bytes * cfg.batch, params += l.params * 4;
    CHECK(t.memory_bytes() > activations + 3 * params);          // every activation, weights, gradients, momenta
    CHECK(t.memory_bytes() < activations * 3 / 2 + 3 * params);  // and gradients for much less than the rest
}

TEST_CASE("a tensor over memory it does not own", "[tensor]") {
    std::vector<float> memory(2 * 3 * 4 * 5, 0.0f);
    Tensor t = Tensor::over(memory.data(), Dims{1, 2, {2, 3}}, Margins{{1, 1}, {1, 1}});
    CHECK(t.size() == 2 * 4 * 5);
    t.at(0, 1, {0, 0}) = 7.0f;
    CHECK(memory[static_cast<std::size_t>(20 + 5 + 1)] == 7.0f);
    Tensor copy = t;  // lies over the same memory
    copy.fill(1.0f);
    CHECK(memory[0] == 1.0f);
    CHECK(memory[39] == 1.0f);
    CHECK(memory[40] == 0.0f);
    Tensor owned(Dims{1, 1, {2, 2}});
    Tensor owned_copy = owned;  // its own elements
    owned_copy.fill(3.0f);
    CHECK(owned.at(0, 0, {0, 0}) == 0.0f);
    CHECK(owned_copy.at(0, 0, {1, 1}) == 3.0f);
}

TEST_CASE("profiling times every layer of a step, and the times add up to at most the step", "[trainer]") {
    Loaded l(small_net);
    TrainConfig cfg;
    cfg.batch = 3;
    Trainer t(l.net, cpu_kernels(), cfg, test::one_process(l.net, cfg.batch));
    HashData data(2);
    t.step(data, 0);
    CHECK(t.last_profile().layers.empty());  // off until asked
    t.profile(true);
    const auto t0 = std::chrono::steady_clock::now();
    t.step(data, 0);
    const double step = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StepProfile& p = t.last_profile();
    REQUIRE(p.layers.size() == l.net.layers.size());
    double sum = p.update;
    for (std::size_t i = 0; i < p.layers.size(); ++i) {
        const LayerTime& lt = p.layers[i];
        INFO(l.net.layers[i].name);
        CHECK(lt.forward_wait <= lt.forward);
        CHECK(lt.backward_wait <= lt.backward);
        CHECK(lt.forward_wait + lt.backward_wait < 1e-3);  // one process waits for no one
        if (l.net.layers[i].op == frontend::OpKind::conv) {
            CHECK(lt.forward > 0.0);
            CHECK(lt.backward > 0.0);
        }
        sum += lt.forward + lt.backward;
    }
    CHECK(sum <= step);
    CHECK(sum > 0.5 * step);
}

TEST_CASE("a convolution of precision bfloat16 runs the kernels with bfloat16 products", "[trainer][precision]") {
    // The set's float32 and bfloat16 convolutions as counting wrappers over the reference's: c2 alone is of
    // precision bfloat16, so its three passes go to the one and every other convolution's to the other.
    struct Counting final : ConvKernels {
        explicit Counting(ConvKernels& wrapped) : inner(wrapped) {}
        void forward(ConstView x, ConstView w, const float* b, View y, const Window& win) override {
            ++calls;
            inner.forward(x, w, b, y, win);
        }
        void backward_data(ConstView dy, ConstView w, View dx, const Window& win) override {
            ++calls;
            inner.backward_data(dy, w, dx, win);
        }
        void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& win) override {
            ++calls;
            inner.backward_weights(x, dy, dw, db, win);
        }
        ConvKernels& inner;
        int calls = 0;
    };
    Loaded l(small_net);
    Kernels k = reference_kernels();
    const std::unique_ptr<ConvKernels> rounded16 = rounded_to(*k.conv, scheduler::Precision::float16);
    Counting float32(*k.conv), bfloat16(*k.conv_bfloat16), float16(*rounded16);
    k.conv = &float32;
    k.conv_bfloat16 = &bfloat16;
    k.conv_float16 = &float16;
    TrainConfig cfg;
    cfg.batch = 3;
    scheduler::Plan plan = test::one_process(l.net, cfg.batch);
    for (std::size_t i = 0; i < l.net.layers.size(); ++i) {
        if (l.net.layers[i].name == "c2") plan.layers[i].dist.precision = scheduler::Precision::bfloat16;
        if (l.net.layers[i].name == "c3") plan.layers[i].dist.precision = scheduler::Precision::float16;
    }
    Trainer t(l.net, k, cfg, plan);
    HashData data(5);
    t.step(data, 0);
    CHECK(bfloat16.calls == 3);  // c2's forward, backward-data and backward-weights
    CHECK(float16.calls == 3);   // c3's
    CHECK(float32.calls == 2);   // c1's forward and backward-weights (it reads the data)
}

namespace {

// The weights, biases and optimizer state (not batch norm's running statistics, which forward moves).
std::vector<std::vector<float>> trained_state(Trainer& t) {
    std::vector<std::vector<float>> out;
    for (const StateTensor& s : t.state())
        if (s.name.find("running") == std::string::npos) out.emplace_back(s.data, s.data + s.size);
    return out;
}

}  // namespace

TEST_CASE("loss scaling by a power of two changes no value that stays finite", "[trainer][precision]") {
    // As GradScaler's: the loss's gradient times the scale, the weight gradients times its inverse. Every
    // gradient is a sum of products of the loss's, so a power of two moves only exponents. The scale doubles
    // after every second step here, so it changes within the run too.
    Loaded l(small_net);
    TrainConfig plain;
    plain.batch = 3;
    TrainConfig scaled = plain;
    scaled.loss_scale = 65536.0;
    scaled.loss_scale_interval = 2;
    const scheduler::Plan plan = test::one_process(l.net, plain.batch);
    Trainer a(l.net, cpu_kernels(), plain, plan), b(l.net, cpu_kernels(), scaled, plan);
    HashData data(9);
    for (int step = 0; step < 5; ++step) {
        CHECK(a.step(data, step * 3) == b.step(data, step * 3));
        CHECK_FALSE(b.last_step_skipped());
    }
    CHECK(b.loss_scale().scale == 65536.0 * 4);
    CHECK(b.loss_scale().good_steps == 1);
    CHECK(trained_state(a) == trained_state(b));
}

TEST_CASE("a step whose gradients overflow at its loss scale is skipped and halves it", "[trainer][precision]") {
    // From 2^140 the loss's gradient (the scale over 3 samples) is beyond float32's range, and so are the
    // weight gradients: each such step leaves the weights and momenta as they were and halves the scale,
    // until one fits, which updates them.
    Loaded l(small_net);
    const Kernels k = GENERATE(cpu_kernels(), reference_kernels());
    TrainConfig cfg;
    cfg.batch = 3;
    cfg.loss_scale = std::ldexp(1.0, 140);
    Trainer t(l.net, k, cfg, test::one_process(l.net, cfg.batch));
    HashData data(11);
    int skipped = 0;
    for (int step = 0; step < 200; ++step) {
        const auto before = trained_state(t);
        const double scale = t.loss_scale().scale;
        CHECK(std::isfinite(t.step(data, 0)));
        CHECK(t.updates() == step + 1);  // a step of the schedule all the same
        if (!t.last_step_skipped()) {
            CHECK(t.loss_scale().scale == scale);
            CHECK(t.loss_scale().good_steps == 1);
            CHECK(trained_state(t) != before);
            break;
        }
        ++skipped;
        CHECK(t.loss_scale().scale == scale / 2);
        CHECK(trained_state(t) == before);
    }
    CHECK(skipped >= 11);  // 2^140 to 2^130: over 3 samples, beyond float32
    CHECK_FALSE(t.last_step_skipped());
}

namespace {

// Convolutions, batch norms and adds that a ReLU reads: fused with it (b1 and r1, s and r2, b3 and the leaky r3,
// c4 and r6), and not (b4 has a second reader); t adds three inputs, which the CPU kernels do not fuse (they
// run apart into the ReLU's tile).
const char* relu_net = R"(
input x [N, 3, 8, 8]
label y [N]
c1 = conv(4, kernel = 3, pad = 1, bias = false)
b1 = batchnorm
r1 = relu
c2 = conv(4, kernel = 3, pad = 1, bias = false)
b2 = batchnorm
s = add from b2, r1
r2 = relu
c3 = conv(4, kernel = 3, stride = 2, pad = 1)
b3 = batchnorm
r3 = leaky_relu(slope = 0.1)
b4 = batchnorm from c3
r4 = relu
t = add from r4, b4, r3
r5 = relu
c4 = conv(4, kernel = 3, pad = 1)
r6 = relu
g = global_avgpool
f = fc(3)
loss = softmax_cross_entropy from f, y
)";

// The CPU kernels' convolution, batch norm and add, counting the calls that fuse a ReLU, or declining to fuse.
struct FusingConv final : ConvKernels {
    FusingConv(ConvKernels& wrapped, bool f) : inner(wrapped), fuse(f) {}
    void forward(ConstView x, ConstView w, const float* b, View y, const Window& win) override {
        inner.forward(x, w, b, y, win);
    }
    bool forward_relu(ConstView x, ConstView w, const float* b, float slope, View y, const Window& win) override {
        if (!fuse) return false;
        const bool fused = inner.forward_relu(x, w, b, slope, y, win);
        calls += fused;
        return fused;
    }
    void backward_data(ConstView dy, ConstView w, View dx, const Window& win) override {
        inner.backward_data(dy, w, dx, win);
    }
    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& win) override {
        inner.backward_weights(x, dy, dw, db, win);
    }
    ConvKernels& inner;
    bool fuse;
    int calls = 0;
};

struct FusingBatchNorm final : BatchNormKernels {
    FusingBatchNorm(BatchNormKernels& wrapped, bool f) : inner(wrapped), fuse(f) {}
    void statistics(ConstView x, double* sum, double* sum_sq) override { inner.statistics(x, sum, sum_sq); }
    void forward(ConstView x, const float* m, const float* s, const float* g, const float* b, View y) override {
        inner.forward(x, m, s, g, b, y);
    }
    bool forward_relu(ConstView x, const float* m, const float* s, const float* g, const float* b, float slope,
                      View y) override {
        if (!fuse) return false;
        const bool fused = inner.forward_relu(x, m, s, g, b, slope, y);
        calls += fused;
        return fused;
    }
    void backward_statistics(ConstView x, ConstView dy, const float* m, const float* s, double* a, double* b) override {
        inner.backward_statistics(x, dy, m, s, a, b);
    }
    void backward(ConstView x, ConstView dy, const float* m, const float* s, const float* g, const double* a,
                  const double* b, double count, View dx) override {
        inner.backward(x, dy, m, s, g, a, b, count, dx);
    }
    BatchNormKernels& inner;
    bool fuse;
    int calls = 0;
};

struct FusingEltwise final : EltwiseKernels {
    FusingEltwise(EltwiseKernels& wrapped, bool f) : inner(wrapped), fuse(f) {}
    void add(const std::vector<ConstView>& xs, View y) override { inner.add(xs, y); }
    bool add_relu(const std::vector<ConstView>& xs, float slope, View y) override {
        if (!fuse) return false;
        const bool fused = inner.add_relu(xs, slope, y);
        calls += fused;
        return fused;
    }
    void copy(ConstView x, View y) override { inner.copy(x, y); }
    void accumulate(ConstView x, View y) override { inner.accumulate(x, y); }
    void sgd(float* w, float* m, const float* g, std::int64_t count, float lr, float mo, float d) override {
        inner.sgd(w, m, g, count, lr, mo, d);
    }
    void adam(float* w, float* m, float* v, const float* g, std::int64_t count, const AdamStep& step) override {
        inner.adam(w, m, v, g, count, step);
    }
    bool unscale(const std::vector<GradientArray>& g, float factor) override { return inner.unscale(g, factor); }
    EltwiseKernels& inner;
    bool fuse;
    int calls = 0;
};

}  // namespace

TEST_CASE("a ReLU fused into the convolution, batch norm or add it reads trains bit for bit as the two apart",
          "[trainer]") {
    Loaded l(relu_net);
    TrainConfig cfg;
    cfg.batch = 3;
    cfg.lr = 0.05;
    const scheduler::Plan plan = test::one_process(l.net, cfg.batch);
    FusingBatchNorm fused_bn(*cpu_kernels().batchnorm, true), apart_bn(*cpu_kernels().batchnorm, false);
    FusingEltwise fused_add(*cpu_kernels().eltwise, true), apart_add(*cpu_kernels().eltwise, false);
    FusingConv fused_conv(*cpu_kernels().conv, true), apart_conv(*cpu_kernels().conv, false);
    Kernels fused = cpu_kernels(), apart = cpu_kernels();
    fused.batchnorm = &fused_bn, fused.eltwise = &fused_add, fused.conv = &fused_conv;
    apart.batchnorm = &apart_bn, apart.eltwise = &apart_add, apart.conv = &apart_conv;
    Trainer a(l.net, fused, cfg, plan), b(l.net, apart, cfg, plan);
    HashData data(3);
    for (int step = 0; step < 4; ++step) CHECK(a.step(data, step * 3) == b.step(data, step * 3));
    CHECK(trained_state(a) == trained_state(b));
    CHECK(fused_bn.calls == 4 * 2);  // b1 and b3, every step
    CHECK(fused_add.calls == 4);     // s
    CHECK(fused_conv.calls == 4);    // c4 (oneDNN runs it with the implementation it runs alone)
    // Evaluation runs every layer apart, so that any layer's values can be read.
    CHECK(a.evaluate(data, 12) == b.evaluate(data, 12));
    CHECK(fused_bn.calls == 4 * 2);
    for (const char* name : {"b1", "s", "c4", "r1", "r2", "r3", "r5", "r6"}) {
        INFO(name);
        const int layer = l.net.find(name);
        REQUIRE(layer >= 0);
        CHECK(a.output_tile(layer).values == b.output_tile(layer).values);
    }
}
