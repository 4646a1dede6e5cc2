// Which failures of CUDA, cuDNN and NCCL the user can act on (no GPU, a driver that does not match, the GPU
// out of memory, a network or a GPU per process that NCCL needs) and the sentence that says what to do;
// every other failure is a bug in dsl. Host code that needs none of the libraries' headers, so that the CPU
// tests check it where there is no GPU or no CUDA; the GPU backend (gpu_context.hpp, gpu_conv.cu,
// gpu_comm.cpp) checks the status numbers below against those headers.
#pragma once

#include <cstdint>
#include <string>

namespace dsl::backend::gpu {

// The statuses named here, as the libraries number them (cudaError_t, cuDNN 9's cudnnStatus_t, ncclResult_t).
namespace cuda_status {
inline constexpr int memory_allocation = 2;
inline constexpr int stub_library = 34;
inline constexpr int insufficient_driver = 35;
inline constexpr int devices_unavailable = 46;
inline constexpr int no_device = 100;
inline constexpr int no_kernel_image_for_device = 209;
inline constexpr int system_driver_mismatch = 803;
inline constexpr int compat_not_supported_on_device = 804;
}  // namespace cuda_status
namespace cudnn_status {
inline constexpr int sublibrary_version_mismatch = 1002;
inline constexpr int sublibrary_loading_failed = 1008;
inline constexpr int incompatible_cuda_driver = 3005;
inline constexpr int incompatible_cudart = 3006;
inline constexpr int arch_mismatch = 3007;
inline constexpr int host_allocation_failed = 4003;  // CUDNN_STATUS_ALLOC_FAILED
inline constexpr int device_allocation_failed = 4004;
}  // namespace cudnn_status
namespace nccl_status {
inline constexpr int unhandled_cuda_error = 1;
inline constexpr int system_error = 2;
inline constexpr int invalid_usage = 5;
inline constexpr int remote_error = 6;
}  // namespace nccl_status

// A failed call, classed: `internal` (a bug in dsl: the message is the call and the library's text, as
// before), `user` (the message says what to do), or `out_of_memory` (a user error too, thrown as an
// OutOfMemory so that code which can do with less memory catches it).
struct GpuFailure {
    enum Kind { internal, user, out_of_memory };
    Kind kind = internal;
    std::string message;
};

// The failure of `call` that returned `status`, whose text (cudaGetErrorString, cudnnGetErrorString,
// ncclGetErrorString) is `text`; for CUDA, `bytes` is the memory the call asked for where it is known.
GpuFailure cuda_failure(int status, const std::string& call, const std::string& text, std::int64_t bytes = 0);
GpuFailure cudnn_failure(int status, const std::string& call, const std::string& text);
GpuFailure nccl_failure(int status, const std::string& call, const std::string& text);

// Throws `f`: an OutOfMemory, a UserError or (internal) a std::runtime_error, which the command reports as a
// bug in dsl.
[[noreturn]] void throw_failure(const GpuFailure& f);

}  // namespace dsl::backend::gpu
