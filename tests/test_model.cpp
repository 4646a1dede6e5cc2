// The performance model: halos from the tiles' geometry (faces and corners, none where nothing is cut, one
// side only for stride 2), overlap, shuffles, allreduces after Thakur et al., measured times where the
// platform has them, memory, and processes that share a processor.
#include "run_dsl.hpp"
#include "support.hpp"

#include <dsl/backend/kinds.hpp>
#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/platform.hpp>

#include <catch2/catch.hpp>

using namespace dsl;
using namespace dsl::scheduler;

namespace {

const char* net_text = R"(
input x [N, 8, 32, 32]
label y [N, 16, 16]
c1 = conv(16, kernel = 3, pad = 1)
c2 = conv(16, kernel = 3, stride = 2, pad = 1)
b = batchnorm
r = relu
pred = conv(2, kernel = 1)
loss = pixel_cross_entropy from pred, y
)";

Platform platform() {
    Platform p;
    p.device = Device::gpu;  // a process is a processor
    p.procs_per_node = 4;
    p.nodes = 1;
    p.memory = 8.0 * (1 << 30);
    p.flops = 100e9;
    p.efficiency = 0.5;
    p.memory_bandwidth = 10e9;
    p.kernel_latency = 2e-6;
    p.node = {1e-6, 4e9};
    p.network = p.node;
    return p;
}

Distribution dist(std::int64_t n, std::int64_t h, std::int64_t w, bool overlap = false) {
    return Distribution{Split{n, 1, 1, {1, h, w}}, overlap, BatchNormStats::batch, std::nullopt};
}

}  // namespace

TEST_CASE("model: halo exchanges follow the tiles", "[model]") {
    test::NetworkFromText l(net_text);
    const int c1 = l.net.find("c1"), c2 = l.net.find("c2"), pred = l.net.find("pred");
    Model m(l.net, platform(), 4, 4, backend::kind_costs());
    // Samples only: no halo. The first convolution reads the data, which comes with its halo.
    CHECK(m.layer(c2, dist(4, 1, 1)).halo_bytes == 0);
    CHECK(m.layer(c1, dist(1, 4, 1)).halo_bytes == 0);
    // c2 reads c1's 32x32 output, 16 channels, 4 samples. Rows in 4: an interior process gets a row from
    // above only (stride 2 reads one row before its first and none after its last): 32 columns.
    const LayerCost rows = m.layer(c2, dist(1, 4, 1));
    CHECK(rows.halo_bytes == 2 * 4 * 16 * 32 * 1 * 4);  // forward and backward
    // Rows in 2, columns in 2: one face each way and a corner.
    const LayerCost grid = m.layer(c2, dist(1, 2, 2));
    CHECK(grid.halo_bytes == 2 * 4 * 16 * (16 + 16 + 1) * 4);
    // A 1x1 convolution needs none.
    CHECK(m.layer(pred, dist(1, 2, 2)).halo_bytes == 0);
    CHECK(rows.forward_halo > 0);
    CHECK(rows.backward_halo > 0);
}

TEST_CASE("model: overlap hides the halo behind interior compute", "[model]") {
    test::NetworkFromText l(net_text);
    const int c2 = l.net.find("c2");
    Model m(l.net, platform(), 4, 4, backend::kind_costs());
    const LayerCost off = m.layer(c2, dist(1, 4, 1, false)), on = m.layer(c2, dist(1, 4, 1, true));
    CHECK(on.forward_halo < off.forward_halo);
    CHECK(on.backward_halo < off.backward_halo);
    CHECK(on.halo_bytes == off.halo_bytes);
    // The interior and the strips cost the whole compute, and a little more for the extra calls.
    CHECK(on.forward >= off.forward);
}

TEST_CASE("model: compute shrinks with the tile: allreduces and shuffles as they should", "[model]") {
    test::NetworkFromText l(net_text);
    const int c2 = l.net.find("c2"), b = l.net.find("b"), r = l.net.find("r");
    Model one(l.net, platform(), 1, 4, backend::kind_costs()), four(l.net, platform(), 4, 4, backend::kind_costs());
    const double whole = one.layer(c2, dist(1, 1, 1)).forward;
    CHECK(four.layer(c2, dist(4, 1, 1)).forward < whole / 2);
    CHECK(four.layer(c2, dist(1, 2, 2)).forward < whole / 2);
    // One process has nothing to allreduce; four do, and more bytes take longer.
    CHECK(one.layer(c2, dist(1, 1, 1)).allreduce == 0.0);
    CHECK(four.layer(c2, dist(4, 1, 1)).allreduce > 0.0);
    CHECK(four.allreduce(4, 1e6, false) > four.allreduce(4, 1e3, false));
    CHECK(four.allreduce(1, 1e6, false) == 0.0);
    // Batch norm sums its statistics over every process (bn=batch), over none when local.
    Distribution local = dist(4, 1, 1);
    local.bn = BatchNormStats::local;
    CHECK(four.layer(b, dist(4, 1, 1)).forward_sync > 0.0);
    CHECK(four.layer(b, local).forward_sync == 0.0);
    // The same split: no shuffle. Samples to rows: a quarter of the tile stays, the rest moves, both ways.
    const Split samples{4, 1, 1, {1, 1, 1}}, rows{1, 1, 1, {1, 4, 1}};
    CHECK(four.shuffle(r, 0, samples, samples).bytes == 0);
    const ShuffleCost s = four.shuffle(r, 0, samples, rows);
    CHECK(s.bytes == 2 * (4 * 4 * 16 - 1 * 4 * 16) * 16 * 4);
    CHECK(s.seconds > 0.0);
}

TEST_CASE("model: channel and filter splits cut the compute: their collectives are shuffles", "[model]") {
    test::NetworkFromText l(net_text);
    const int c2 = l.net.find("c2"), b = l.net.find("b"), r = l.net.find("r");
    Model one(l.net, platform(), 1, 4, backend::kind_costs()), four(l.net, platform(), 4, 4, backend::kind_costs());
    const Split f4{1, 1, 4, {1, 1, 1}}, c4{1, 4, 1, {1, 1, 1}};
    auto under = [](const Split& s) { return Distribution{s, false, BatchNormStats::batch, std::nullopt}; };
    const double whole = one.layer(c2, dist(1, 1, 1)).forward;
    CHECK(four.layer(c2, under(f4)).forward < whole / 2);
    CHECK(four.layer(c2, under(c4)).forward < whole / 2);
    // A batch norm on a quarter of the channels sums its statistics over the processes that hold them: none
    // other here.
    CHECK(four.layer(b, under(f4)).forward_sync == 0.0);
    CHECK(four.layer(b, dist(4, 1, 1)).forward_sync > 0.0);
    // Filters in 4: c2's block is the one b reads, and b's the one r reads; nothing moves.
    CHECK(four.shuffle(b, 0, f4, f4).bytes == 0);
    CHECK(four.shuffle(r, 0, f4, f4).bytes == 0);
    // c2 reads every channel of c1 (16 at 32x32, 4 samples), whose filters are in 4 blocks: each process
    // gathers the other three quarters, and sends the gradient's back.
    CHECK(four.shuffle(c2, 0, f4, f4).bytes == 2 * 4 * 12 * 32 * 32 * 4);
    // Channels in 4: c2 holds partial sums of all 16 of its channels (16x16); b reads its block of 4, whose
    // sum comes from the four processes, its own part included.
    CHECK(four.shuffle(b, 0, c4, c4).bytes == 2 * 3 * 4 * 4 * 16 * 16 * 4);
    CHECK(four.shuffle(b, 0, c4, c4).seconds > 0.0);
    // Each process holds a quarter of the weights, which nobody else holds: nothing to allreduce. Two samples
    // by two filter blocks: each block's two holders sum half of the gradient.
    CHECK(four.layer(c2, under(f4)).allreduce == 0.0);
    CHECK(four.layer(c2, under(c4)).allreduce == 0.0);
    const Split n2f2{2, 1, 2, {1, 1, 1}};
    const double half = four.layer(c2, under(n2f2)).allreduce;
    CHECK(half > 0.0);
    CHECK(half < four.layer(c2, dist(4, 1, 1)).allreduce);
    CHECK(half == Approx(four.allreduce(2, (16.0 * 16 * 9 / 2 + 16.0 / 2) * 4, false)));
    // The parameters, their gradients and momenta: a quarter of them on each process.
    auto every = [&](const Split& s) {
        Schedule sched;
        sched.procs = 4;
        sched.batch = 4;
        for (std::size_t i = 0; i < l.net.layers.size(); ++i) sched.layers.push_back(under(s));
        return four.predict(sched);
    };
    const Prediction samples = every(Split{4, 1, 1, {1, 1, 1}}), filters = every(f4);
    CHECK(samples.parameters == Approx(3.0 * 4.0 * static_cast<double>(l.net.total_params()) +
                                       4.0 * 4.0 * 16));  // and batch norm's statistics, whole
    CHECK(filters.parameters == Approx(samples.parameters / 4 + 3.0 * 4.0 * 16));
    CHECK(filters.update == Approx(samples.update / 4));
}

TEST_CASE("model: measured times replace the analytic ones", "[model]") {
    test::NetworkFromText l(net_text);
    const int c2 = l.net.find("c2");
    Platform p = platform();
    Model analytic(l.net, p, 2, 4, backend::kind_costs());
    const auto keys = analytic.kernel_keys(c2, dist(2, 1, 1));
    REQUIRE(keys.size() == 3);  // forward, backward-data, backward-weights
    CHECK(keys[0] == "conv.forward d=1x1 k=3x3 s=2x2 threads=1 x=2x16x33x33 y=2x16x16x16");
    for (const auto& k : keys) p.times[k] = 0.125;
    Model measured(l.net, p, 2, 4, backend::kind_costs());
    const LayerCost c = measured.layer(c2, dist(2, 1, 1));
    CHECK(c.forward == 0.125);
    CHECK(c.backward_data == 0.125);
    CHECK(c.backward_weights == 0.125);
    // Calibration's factors (training over kernels alone) scale them; drift adds waits in proportion.
    const int size = Model::size_class(measured.tile_bytes(c2, Split{2, 1, 1, {1, 1, 1}}) * 2);  // a neighbour class
    p.times[measured.factor_key(frontend::OpKind::conv, true, size)] = 1.5e-3;
    p.times[time_key("drift", {{"compute", {1000}}, {"procs", {2}}})] = 0.1e-3;
    Model trained(l.net, p, 2, 4, backend::kind_costs());
    const LayerCost t = trained.layer(c2, dist(2, 1, 1));
    CHECK(t.forward == Approx(0.1875));
    CHECK(t.backward_data == 0.125);  // no backward factor: 1
    CHECK(t.forward_sync == Approx(0.1 * 0.1875));
    // Measured communication is interpolated between sizes.
    p.times["sendrecv bytes=1000"] = 1e-5;
    p.times["sendrecv bytes=3000"] = 3e-5;
    Model comm(l.net, p, 2, 4, backend::kind_costs());
    CHECK(comm.sendrecv(2000, false) == Approx(2e-5));
}

TEST_CASE("model: memory per process, and processes that share a processor", "[model]") {
    test::NetworkFromText l(net_text);
    Platform p = platform();
    Schedule one, spatial;
    one.procs = 1;
    spatial.procs = 4;
    for (std::size_t i = 0; i < l.net.layers.size(); ++i) {
        one.layers.push_back(dist(1, 1, 1));
        spatial.layers.push_back(dist(1, 2, 2, true));
    }
    const Prediction a = Model(l.net, p, 1, 4, backend::kind_costs()).predict(one),
                     b = Model(l.net, p, 4, 4, backend::kind_costs()).predict(spatial);
    CHECK(b.activations < a.activations / 3);
    CHECK(b.memory < a.memory);
    CHECK(b.parameters == a.parameters);  // every process holds the weights
    CHECK(a.step > b.step);
    // A CPU platform: one process uses the node's spare cores, and more processes than cores share them.
    p.device = Device::cpu;
    p.procs_per_node = 2;
    p.nodes = 1;
    Model single(l.net, p, 1, 4, backend::kind_costs()), crowded(l.net, p, 4, 4, backend::kind_costs());
    CHECK(single.threads() == 2);
    CHECK(crowded.threads() == 1);
    CHECK(crowded.sharing() == 2.0);
    CHECK(crowded.memory_limit() == p.memory / 2);
}

TEST_CASE("model: the regression losses cost their elements and a sum over the processes", "[model]") {
    test::NetworkFromText l(R"(
input x [N, 8, 32, 32]
label t [N, 2, 32, 32] float
c1 = conv(16, kernel = 3, pad = 1)
pred = conv(2, kernel = 1)
sq = mse(weight = 0.5) from pred, t
ab = l1 from pred, t
bce = bce_with_logits from pred, t
)");
    const int sq = l.net.find("sq"), ab = l.net.find("ab"), bce = l.net.find("bce");
    Model one(l.net, platform(), 1, 4, backend::kind_costs()), four(l.net, platform(), 4, 4, backend::kind_costs());
    for (int loss : {sq, ab, bce}) {
        const LayerCost c1 = one.layer(loss, dist(1, 1, 1)), c4 = four.layer(loss, dist(1, 2, 2));
        CHECK(c1.forward > 0.0);
        CHECK(c4.forward < c1.forward);  // a quarter of the elements
        CHECK(c1.forward_sync == 0.0);
        CHECK(c4.forward_sync > 0.0);  // the loss's sum over the processes
        const auto keys = four.kernel_keys(loss, dist(1, 2, 2));
        REQUIRE(keys.size() == 1);
        CHECK(keys[0].rfind("regression.forward ", 0) == 0);
    }
    // bce's exp and log1p: more FLOPs per element than mse's.
    CHECK(l.net.layers[static_cast<std::size_t>(bce)].flops > l.net.layers[static_cast<std::size_t>(sq)].flops);
    CHECK(l.net.layers[static_cast<std::size_t>(sq)].flops == 4 * 2 * 32 * 32);
    CHECK(l.net.layers[static_cast<std::size_t>(sq)].weight == 0.5);
    CHECK(l.net.layers[static_cast<std::size_t>(ab)].weight == 1.0);
}

TEST_CASE("kernel names read back as the kind and phase that made them, and keep their spelling", "[model]") {
    using frontend::OpKind;
    for (const frontend::LayerKind& k : frontend::layer_kinds()) {
        if (!*k.kernels) continue;
        for (Phase p : {Phase::forward, Phase::backward, Phase::backward_data, Phase::backward_weights}) {
            const auto back = parse_kernel_name(kernel_name(k.op, p));
            REQUIRE(back);
            CHECK(std::string(frontend::kind_of(back->kind).kernels) == k.kernels);
            CHECK(back->phase == p);
        }
    }
    // What `.platform` files hold.
    CHECK(kernel_name(OpKind::conv, Phase::backward_data) == "conv.backward_data");
    CHECK(kernel_name(OpKind::relu, Phase::forward) == "activation.forward");
    CHECK(kernel_name(OpKind::leaky_relu, Phase::backward) == "activation.backward");
    CHECK(kernel_name(OpKind::pixel_cross_entropy, Phase::forward) == "loss.forward");
    CHECK(kernel_name(OpKind::bce_with_logits, Phase::forward) == "regression.forward");
    CHECK(kernel_name(OpKind::maxpool, Phase::backward) == "maxpool.backward");
    CHECK(kernel_name(OpKind::input, Phase::forward) == "input.forward");
    CHECK(factor_name(OpKind::leaky_relu, false) == "factor.leaky_relu.backward");
    CHECK(parse_kernel_name("activation.forward")->kind == OpKind::relu);
    for (const char* other : {"sgd", "step.update", "factor.conv.forward", "sendrecv", "conv.sideways", ".forward"})
        CHECK_FALSE(parse_kernel_name(other));
}

TEST_CASE("model: adam's update is costed under its own kernel, and more than sgd's", "[model][optimizer]") {
    test::NetworkFromText sgd(net_text);
    test::NetworkFromText adam(std::string(net_text) + "train adam(lr = 0.001)\n");
    Platform p = platform();
    Schedule s;
    s.procs = 2;
    for (std::size_t i = 0; i < sgd.net.layers.size(); ++i) s.layers.push_back(dist(2, 1, 1));
    const Prediction with_sgd = Model(sgd.net, p, 2, 4, backend::kind_costs()).predict(s),
                     with_adam = Model(adam.net, p, 2, 4, backend::kind_costs()).predict(s);
    CHECK(with_adam.update > with_sgd.update);
    // Measured times replace both, each under its name.
    const auto params = sgd.net.total_params();
    p.times[time_key(sgd_kernel, {{"params", {params}}, {"threads", {1}}})] = 1e-3;
    p.times[time_key(adam_kernel, {{"params", {params}}, {"threads", {1}}})] = 3e-3;
    CHECK(Model(sgd.net, p, 2, 4, backend::kind_costs()).predict(s).update == Approx(1e-3));
    CHECK(Model(adam.net, p, 2, 4, backend::kind_costs()).predict(s).update == Approx(3e-3));
    // The update measured in training steps is the optimizer's own.
    CHECK(Model(adam.net, p, 2, 4, backend::kind_costs()).update_key() !=
          Model(sgd.net, p, 2, 4, backend::kind_costs()).update_key());
}

TEST_CASE("model: group norm, dropout, tanh and gelu cost their kernels: group norm sums over the sample's tiles",
          "[model]") {
    test::NetworkFromText l(R"(
input x [N, 8, 32, 32]
label y [N, 32, 32]
c1 = conv(16, kernel = 3, pad = 1)
n = groupnorm(4)
t = tanh
d = dropout(0.1)
e = gelu
pred = conv(2, kernel = 1)
loss = pixel_cross_entropy from pred, y
)");
    const int n = l.net.find("n"), d = l.net.find("d"), t = l.net.find("t"), e = l.net.find("e");
    Model one(l.net, platform(), 1, 4, backend::kind_costs()), four(l.net, platform(), 4, 4, backend::kind_costs());
    for (int layer : {n, d, t, e}) {
        INFO(l.net.layers[static_cast<std::size_t>(layer)].name);
        const LayerCost whole = one.layer(layer, dist(1, 1, 1)), split = four.layer(layer, dist(1, 2, 2));
        CHECK(whole.forward > 0.0);
        CHECK(whole.backward_data > 0.0);
        CHECK(split.forward < whole.forward / 2);  // a quarter of the tile
        CHECK(split.halo_bytes == 0);              // no window
    }
    // Group norm's statistics: summed over the spatial group of a sample (4 processes here), over nobody when
    // the samples are split; its weight gradient is allreduced over every process either way.
    CHECK(four.layer(n, dist(1, 2, 2)).forward_sync > 0.0);
    CHECK(four.layer(n, dist(1, 2, 2)).backward_sync > 0.0);
    CHECK(four.layer(n, dist(4, 1, 1)).forward_sync == 0.0);
    CHECK(four.layer(n, dist(4, 1, 1)).allreduce > 0.0);
    CHECK(four.layer(d, dist(1, 2, 2)).forward_sync == 0.0);  // dropout needs nobody else
    // Their kernels' keys, for calibration: group norm's name its groups.
    const auto keys = four.kernel_keys(n, dist(4, 1, 1));
    REQUIRE(keys.size() == 2);
    CHECK(keys[0] == "groupnorm.forward g=4 threads=1 x=1x16x32x32");
    CHECK(four.kernel_keys(d, dist(4, 1, 1))[1] == "dropout.backward threads=1 x=1x16x32x32");
    CHECK(four.kernel_keys(e, dist(4, 1, 1))[0] == "gelu.forward threads=1 x=1x16x32x32");
    CHECK(four.kernel_keys(t, dist(4, 1, 1))[0] == "tanh.forward threads=1 x=1x16x32x32");
}

TEST_CASE("model: a GPU's tiles run in waves, so halving a small tile does not halve its time", "[model]") {
    test::NetworkFromText l(net_text);
    const int c1 = l.net.find("c1");
    Platform p = platform();
    p.compute_units = 80;       // a V100's SMs
    p.memory_bandwidth = 1e15;  // compute-bound: the roofline's other side out of the way
    Model one(l.net, p, 1, 4, backend::kind_costs()), two(l.net, p, 2, 4, backend::kind_costs());
    // c1's outputs: 4 x 16 x 32 x 32 = 65536, 8 tiles of 128 x 64 against 80 SMs: one wave, mostly idle.
    const double whole = one.layer(c1, dist(1, 1, 1)).forward, half = two.layer(c1, dist(1, 2, 1)).forward;
    CHECK(half == Approx(whole));
    CHECK(one.analytic_kernel(1e9, 0.0, 65536) == Approx(one.analytic_kernel(0.5e9, 0.0, 32768)));
    // A tile that fills the device many times over halves (a wave more or less).
    const double big = one.analytic_kernel(1e12, 0.0, 80 * 8192 * 64.0);
    CHECK(one.analytic_kernel(0.5e12, 0.0, 80 * 8192 * 32.0) == Approx(big / 2).epsilon(0.01));
    // Every call pays the launch latency; without compute units (a CPU, an older file) no waves.
    CHECK(one.analytic_kernel(0.0, 0.0, 0.0) == Approx(p.kernel_latency));
    p.compute_units = 0;
    Model flat(l.net, p, 1, 4, backend::kind_costs());
    CHECK(flat.analytic_kernel(0.5e9, 0.0, 32768) < flat.analytic_kernel(1e9, 0.0, 65536) * 0.6);
    // The roofline: with little arithmetic per byte the memory's bandwidth sets the time.
    p.memory_bandwidth = 1e9;
    Model memory_bound(l.net, p, 1, 4, backend::kind_costs());
    CHECK(memory_bound.analytic_kernel(1e3, 1e9, 0.0) == Approx(1.0 + p.kernel_latency));
}

TEST_CASE("model: across nodes the allreduce is hierarchical, cheaper than flat: within a node the same", "[model]") {
    test::NetworkFromText l(net_text);
    const int c2 = l.net.find("c2");
    Platform p = platform();
    p.nodes = 0;                 // as many as a run needs
    p.node = {2e-6, 75e9};       // NVLink within the node
    p.network = {1.5e-6, 6e9};   // InfiniBand between nodes, per process
    p.memory_bandwidth = 900e9;  // the sums' reads and writes
    Model sixteen(l.net, p, 16, 16, backend::kind_costs());
    for (double bytes : {1e5, 1e6, 1e8}) {
        INFO(bytes);
        CHECK(sixteen.allreduce(16, bytes, true) < sixteen.flat_allreduce(16, bytes, p.network));
    }
    CHECK(sixteen.allreduce(16, 1e8, true) < sixteen.flat_allreduce(16, 1e8, p.network) / 2);
    CHECK(sixteen.allreduce_algorithm(16, 1e8, true).rfind("hierarchical", 0) == 0);
    // A short message's latency: flat, where the hierarchy's extra steps would cost more than they save.
    CHECK(sixteen.allreduce(16, 1e3, true) == Approx(sixteen.flat_allreduce(16, 1e3, p.network)));
    CHECK(sixteen.allreduce_algorithm(16, 1e3, true).rfind("recursive doubling", 0) == 0);
    // A layer's gradient on 16 processes (4 nodes of 4) takes the hierarchical allreduce.
    const double grad = static_cast<double>(l.net.layers[static_cast<std::size_t>(c2)].params) * 4.0;
    CHECK(sixteen.layer(c2, dist(16, 1, 1)).allreduce == Approx(sixteen.allreduce(16, grad, true)));
    // Within one node: the ring over the node's link, whether or not the hierarchy is asked for (3 processes:
    // MPICH's ring, which the hierarchy's reduce-scatter and allgather make up).
    Model three(l.net, p, 3, 3, backend::kind_costs());
    CHECK(three.allreduce(3, 1e8, false) == Approx(three.flat_allreduce(3, 1e8, p.node)));
    CHECK(three.allreduce(3, 1e8, true) == Approx(three.flat_allreduce(3, 1e8, p.node)));
    CHECK(three.allreduce_algorithm(3, 1e8, false) == "ring within a node over 3 processes");
    // Halos of a spatial group within a node go over its link; a group wider than a node crosses.
    Schedule rows4, rows8;
    rows4.procs = rows8.procs = 16;
    for (std::size_t i = 0; i < l.net.layers.size(); ++i) {
        rows4.layers.push_back(dist(4, 4, 1));
        rows8.layers.push_back(dist(2, 8, 1));
    }
    const Prediction in_node = sixteen.predict(rows4),
                     across = Model(l.net, p, 16, 16, backend::kind_costs()).predict(rows8);
    CHECK(in_node.halo_link.rfind("within a node", 0) == 0);
    CHECK(across.halo_link.find("between nodes") != std::string::npos);
    // c1's and c2's gradients are 9 KB: short enough to go flat; explain names the largest.
    CHECK(in_node.allreduce_algorithm.find("across 4 nodes") != std::string::npos);
    CHECK(in_node.allreduce_algorithm.find("layer 'c") != std::string::npos);
    CHECK(in_node.layers[static_cast<std::size_t>(c2)].cost.forward_halo <
          across.layers[static_cast<std::size_t>(c2)].cost.forward_halo);
}

TEST_CASE("model: a kernel not measured is interpolated between the measured sizes around it", "[model]") {
    test::NetworkFromText l(net_text);
    const int c2 = l.net.find("c2");
    Platform p = platform();
    // c2 on 2 and 8 samples measured (its outputs 4 times as many); 4 samples are not.
    p.times["conv.forward d=1x1 k=3x3 s=2x2 threads=1 x=2x16x33x33 y=2x16x16x16"] = 1e-3;
    p.times["conv.forward d=1x1 k=3x3 s=2x2 threads=1 x=8x16x33x33 y=8x16x16x16"] = 4e-3;
    Model m(l.net, p, 1, 4, backend::kind_costs());
    const auto keys = m.kernel_keys(c2, dist(1, 1, 1));
    REQUIRE(keys[0] == "conv.forward d=1x1 k=3x3 s=2x2 threads=1 x=4x16x33x33 y=4x16x16x16");
    // Log-log: halfway in log size between 1 ms and 4 ms is 2 ms.
    CHECK(m.layer(c2, dist(1, 1, 1)).forward == Approx(2e-3));
    // Beyond the measured sizes: the nearest, scaled as the analytic model scales (here, nearly linearly).
    Model beyond(l.net, p, 1, 16, backend::kind_costs());
    const double at16 = beyond.layer(c2, dist(1, 1, 1)).forward;
    CHECK(at16 > 4e-3 * 1.9);
    CHECK(at16 < 4e-3 * 2.0 + 1e-9);
    // A kernel of other channels or strides is not interpolated from these: the analytic model.
    const int c1 = l.net.find("c1");
    Platform none = platform();
    CHECK(m.layer(c1, dist(1, 1, 1)).forward ==
          Approx(Model(l.net, none, 1, 4, backend::kind_costs()).layer(c1, dist(1, 1, 1)).forward));
}

TEST_CASE("model: the shuffles between every pair of splits equal the shuffles asked one pair at a time", "[model]") {
    // The auto-scheduler asks for whole matrices (computed on every core), predictions for one pair: the two
    // must agree exactly, for images and volumes, every reader kind, all processes examined or a sample.
    struct Case {
        const char* net;
        std::int64_t procs, batch;
    };
    const Case c = GENERATE(Case{"tests/dist/unet.net", 8, 8}, Case{"tests/dist/vol.net", 8, 4},
                            Case{"tests/dist/volunet.net", 128, 16}, Case{"tests/dist/cosmo.net", 96, 8});
    INFO(c.net << " on " << c.procs);
    test::NetworkFromText l(read(fs::path(source_dir()) / c.net));
    const Model batch_model(l.net, platform(), c.procs, c.batch, backend::kind_costs()),
        pair_model(l.net, platform(), c.procs, c.batch, backend::kind_costs());
    const std::vector<Split> splits = splits_of(c.procs, c.batch, l.net.spatial_rank());
    REQUIRE(splits.size() > 4);
    int compared = 0, moved = 0, differ = 0;
    std::string first;  // the first pair that differs
    for (std::size_t i = 0; i < l.net.layers.size(); ++i)
        for (std::size_t j = 0; j < l.net.layers[i].inputs.size(); ++j) {
            const auto matrix = batch_model.shuffles(static_cast<int>(i), static_cast<int>(j), splits, splits);
            REQUIRE(matrix.size() == splits.size() * splits.size());
            for (std::size_t a = 0; a < splits.size(); ++a)
                for (std::size_t b = 0; b < splits.size(); ++b) {
                    const ShuffleCost one =
                        pair_model.shuffle(static_cast<int>(i), static_cast<int>(j), splits[a], splits[b]);
                    const ShuffleCost& many = matrix[a * splits.size() + b];
                    if (many.seconds != one.seconds || many.bytes != one.bytes || many.memory != one.memory) {
                        if (differ++ == 0)
                            first = l.net.layers[i].name + " input " + std::to_string(j) + ": " + splits[a].str() +
                                    " -> " + splits[b].str();
                    }
                    ++compared;
                    moved += one.bytes > 0;
                }
        }
    INFO(first);
    CHECK(differ == 0);
    CHECK(compared > 1000);
    CHECK(moved > compared / 4);
}

TEST_CASE("model: a ReLU that training runs in the pass of the layer before it costs no forward of its own",
          "[model]") {
    // As the trainer fuses them: after a convolution (on CPUs), a batch norm or a sum of two, which the ReLU
    // alone reads, under the same split, neither kept in 16 bits nor recomputed.
    test::NetworkFromText l(R"(
input x [N, 8, 32, 32]
label y [N, 16, 16]
c1 = conv(16, kernel = 3, pad = 1)
after_conv = relu
b = batchnorm
after_bn = relu
c2 = conv(16, kernel = 3, pad = 1)
two = add from c2, after_bn
after_two = relu
c3 = conv(16, kernel = 3, pad = 1)
three = add from c3, after_two, c2
after_three = relu
c4 = conv(16, kernel = 3, pad = 1)
read_twice = relu
c5 = conv(16, kernel = 3, pad = 1) from c4
both = add from read_twice, c5
after_both = relu
c6 = conv(16, kernel = 3, pad = 1)
shuffled = relu
pred = conv(2, kernel = 1, stride = 2)
loss = pixel_cross_entropy from pred, y
)");
    Platform cpu = platform();
    cpu.device = Device::cpu;
    Schedule s;
    s.procs = 2;
    for (std::size_t i = 0; i < l.net.layers.size(); ++i) s.layers.push_back(dist(2, 1, 1));
    s.layers[static_cast<std::size_t>(l.net.find("shuffled"))] = dist(1, 2, 1);
    const auto index = [&](const char* name) { return static_cast<std::size_t>(l.net.find(name)); };
    const Model on_cpu(l.net, cpu, 2, 4, backend::kind_costs()), on_gpu(l.net, platform(), 2, 4, backend::kind_costs());
    for (const char* fused : {"after_conv", "after_bn", "after_two", "after_both"}) {
        CAPTURE(fused);
        CHECK(on_cpu.relu_fused(index(fused), s));
    }
    for (const char* apart : {"after_three", "read_twice", "shuffled"}) {
        CAPTURE(apart);
        CHECK_FALSE(on_cpu.relu_fused(index(apart), s));
    }
    // A GPU's convolution runs its ReLU apart; its batch norm does not.
    CHECK_FALSE(on_gpu.relu_fused(index("after_conv"), s));
    CHECK(on_gpu.relu_fused(index("after_bn"), s));
    // Kept in 16 bits, or recomputed, either layer: apart.
    Schedule narrow = s;
    narrow.layers[index("b")].precision = Precision::bfloat16;
    CHECK_FALSE(on_cpu.relu_fused(index("after_bn"), narrow));
    Schedule again = s;
    again.layers[index("after_bn")].recompute = true;
    CHECK_FALSE(on_cpu.relu_fused(index("after_bn"), again));
    // The prediction: no forward for the fused, the kernel's for the others; the same backward.
    const Prediction p = on_cpu.predict(s);
    CHECK(p.layers[index("after_bn")].cost.forward == 0.0);
    CHECK(p.layers[index("after_three")].cost.forward > 0.0);
    CHECK(p.layers[index("after_bn")].cost.backward_data > 0.0);
    CHECK(p.layers[index("after_bn")].cost.backward_data ==
          Approx(on_cpu.layer(static_cast<int>(index("after_bn")), s.layers[index("after_bn")]).backward_data));
}
