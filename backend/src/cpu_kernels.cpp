// The CPU kernel set: oneDNN for convolutions and fc, Halide generators for the rest, C++ for the loss.
#include <dsl/backend/kernels.hpp>

#include "halide_kernels.hpp"
#include "onednn_kernels.hpp"

namespace dsl::backend {

Kernels cpu_kernels() {
    return Kernels{&onednn_conv(), &halide_batchnorm(), &halide_activation(), &halide_pool(),
                   &onednn_fc(),   &halide_eltwise(),   &cpu_loss()};
}

}  // namespace dsl::backend
