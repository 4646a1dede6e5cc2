// What the GPU kernels and communicators share: the selected device's stream, on which every kernel and
// copy runs in order, and the error check that turns CUDA's failures into exceptions: a user error where the
// user can act on it (gpu_errors.hpp), else a bug in dsl.
#pragma once

#include "gpu_errors.hpp"

#include <cuda_runtime.h>

#include <cstddef>

namespace dsl::backend::gpu {

static_assert(cuda_status::memory_allocation == cudaErrorMemoryAllocation &&
              cuda_status::stub_library == cudaErrorStubLibrary &&
              cuda_status::insufficient_driver == cudaErrorInsufficientDriver &&
              cuda_status::devices_unavailable == cudaErrorDevicesUnavailable &&
              cuda_status::no_device == cudaErrorNoDevice &&
              cuda_status::no_kernel_image_for_device == cudaErrorNoKernelImageForDevice &&
              cuda_status::system_driver_mismatch == cudaErrorSystemDriverMismatch &&
              cuda_status::compat_not_supported_on_device == cudaErrorCompatNotSupportedOnDevice);

cudaStream_t stream();  // created on first use, on the selected device

// `bytes`: the memory `what` asked for, where it is an allocation, for the message when there is none left.
inline void check(cudaError_t e, const char* what, std::size_t bytes = 0) {
    if (e != cudaSuccess)
        throw_failure(cuda_failure(static_cast<int>(e), what, cudaGetErrorString(e), static_cast<std::int64_t>(bytes)));
}

}  // namespace dsl::backend::gpu
