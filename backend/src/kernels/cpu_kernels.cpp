// The CPU kernel set: oneDNN for convolutions (transposed ones too) and fc, Halide generators for the rest,
// C++ for the loss and upsampling.
#include <dsl/backend/kernels.hpp>

#include "halide_kernels.hpp"
#include "onednn_kernels.hpp"
#include "resample_kernels.hpp"

namespace dsl::backend {

DeconvKernels& cpu_deconv() {
    static const std::unique_ptr<DeconvKernels> instance =
        deconv_over_conv(onednn_conv(), halide_pool(), halide_eltwise(), host_memory());
    return *instance;
}

Kernels cpu_kernels() {
    Kernels k{&onednn_conv(), &halide_batchnorm(), &halide_activation(), &halide_pool(),
              &onednn_fc(),   &halide_eltwise(),   &cpu_loss()};
    k.upsample = &cpu_upsample();
    k.deconv = &cpu_deconv();
    k.groupnorm = &cpu_groupnorm();
    k.dropout = &cpu_dropout();
    k.conv_bfloat16 = onednn_conv_bfloat16();
    // oneDNN's convolutions, and blocked_kernels.hpp for the rest, where the CPU's convolutions take them.
    k.blocked = onednn_blocks16();
    if (!k.blocked) k.planar_why = "this CPU has no AVX-512, and oneDNN's convolutions on blocks of 16 channels would be its reference ones";
    return k;
}

}  // namespace dsl::backend
