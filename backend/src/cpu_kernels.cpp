// The CPU kernel set: oneDNN for convolutions and fc, Halide generators for the rest, C++ for the loss.
#include <dsl/backend/kernels.hpp>

#include "halide_kernels.hpp"
#include "onednn_kernels.hpp"

namespace dsl::backend {

Kernels cpu_kernels() {
    Kernels k{&onednn_conv(), &halide_batchnorm(), &halide_activation(), &halide_pool(),
              &onednn_fc(),   &halide_eltwise(),   &cpu_loss()};
    k.groupnorm = &cpu_groupnorm();
    k.dropout = &cpu_dropout();
    return k;
}

}  // namespace dsl::backend
