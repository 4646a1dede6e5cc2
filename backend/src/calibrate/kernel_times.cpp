// A kernel worker's timer: the kernels of calibration keys, one after another, on the measuring process's
// device, with a network's input tiles for the input layer's key.
#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/data.hpp>

#include <dsl/base/error.hpp>

namespace dsl::backend {

KernelTimer::KernelTimer(const frontend::Network& net, const CalibrationSettings& s) {
    std::string error;
    data_ = make_data_source(net, 0, "", "", error);
    for (const auto& l : net.layers)
        if (l.op == frontend::OpKind::input && !input_) input_ = &l;
    if (!data_ || !input_) throw UserError("calibration needs a network with an input");
    runs_ = s.runs();
    kernels_ = measuring_kernels(s);
}

std::optional<double> KernelTimer::time(const std::string& key, std::string& why) {
    return time_kernel(key, kernels_, *data_, *input_, runs_, why);
}

}  // namespace dsl::backend
