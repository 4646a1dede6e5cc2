// Helpers the benchmarks share (see common.hpp), and the timing wrappers of every kernel interface.
#include "common.hpp"

#include <dsl/base/diagnostics.hpp>
#include <dsl/scheduler/pipeline.hpp>

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

namespace dsl::bench {

using namespace backend;

std::string source_path(const std::string& path) {
    if (std::filesystem::exists(path)) return path;
    return std::string(DSL_SOURCE_DIR) + "/" + path;
}

frontend::Network load(const std::string& path) {
    SourceManager sources;
    Diagnostics diags;
    auto loaded = scheduler::Pipeline().network(source_path(path), sources, diags);
    if (!loaded || diags.has_errors()) {
        diags.render(std::cerr, false);
        std::cerr << "error: cannot load '" << path << "'\n";
        std::exit(1);
    }
    return std::move(loaded->net);
}

double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const double at = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(at);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string a, b, c;
    in >> a >> b >> c;
    return a + " " + b + " " + c;
}

int omp_threads() { return omp_get_max_threads(); }

scheduler::AutoResult search_open(const frontend::Network& net, const scheduler::Model& model, std::int64_t procs,
                                  std::int64_t batch, scheduler::SearchMethod method, std::int64_t channel_parts) {
    scheduler::Schedule open;
    open.procs = procs;
    open.layers.assign(net.layers.size(), {std::nullopt, std::nullopt, scheduler::BatchNormStats::batch, std::nullopt});
    scheduler::AutoOptions options;
    options.batch = batch;
    options.memory_limit = model.memory_limit();
    options.method = method;
    options.channel_parts = channel_parts;
    std::string why;
    auto result = scheduler::autoschedule(net, open, model, options, why);
    if (!result) {
        std::cerr << "bench: " << why << "\n";
        std::exit(1);
    }
    return *result;
}

std::int64_t env_int(const char* name, std::int64_t fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoll(v) : fallback;
}

void KernelTimes::add_detail(const std::string& name, double seconds) {
    auto& e = details_[name];
    e.seconds += seconds;
    ++e.calls;
}

double KernelTimes::total() const {
    double t = 0.0;
    for (const auto& [name, e] : entries_) t += e.seconds;
    return t;
}

namespace {

// Runs `f` and charges its time to `name`.
// Runs `f` and charges its time to `name` and, when the times keep details, to `name` and the dims `d` of
// the call's main tensor.
template <typename F>
auto charge(KernelTimes& times, const char* name, const Dims& d, F&& f) {
    const auto t0 = Clock::now();
    auto record = [&] {
        const double s = seconds_since(t0);
        times.add(name, s);
        if (times.detail) {
            std::string dims = std::to_string(d.n) + "x" + std::to_string(d.c);
            for (std::int64_t e : d.space) dims += "x" + std::to_string(e);
            times.add_detail(std::string(name) + " " + dims, s);
        }
    };
    if constexpr (std::is_void_v<decltype(f())>) {
        f();
        record();
    } else {
        auto r = f();
        record();
        return r;
    }
}

struct Conv final : ConvKernels {
    ConvKernels* in;
    KernelTimes* t;
    Conv(ConvKernels* i, KernelTimes* tt) : in(i), t(tt) {}
    void forward(ConstView x, ConstView w, const float* b, View y, const Window& win) override {
        charge(*t, "conv.forward", y.dims, [&] { in->forward(x, w, b, y, win); });
    }
    bool forward_relu(ConstView x, ConstView w, const float* b, float slope, View y, const Window& win) override {
        bool fused = false;
        charge(*t, "conv.forward_relu", y.dims, [&] { fused = in->forward_relu(x, w, b, slope, y, win); });
        return fused;
    }
    void backward_data(ConstView dy, ConstView w, View dx, const Window& win) override {
        charge(*t, "conv.backward_data", dx.dims, [&] { in->backward_data(dy, w, dx, win); });
    }
    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& win) override {
        charge(*t, "conv.backward_weights", dy.dims, [&] { in->backward_weights(x, dy, dw, db, win); });
    }
    bool blocks_weights(const Dims& w) const override { return in->blocks_weights(w); }
};

struct BatchNorm final : BatchNormKernels {
    BatchNormKernels* in;
    KernelTimes* t;
    BatchNorm(BatchNormKernels* i, KernelTimes* tt) : in(i), t(tt) {}
    void statistics(ConstView x, double* s, double* sq) override {
        charge(*t, "batchnorm.statistics", x.dims, [&] { in->statistics(x, s, sq); });
    }
    void forward(ConstView x, const float* m, const float* is, const float* g, const float* b, View y) override {
        charge(*t, "batchnorm.forward", x.dims, [&] { in->forward(x, m, is, g, b, y); });
    }
    bool forward_relu(ConstView x, const float* m, const float* is, const float* g, const float* b, float slope,
                      View y) override {
        bool fused = false;
        charge(*t, "batchnorm.forward_relu", x.dims, [&] { fused = in->forward_relu(x, m, is, g, b, slope, y); });
        return fused;
    }
    void backward_statistics(ConstView x, ConstView dy, const float* m, const float* is, double* a,
                             double* b) override {
        charge(*t, "batchnorm.backward_statistics", x.dims, [&] { in->backward_statistics(x, dy, m, is, a, b); });
    }
    void backward(ConstView x, ConstView dy, const float* m, const float* is, const float* g, const double* a,
                  const double* b, double count, View dx) override {
        charge(*t, "batchnorm.backward", x.dims, [&] { in->backward(x, dy, m, is, g, a, b, count, dx); });
    }
};

struct Activation final : ActivationKernels {
    ActivationKernels* in;
    KernelTimes* t;
    Activation(ActivationKernels* i, KernelTimes* tt) : in(i), t(tt) {}
    void forward(frontend::Activation f, ConstView x, float slope, View y) override {
        charge(*t, "activation.forward", x.dims, [&] { in->forward(f, x, slope, y); });
    }
    void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) override {
        charge(*t, "activation.backward", x.dims, [&] { in->backward(f, x, dy, slope, dx); });
    }
};

struct Pool final : PoolKernels {
    PoolKernels* in;
    KernelTimes* t;
    Pool(PoolKernels* i, KernelTimes* tt) : in(i), t(tt) {}
    void forward(PoolKind k, ConstView x, View y, const Window& w) override {
        charge(*t, "pool.forward", x.dims, [&] { in->forward(k, x, y, w); });
    }
    void backward(PoolKind k, ConstView x, ConstView dy, View dx, const Window& w) override {
        charge(*t, "pool.backward", x.dims, [&] { in->backward(k, x, dy, dx, w); });
    }
    void global_sum(ConstView x, double* sums) override {
        charge(*t, "pool.global_sum", x.dims, [&] { in->global_sum(x, sums); });
    }
    void broadcast(const float* v, float scale, View dx) override {
        charge(*t, "pool.broadcast", dx.dims, [&] { in->broadcast(v, scale, dx); });
    }
};

struct Fc final : FcKernels {
    FcKernels* in;
    KernelTimes* t;
    Fc(FcKernels* i, KernelTimes* tt) : in(i), t(tt) {}
    void forward(ConstView x, ConstView w, const float* b, View y) override {
        charge(*t, "fc.forward", y.dims, [&] { in->forward(x, w, b, y); });
    }
    void backward_data(ConstView dy, ConstView w, View dx) override {
        charge(*t, "fc.backward_data", dx.dims, [&] { in->backward_data(dy, w, dx); });
    }
    void backward_weights(ConstView x, ConstView dy, View dw, float* db) override {
        charge(*t, "fc.backward_weights", dy.dims, [&] { in->backward_weights(x, dy, dw, db); });
    }
};

struct Eltwise final : EltwiseKernels {
    EltwiseKernels* in;
    KernelTimes* t;
    Eltwise(EltwiseKernels* i, KernelTimes* tt) : in(i), t(tt) {}
    void add(const std::vector<ConstView>& xs, View y) override {
        charge(*t, "eltwise.add", y.dims, [&] { in->add(xs, y); });
    }
    bool add_relu(const std::vector<ConstView>& xs, float slope, View y) override {
        bool fused = false;
        charge(*t, "eltwise.add_relu", y.dims, [&] { fused = in->add_relu(xs, slope, y); });
        return fused;
    }
    void copy(ConstView x, View y) override {
        charge(*t, "eltwise.copy", y.dims, [&] { in->copy(x, y); });
    }
    void accumulate(ConstView x, View y) override {
        charge(*t, "eltwise.accumulate", y.dims, [&] { in->accumulate(x, y); });
    }
    void sgd(float* w, float* m, const float* g, std::int64_t n, float lr, float mo, float d) override {
        charge(*t, "eltwise.sgd", Dims{1, n, {}}, [&] { in->sgd(w, m, g, n, lr, mo, d); });
    }
    void adam(float* w, float* m, float* v, const float* g, std::int64_t n, const AdamStep& s) override {
        charge(*t, "eltwise.adam", Dims{1, n, {}}, [&] { in->adam(w, m, v, g, n, s); });
    }
    bool unscale(const std::vector<GradientArray>& g, float factor) override {
        std::int64_t n = 0;
        for (const GradientArray& a : g) n += a.count;
        bool finite = true;
        charge(*t, "eltwise.unscale", Dims{1, n, {}}, [&] { finite = in->unscale(g, factor); });
        return finite;
    }
};

struct Loss final : LossKernels {
    LossKernels* in;
    KernelTimes* t;
    Loss(LossKernels* i, KernelTimes* tt) : in(i), t(tt) {}
    double cross_entropy(ConstView logits, LabelView labels, float scale, View dlogits) override {
        return charge(*t, "loss.cross_entropy", logits.dims,
                      [&] { return in->cross_entropy(logits, labels, scale, dlogits); });
    }
    double regression(frontend::Regression r, ConstView x, ConstView target, float scale, View dx) override {
        return charge(*t, "loss.regression", x.dims, [&] { return in->regression(r, x, target, scale, dx); });
    }
};

template <typename W, typename I>
W* own(TimedKernels& tk, I* inner, KernelTimes& times) {
    auto p = std::make_shared<W>(inner, &times);
    tk.owned.push_back(p);
    return p.get();
}

}  // namespace

std::unique_ptr<TimedKernels> timed(Kernels inner, KernelTimes& times) {
    auto tk = std::make_unique<TimedKernels>();
    tk->kernels.conv = own<Conv>(*tk, inner.conv, times);
    tk->kernels.batchnorm = own<BatchNorm>(*tk, inner.batchnorm, times);
    tk->kernels.activation = own<Activation>(*tk, inner.activation, times);
    tk->kernels.pool = own<Pool>(*tk, inner.pool, times);
    tk->kernels.fc = own<Fc>(*tk, inner.fc, times);
    tk->kernels.eltwise = own<Eltwise>(*tk, inner.eltwise, times);
    tk->kernels.loss = own<Loss>(*tk, inner.loss, times);
    tk->kernels.blocked = inner.blocked;  // the same layouts as the kernels' own
    return tk;
}

}  // namespace dsl::bench
