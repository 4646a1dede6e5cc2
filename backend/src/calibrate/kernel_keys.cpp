// The kernels a calibration times: every key the model would look up for the candidate distributions of a
// network's layers, by the threads a process has at each process count.
#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/kinds.hpp>

#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/model.hpp>

#include <algorithm>

namespace dsl::backend {

std::map<int, std::set<std::string>> kernel_keys_by_threads(const frontend::Network& net,
                                                            const scheduler::Platform& base,
                                                            const CalibrationSettings& s,
                                                            std::map<std::string, double>* seconds) {
    std::map<int, std::set<std::string>> out;
    // The 16-bit precisions whose products there are kernels for: the GPU's (bfloat16, float16), the CPU's
    // with AVX-512 BF16 (bfloat16).
    std::vector<scheduler::Precision> sixteen;
    if (s.bfloat16 && (s.gpu || cpu_kernels().conv_bfloat16)) sixteen.push_back(scheduler::Precision::bfloat16);
    if (s.float16 && s.gpu) sixteen.push_back(scheduler::Precision::float16);
    for (std::int64_t procs : s.procs)
        for (std::int64_t batch : s.batches) {
            scheduler::Model model(net, base, procs, batch, kind_costs());
            auto& keys = out[model.threads()];
            for (std::size_t i = 0; i < net.layers.size(); ++i) {
                const auto& l = net.layers[i];
                if (l.op == frontend::OpKind::label) continue;
                // An input takes its reader's split: any that fits its tiles. The channel and filter splits the
                // auto-scheduler tries too.
                const scheduler::Distribution open{std::nullopt, std::nullopt, scheduler::BatchNormStats::batch,
                                                   std::nullopt};
                for (const auto& d : scheduler::candidates(net, static_cast<int>(i), open, procs, batch,
                                                           scheduler::channel_parts_on(base))) {
                    std::vector<std::string> layer_keys = model.kernel_keys(static_cast<int>(i), d);
                    // And its convolution's with 16-bit products (precision=bfloat16, float16).
                    for (const scheduler::Precision p : sixteen) {
                        scheduler::Distribution b = d;
                        b.precision = p;
                        if (b.products16(l.op))
                            for (std::string& k : model.kernel_keys(static_cast<int>(i), b))
                                layer_keys.push_back(std::move(k));
                    }
                    if (seconds && !layer_keys.empty()) {
                        const scheduler::LayerCost c = model.layer(static_cast<int>(i), d);
                        const double each =
                            (c.forward + c.backward_data + c.backward_weights) / static_cast<double>(layer_keys.size());
                        for (const std::string& k : layer_keys) (*seconds)[k] = std::max((*seconds)[k], each);
                    }
                    for (std::string& k : layer_keys) keys.insert(std::move(k));
                }
            }
            keys.insert(scheduler::time_key(
                net.train.optimizer == frontend::Optimizer::sgd ? scheduler::sgd_kernel : scheduler::adam_kernel,
                {{"params", {net.total_params()}}, {"threads", {model.threads()}}}));
        }
    return out;
}

}  // namespace dsl::backend
