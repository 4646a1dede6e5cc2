// A profile worker's measuring: training steps under every split of its run's processes, each layer's
// compute set against its kernels alone (the factors), the waits for other processes (drift), the update,
// what a shuffle costs beyond its transfer, and the memory a process holds beyond what the model counts.
#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/kinds.hpp>

#include <dsl/base/error.hpp>
#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/model.hpp>

#include <algorithm>
#include <iterator>

namespace dsl::backend {

std::vector<std::pair<std::string, double>> step_profiles(const frontend::Network& net, scheduler::Platform so_far,
                                                          const CalibrationSettings& settings, Kernels kernels,
                                                          Comm& comm) {
    const std::int64_t procs = comm.size(), batch = settings.batches.front();
    std::string error;
    auto data = make_data_source(net, 0, "", "", error);
    if (!data) {
        throw UserError(error);
    }
    // Only kernels and communication: what this worker measures is not taken from an earlier calibration.
    for (auto it = so_far.times.begin(); it != so_far.times.end();) {
        const std::string& k = it->first;
        const auto key = scheduler::parse_time_key(k);
        const bool derived =
            k.rfind(scheduler::factor_prefix, 0) == 0 ||
            (key && (key->kernel == scheduler::drift_kernel || key->kernel == scheduler::shuffle_kernel ||
                     key->kernel == scheduler::update_kernel));
        it = derived ? so_far.times.erase(it) : std::next(it);
    }
    const scheduler::Model model(net, calibrated_machine(so_far, settings.gpu), procs, batch, kind_costs());
    scheduler::Model kernels_alone(net, calibrated_machine(so_far, settings.gpu), procs, batch, kind_costs());
    kernels_alone.use_raw_kernels(true);
    // Per layer kind, direction and tile size: training's time and the kernels' alone, summed over every
    // layer of every run, so that the factor reproduces the runs' totals.
    std::map<std::string, std::pair<double, double>> sums;
    std::vector<double> drifts;   // per schedule: the waits for other processes over the compute
    std::vector<double> updates;  // the update, allreduces' wait included
    // What a process holds beyond what the model counts (runtimes, kernels' scratch): the least over the runs.
    // On a GPU the resident host memory says nothing of the device's: the platform's workspace stays.
    double workspace = -1.0;
    // Per layer and split: its compute and waits in the uniform runs, to compare the alternating run with.
    std::map<std::pair<std::size_t, std::string>, double> uniform;
    auto profile = [&](const scheduler::Schedule& s) {
        const auto step = profile_layers(net, s, batch, kernels, comm, *data, settings.runs());
        if (settings.gpu) return step;
        const scheduler::Prediction p = model.predict(s);
        const double beyond = std::max(0.0, step.resident - (p.memory - p.workspace));
        workspace = workspace < 0 ? beyond : std::min(workspace, beyond);
        return step;
    };
    for (const scheduler::Split& split : scheduler::splits_of(procs, batch, net.spatial_rank())) {
        for (bool overlap : split.spatial() ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
            scheduler::Schedule s;
            s.procs = procs;
            s.batch = batch;
            s.layers.resize(net.layers.size());
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                if (net.layers[i].is_data()) continue;
                scheduler::Distribution d{split, overlap, scheduler::BatchNormStats::batch, std::nullopt};
                if (!scheduler::split_problem(net, net.layers[i], split, batch).empty())
                    d = scheduler::candidates(net, static_cast<int>(i), {std::nullopt, overlap, d.bn, std::nullopt},
                                              procs, batch)
                            .front();
                s.layers[i] = d;
            }
            scheduler::place_data(net, s);
            const auto step = profile(s);
            const auto& times = step.layers;
            double waited = 0.0, computed = 0.0;
            for (const auto& t : times) waited += t.forward_wait + t.backward_wait, computed += t.forward + t.backward;
            if (procs > 1 && computed > 0) drifts.push_back(waited / computed);
            updates.push_back(step.update);
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                const auto op = net.layers[i].op;
                if (op == frontend::OpKind::label) continue;
                const scheduler::LayerCost k = kernels_alone.layer(static_cast<int>(i), s.layers[i]);
                const int size =
                    scheduler::Model::size_class(model.tile_bytes(static_cast<int>(i), *s.layers[i].split));
                const double kb = k.backward_data + k.backward_weights;
                // A ReLU that ran in the pass of the layer before it has no forward of its own to compare.
                if (k.forward > 0 && times[i].forward > 0 && !model.relu_fused(i, s))
                    sums[model.factor_key(op, true, size)].first += times[i].forward,
                        sums[model.factor_key(op, true, size)].second += k.forward;
                if (kb > 0 && times[i].backward > 0)
                    sums[model.factor_key(op, false, size)].first += times[i].backward,
                        sums[model.factor_key(op, false, size)].second += kb;
                if (!overlap || s.layers[i].split->spatial())
                    uniform[{i, s.layers[i].split->str()}] =
                        times[i].forward + times[i].backward + times[i].forward_wait + times[i].backward_wait;
            }
        }
    }
    // What a shuffle costs beyond the model's estimate of its transfer: layers alternate between two splits,
    // so that every layer reads its input through a shuffle, and the run is compared with the same layers
    // in the uniform runs.
    double shuffle_extra = -1.0;
    if (procs > 1) {
        scheduler::Schedule s;
        s.procs = procs;
        s.batch = batch;
        s.layers.resize(net.layers.size());
        int parity = 0;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (net.layers[i].is_data()) continue;
            const auto cands = scheduler::candidates(
                net, static_cast<int>(i), {std::nullopt, false, scheduler::BatchNormStats::batch, std::nullopt}, procs,
                batch);
            s.layers[i] = cands[static_cast<std::size_t>(parity++ % 2) % cands.size()];
        }
        scheduler::place_data(net, s);
        double expected = 0.0, shuffles = 0.0, modelled = 0.0;
        bool known = true;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            if (net.layers[i].is_data()) continue;
            auto it = uniform.find({i, s.layers[i].split->str()});
            if (it == uniform.end())
                known = false;
            else
                expected += it->second;
            for (std::size_t j = 0; j < net.layers[i].inputs.size(); ++j) {
                const auto p = static_cast<std::size_t>(net.layers[i].inputs[j]);
                if (net.layers[p].is_data()) continue;
                const auto cost =
                    model.shuffle(static_cast<int>(i), static_cast<int>(j), *s.layers[p].split, *s.layers[i].split);
                if (cost.bytes > 0) shuffles += 1.0, modelled += cost.seconds;
            }
        }
        if (known && shuffles > 0) {
            const auto step = profile(s);
            double total = 0.0;
            for (const auto& t : step.layers) total += t.forward + t.backward + t.forward_wait + t.backward_wait;
            shuffle_extra = std::max(0.0, (total - expected - modelled) / shuffles);
        }
    }
    std::vector<std::pair<std::string, double>> out;
    if (comm.rank() != 0) return out;
    for (const auto& [key, sum] : sums)
        out.emplace_back(key, sum.first / sum.second * 1e-3);  // a factor, as a time per millisecond
    if (workspace >= 0) out.emplace_back("workspace", workspace);
    std::sort(updates.begin(), updates.end());
    if (!updates.empty()) out.emplace_back(model.update_key(), updates[updates.size() / 2]);
    if (!drifts.empty()) {
        std::sort(drifts.begin(), drifts.end());
        out.emplace_back(scheduler::time_key(scheduler::drift_kernel, {{"compute", {1000}}, {"procs", {procs}}}),
                         drifts[drifts.size() / 2] * 1e-3);
    }
    if (shuffle_extra >= 0)
        out.emplace_back(scheduler::time_key(scheduler::shuffle_kernel, {{"procs", {procs}}}),
                         std::max(1e-9, shuffle_extra));
    return out;
}

}  // namespace dsl::backend
