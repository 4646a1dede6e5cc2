// The CPU kernels other than convolution and fc: Halide pipelines compiled ahead of time (backend/halide),
// and the loss in plain C++.
#pragma once

#include <dsl/backend/kernels.hpp>

namespace dsl::backend {

// Process-wide instances; they hold no state, and the Halide runtime threads each call over the cores.
ActivationKernels& halide_activation();
BatchNormKernels& halide_batchnorm();
PoolKernels& halide_pool();
EltwiseKernels& halide_eltwise();
// Softmax cross-entropy in plain C++ (a loop over classes per pixel, not worth a generator), in double.
LossKernels& cpu_loss();
// Group norm and dropout in plain C++ over OpenMP's threads (cpu_loops.cpp).
GroupNormKernels& cpu_groupnorm();
DropoutKernels& cpu_dropout();

}  // namespace dsl::backend
