// bench_conv: GFLOP/s of every distinct convolution of stdlib/mesh1k.net and stdlib/resnet50.net (forward,
// backward-data, backward-weights) through cpu_kernels().conv on tiles laid out as the Trainer lays them out,
// beside this machine's FMA peak measured with a tight loop; then the blocks of a CosmoFlow-shaped network of
// volumes (3x3x3 convolution, leaky ReLU, 2x2x2 average pooling), each kernel in milliseconds. Runs once with
// oneDNN's default threads and, in a child process, with OMP_NUM_THREADS=1 to compare against the
// single-core peak. BENCH_CONV_SETS picks the parts (default "mesh,resnet,volumes"), BENCH_VOLUME_BATCH the
// batch of the volumes (default 1), BENCH_CONV_LAYERS keeps the networks' layers whose names contain it.
#include "common.hpp"

#include <dsl/backend/tensor.hpp>

#include <fmt/format.h>
#include <immintrin.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>
#include <tuple>

namespace {

using namespace dsl;
using namespace dsl::bench;
using frontend::Layer;
using frontend::OpKind;

bool cpu_flag(const std::string& flag) {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
    return false;
}

// Independent accumulators hide the FMA latency (4 cycles, 2 pipes): 12 chains keep both pipes full.
constexpr int chains = 12;

__attribute__((target("avx512f"))) double fma_loop_avx512(std::int64_t iters) {
    __m512 acc[chains];
    for (int j = 0; j < chains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    for (std::int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < chains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    __m512 s = acc[0];
    for (int j = 1; j < chains; ++j) s = _mm512_add_ps(s, acc[j]);
    float out[16];
    _mm512_storeu_ps(out, s);
    return static_cast<double>(out[0]);  // keeps the loop alive
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(std::int64_t iters) {
    __m256 acc[chains];
    for (int j = 0; j < chains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    for (std::int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
        for (int j = 0; j < chains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
    __m256 s = acc[0];
    for (int j = 1; j < chains; ++j) s = _mm256_add_ps(s, acc[j]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return static_cast<double>(out[0]);
}

// GFLOP/s of the FMA loop on `threads` threads at once (each counts 2 flops per lane per FMA); best of 5.
double fma_peak(bool avx512, int threads) {
    const int lanes = avx512 ? 16 : 8;
    const std::int64_t iters = 20'000'000;
    double best = 0.0;
    for (int rep = 0; rep < 5; ++rep) {
        std::vector<std::thread> pool;
        std::vector<double> sink(static_cast<std::size_t>(threads));
        const auto t0 = Clock::now();
        for (int t = 0; t < threads; ++t)
            pool.emplace_back(
                [&, t] { sink[static_cast<std::size_t>(t)] = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters); });
        for (auto& th : pool) th.join();
        const double s = seconds_since(t0);
        best = std::max(best, 2.0 * lanes * chains * static_cast<double>(iters) * threads / s / 1e9);
        if (sink[0] == 12345.0) std::cout << "";  // the results are used
    }
    return best;
}

struct Problem {
    std::string name;  // the first layer with this shape
    int count = 0;     // layers with this shape
    backend::Dims x, y;
    std::int64_t k = 1, stride = 1, pad = 0;
    double flops = 0;  // per direction, for the batch
};

std::vector<Problem> problems(const frontend::Network& net, std::int64_t batch, int per_block) {
    std::map<
        std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>,
        std::size_t>
        seen;
    std::vector<Problem> out;
    std::map<std::string, int> in_block;
    for (const Layer& l : net.layers) {
        if (l.op != OpKind::conv) continue;
        if (per_block > 0 && !l.instances.empty() && ++in_block[l.instances.front()] > per_block) continue;
        const auto& xs = net.layers[static_cast<std::size_t>(l.inputs[0])].shape.dims;
        const auto& ys = l.shape.dims;
        const auto key = std::make_tuple(xs[0], xs[1], xs[2], ys[0], l.kernel[0], l.stride[0], l.pad[0]);
        if (auto it = seen.find(key); it != seen.end()) {
            ++out[it->second].count;
            continue;
        }
        seen[key] = out.size();
        out.push_back(Problem{l.name,
                              1,
                              {batch, xs[0], {xs[1], xs[2]}},
                              {batch, ys[0], {ys[1], ys[2]}},
                              l.kernel[0],
                              l.stride[0],
                              l.pad[0],
                              2.0 * static_cast<double>(l.macs * batch)});
    }
    return out;
}

// Median seconds of `f` after one warm-up call, over at least 3 calls and `budget` seconds.
template <typename F>
double time_it(F&& f, double budget) {
    f();
    std::vector<double> t;
    const auto start = Clock::now();
    while (t.size() < 3 || (seconds_since(start) < budget && t.size() < 50)) {
        const auto t0 = Clock::now();
        f();
        t.push_back(seconds_since(t0));
    }
    return median(t);
}

void bench_net(const std::string& path, std::int64_t batch, int per_block, double peak) {
    const frontend::Network net = load(path);
    const auto probs = problems(net, batch, per_block);
    std::cout << fmt::format("\n{} at batch {}: {} distinct convolutions{}\n", path, batch, probs.size(),
                             per_block > 0 ? fmt::format(" (the first {} of each block)", per_block) : "");
    std::cout << fmt::format("  {:<24} {:>2}  {:<36} {:>7}  {:>16} {:>16} {:>16}\n", "layer", "n", "x -> y", "GFLOP",
                             "forward GF/s", "bwd data GF/s", "bwd wts GF/s");
    backend::ConvKernels& conv = *backend::cpu_kernels().conv;
    double total_flops = 0, total_s = 0;
    const double budget = static_cast<double>(env_int("BENCH_CONV_BUDGET_MS", 300)) / 1e3;
    const char* only = std::getenv("BENCH_CONV_LAYERS");
    for (const Problem& p : probs) {
        if (only && p.name.find(only) == std::string::npos) continue;
        backend::Window w;
        w.kernel = {p.k, p.k};
        w.stride = {p.stride, p.stride};
        // The Trainer's layout: the input tile's margins hold the padding, the kernel reads a window of it.
        backend::Dims window{p.x.n, p.x.c, p.x.space};
        backend::Margins margins = backend::Margins::filled(p.x.rank(), {});
        for (int d = 0; d < p.x.rank(); ++d) {
            window.space[d] = w.input_extent(d, p.y.space[d]);
            margins[d] = {p.pad, std::max<std::int64_t>(0, window.space[d] - p.pad - p.x.space[d])};
        }
        w.zeros = margins;  // all of them padding, as on one process
        backend::Tensor x(p.x, margins);
        backend::Tensor dx(p.x, x.margins()), y(p.y), dy(p.y), wt({p.y.c, p.x.c, {p.k, p.k}}), dw(wt.dims());
        x.fill(0.5f), dy.fill(0.25f), wt.fill(0.01f);
        const backend::Index origin = backend::Index::filled(p.x.rank(), 0);
        const auto xv = x.padded().sub(0, 0, origin, window);
        const auto dxv = dx.padded().sub(0, 0, origin, window);
        const double f = time_it([&] { conv.forward(xv, wt.interior(), nullptr, y.interior(), w); }, budget);
        const double bd = time_it([&] { conv.backward_data(dy.interior(), wt.interior(), dxv, w); }, budget);
        const double bw = time_it([&] { conv.backward_weights(xv, dy.interior(), dw.interior(), nullptr, w); }, budget);
        auto cell = [&](double s) {
            return fmt::format("{:>7.1f} ({:>3.0f}%)", p.flops / s / 1e9, 100.0 * p.flops / s / 1e9 / peak);
        };
        std::cout << fmt::format("  {:<24} {:>2}  {:<36} {:>7.2f}  {:>16} {:>16} {:>16}\n", p.name, p.count,
                                 fmt::format("{}x{}x{} -> {}x{}x{} k{} s{}", p.x.c, p.x.space[0], p.x.space[1], p.y.c,
                                             p.y.space[0], p.y.space[1], p.k, p.stride),
                                 p.flops / 1e9, cell(f), cell(bd), cell(bw));
        total_flops += 3 * p.flops * p.count;
        total_s += (f + bd + bw) * p.count;
    }
    std::cout << fmt::format(
        "  all listed layers, weighted by count: {:.1f} GFLOP/s ({:.0f}% of the {:.1f} GFLOP/s peak)\n",
        total_flops / total_s / 1e9, 100.0 * total_flops / total_s / 1e9 / peak, peak);
}

// A block of a network of volumes: a 3x3x3 convolution (pad 1) of c channels into f at size^3, leaky ReLU,
// 2x2x2 average pooling; `in_network` is false for a shape that is only measured.
struct VolumeBlock {
    std::int64_t c, f, size;
    bool in_network = true;
};

// Each kernel of CosmoFlow's blocks (its 7 convolutions 4 -> 16 -> ... -> 256 from 128^3, batch `batch`) on
// tiles as the Trainer lays them out: a convolution reads the whole padded tile that the pooling before it
// wrote the interior of (its margins hold the padding), and writes a dense tile, which the activation and
// the pooling read. The sum over the network's blocks is a training step's share of these kernels (the
// first convolution has no backward-data: its input is the data).
void bench_volumes(std::int64_t batch, double peak) {
    const std::vector<VolumeBlock> blocks = {{4, 16, 128},  {16, 32, 64},         {32, 64, 32},
                                             {64, 128, 16}, {128, 256, 8},        {256, 256, 4},
                                             {256, 256, 2}, {16, 32, 128, false}, {16, 32, 64, false}};
    std::cout << fmt::format(
        "\nCosmoFlow's blocks of volumes at batch {}: conv 3x3x3 pad 1, leaky ReLU, 2x2x2 average "
        "pooling; ms (GFLOP/s, % of peak)\n",
        batch);
    std::cout << fmt::format("  {:<22} {:>6}  {:>18} {:>18} {:>18} {:>8} {:>8} {:>8} {:>8}\n", "x -> y", "GFLOP",
                             "conv fwd", "conv bwd-data", "conv bwd-wts", "act fwd", "act bwd", "pool fwd", "pool bwd");
    const backend::Kernels k = backend::cpu_kernels();
    const double budget = static_cast<double>(env_int("BENCH_CONV_BUDGET_MS", 300)) / 1e3;
    const auto leaky = frontend::Activation::leaky_relu;
    double total = 0;
    for (const VolumeBlock& b : blocks) {
        const std::int64_t s = b.size, h = s / 2;
        backend::Window w;
        w.kernel = {3, 3, 3}, w.stride = {1, 1, 1}, w.dilation = {1, 1, 1};
        backend::Window pool;
        pool.kernel = {2, 2, 2}, pool.stride = {2, 2, 2}, pool.dilation = {1, 1, 1};
        const backend::Margins pad = backend::Margins::filled(3, {1, 1});
        backend::Tensor x({batch, b.c, {s, s, s}}, pad), dx(x.dims(), pad), wt({b.f, b.c, {3, 3, 3}}), dw(wt.dims());
        backend::Tensor y({batch, b.f, {s, s, s}}), a(y.dims()), da(y.dims()), dy(y.dims());
        backend::Tensor p({batch, b.f, {h, h, h}}, pad), dp(p.dims(), pad);
        x.fill(0.5f), wt.fill(0.01f), dp.fill(0.25f);
        std::vector<float> bias(static_cast<std::size_t>(b.f), 0.1f), db(bias.size());
        const double f =
            time_it([&] { k.conv->forward(x.padded(), wt.interior(), bias.data(), y.interior(), w); }, budget);
        const double af = time_it([&] { k.activation->forward(leaky, y.interior(), 0.01f, a.interior()); }, budget);
        const double pf =
            time_it([&] { k.pool->forward(backend::PoolKind::average, a.interior(), p.interior(), pool); }, budget);
        const double pb = time_it(
            [&] { k.pool->backward(backend::PoolKind::average, a.interior(), dp.interior(), da.interior(), pool); },
            budget);
        const double ab =
            time_it([&] { k.activation->backward(leaky, y.interior(), da.interior(), 0.01f, dy.interior()); }, budget);
        const double bw =
            time_it([&] { k.conv->backward_weights(x.padded(), dy.interior(), dw.interior(), db.data(), w); }, budget);
        const double bd = time_it([&] { k.conv->backward_data(dy.interior(), wt.interior(), dx.padded(), w); }, budget);
        const double flops = 2.0 * static_cast<double>(batch * b.f * b.c * 27 * s * s * s);
        auto cell = [&](double t) {
            return fmt::format("{:>7.2f} ({:>4.0f}, {:>2.0f}%)", t * 1e3, flops / t / 1e9,
                               100.0 * flops / t / 1e9 / peak);
        };
        auto ms = [](double t) { return fmt::format("{:>8.2f}", t * 1e3); };
        std::cout << fmt::format("  {:<22} {:>6.2f}  {:>18} {:>18} {:>18} {:>8} {:>8} {:>8} {:>8}{}\n",
                                 fmt::format("{}x{}^3 -> {}x{}^3", b.c, s, b.f, s), flops / 1e9, cell(f), cell(bd),
                                 cell(bw), ms(af), ms(ab), ms(pf), ms(pb),
                                 b.in_network ? "" : "  (not in the network)");
        if (b.in_network) total += f + af + pf + pb + ab + bw + (&b == &blocks.front() ? 0.0 : bd);
    }
    std::cout << fmt::format("  the network's blocks, forward and backward: {:.1f} ms\n", total * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
    const bool avx512 = cpu_flag("avx512f"), avx2 = cpu_flag("avx2") && cpu_flag("fma");
    const int threads = omp_threads();
    std::cout << fmt::format("bench_conv: {}; flags: avx512f {}, avx2+fma {}; load average {}\n", cpu_model(),
                             avx512 ? "yes" : "no", avx2 ? "yes" : "no", load_average());
    if (!avx512 && !avx2) {
        std::cout << "no AVX2/AVX-512 FMA: nothing to measure a peak with\n";
        return 0;
    }
    const double one = fma_peak(avx512, 1);
    const double all = threads > 1 ? fma_peak(avx512, threads) : one;
    if (avx512)
        std::cout << fmt::format("measured FMA peak, AVX2 (8 lanes) for comparison: {:.1f} GFLOP/s on one core\n",
                                 fma_peak(false, 1));
    std::cout << fmt::format("measured FMA peak ({}): {:.1f} GFLOP/s on one core, {:.1f} on {} threads\n",
                             avx512 ? "AVX-512, 16 lanes" : "AVX2, 8 lanes", one, all, threads);
    std::cout << fmt::format(
        "oneDNN threads (OpenMP): {}  (OMP_NUM_THREADS={}); percentages below are of the "
        "{}-thread peak, {:.1f} GFLOP/s\n",
        threads, std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset", threads, all);

    const char* sets_env = std::getenv("BENCH_CONV_SETS");
    const std::string sets = "," + std::string(sets_env ? sets_env : "mesh,resnet,volumes") + ",";
    const auto want = [&](const char* set) { return sets.find("," + std::string(set) + ",") != std::string::npos; };
    if (want("mesh"))
        bench_net("stdlib/mesh1k.net", env_int("BENCH_MESH_BATCH", 1),
                  static_cast<int>(env_int("BENCH_MESH_PER_BLOCK", 2)), all);
    if (want("resnet")) bench_net("stdlib/resnet50.net", env_int("BENCH_RESNET_BATCH", 8), 0, all);
    if (want("volumes")) bench_volumes(env_int("BENCH_VOLUME_BATCH", 1), all);
    std::cout << fmt::format("load average at the end: {}\n", load_average());

    // The single-thread comparison, in a fresh process: oneDNN sizes its thread team when it creates a
    // primitive, so the count cannot change inside this one.
    if (threads > 1 && !std::getenv("OMP_NUM_THREADS") && !(argc > 1 && std::string(argv[1]) == "--no-child")) {
        std::cout << "\n---- again with OMP_NUM_THREADS=1 ----\n" << std::flush;
        if (const pid_t pid = fork(); pid == 0) {
            setenv("OMP_NUM_THREADS", "1", 1);
            execl("/proc/self/exe", argv[0], "--no-child", static_cast<char*>(nullptr));
            _exit(127);
        } else if (pid > 0) {
            int status = 0;
            waitpid(pid, &status, 0);
        }
    }
}
