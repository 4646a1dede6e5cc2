// What the GPU kernels and communicators share: the selected device's stream, on which every kernel and
// copy runs in order, and error checks that turn CUDA's, cuDNN's and NCCL's failures into exceptions.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace dsl::backend::gpu {

cudaStream_t stream();  // created on first use, on the selected device

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace dsl::backend::gpu
