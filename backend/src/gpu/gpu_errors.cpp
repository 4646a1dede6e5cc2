// CUDA's, cuDNN's and NCCL's failures classed as the user's to act on or dsl's own (gpu_errors.hpp), with
// the sentence that says what to do.
#include "gpu_errors.hpp"

#include <dsl/base/error.hpp>
#include <dsl/base/units.hpp>

#include <fmt/format.h>

#include <stdexcept>

namespace dsl::backend::gpu {

namespace {

GpuFailure bug_in_dsl(const std::string& call, const std::string& text) {
    return {GpuFailure::internal, call + ": " + text};
}

GpuFailure user_failure(const std::string& message) { return {GpuFailure::user, message}; }

// What needs less memory on each GPU, as the command says of the host's memory.
constexpr const char* less_memory =
    "a smaller mini-batch (--batch), or more processes with a schedule that splits the samples or their rows "
    "and columns among them (see 'dsl check NET SCHED'), needs less on each GPU";

// `ran_out`: what ran out of memory where, and how much was asked where that is known.
GpuFailure out_of_memory(const std::string& ran_out, const std::string& text) {
    return {GpuFailure::out_of_memory, fmt::format("{} ({}); {}", ran_out, text, less_memory)};
}

constexpr const char* or_on_the_cpu = "or run on the CPU (--device cpu)";

}  // namespace

GpuFailure cuda_failure(int status, const std::string& call, const std::string& text, std::int64_t bytes) {
    const std::string said = fmt::format("({}: {})", call, text);
    switch (status) {
        case cuda_status::memory_allocation:  // the device's memory (cudaMalloc), or pinned host memory
            return out_of_memory(
                bytes > 0 ? fmt::format("the GPU ran out of memory: {} asked for {}", call, human_bytes(static_cast<double>(bytes)))
                          : fmt::format("CUDA ran out of memory in {}", call),
                text);
        case cuda_status::no_device:
            return user_failure(fmt::format(
                "no CUDA device is visible to this process {}: check that the machine has an NVIDIA GPU whose "
                "driver is loaded (nvidia-smi lists it) and that CUDA_VISIBLE_DEVICES does not hide it, {}",
                said, or_on_the_cpu));
        case cuda_status::stub_library:
            return user_failure(fmt::format(
                "the CUDA driver library found is the CUDA toolkit's stub, not a driver {}: install the NVIDIA "
                "driver, or take the toolkit's stubs folder out of LD_LIBRARY_PATH; {}",
                said, or_on_the_cpu));
        case cuda_status::insufficient_driver:
            return user_failure(fmt::format(
                "the NVIDIA driver is missing, or older than the CUDA runtime this build of dsl uses {}: install a "
                "driver that supports that CUDA version (nvidia-smi shows the version the driver supports), {}",
                said, or_on_the_cpu));
        case cuda_status::system_driver_mismatch:
            return user_failure(fmt::format(
                "the NVIDIA driver's kernel module and its library are of different versions {}: reboot after a "
                "driver update, or reinstall the driver so that both match",
                said));
        case cuda_status::compat_not_supported_on_device:
            return user_failure(fmt::format(
                "the CUDA forward-compatibility libraries in use do not support this GPU {}: take them out of "
                "LD_LIBRARY_PATH and install a driver that supports this build's CUDA version",
                said));
        case cuda_status::devices_unavailable:
            return user_failure(fmt::format(
                "the GPUs are busy or unavailable {}: another program holds them in exclusive-process mode "
                "(nvidia-smi lists its processes); wait for it, or choose free GPUs with CUDA_VISIBLE_DEVICES",
                said));
        case cuda_status::no_kernel_image_for_device:
            return user_failure(fmt::format(
                "this build of dsl has no GPU code for this GPU's architecture {}: build dsl again with the GPU's "
                "compute capability in CMAKE_CUDA_ARCHITECTURES (nvidia-smi --query-gpu=compute_cap "
                "--format=csv shows it)",
                said));
        default: return bug_in_dsl(call, text);
    }
}

GpuFailure cudnn_failure(int status, const std::string& call, const std::string& text) {
    const std::string said = fmt::format("({}: {})", call, text);
    switch (status) {
        case cudnn_status::device_allocation_failed:
            return out_of_memory(fmt::format("the GPU ran out of memory in {}", call), text);
        case cudnn_status::host_allocation_failed:
            return {GpuFailure::out_of_memory,
                    fmt::format("cuDNN ran out of host memory in {} ({}); a smaller mini-batch (--batch), or fewer "
                                "processes on each node, needs less",
                                call, text)};
        case cudnn_status::arch_mismatch:
            return user_failure(fmt::format(
                "cuDNN does not support this GPU's architecture {}: run on a GPU that this cuDNN supports, {}", said,
                or_on_the_cpu));
        case cudnn_status::incompatible_cuda_driver:
        case cudnn_status::incompatible_cudart:
            return user_failure(fmt::format(
                "cuDNN does not match the NVIDIA driver or the CUDA runtime {}: install the cuDNN 9 build for this "
                "CUDA version, and a driver that supports it (nvidia-smi shows the CUDA version the driver "
                "supports)",
                said));
        case cudnn_status::sublibrary_version_mismatch:
        case cudnn_status::sublibrary_loading_failed:
            return user_failure(fmt::format(
                "cuDNN's installation is incomplete or mixes versions {}: install one cuDNN 9 whole, and check "
                "that LD_LIBRARY_PATH finds all of its libraries (libcudnn*.so) and no others",
                said));
        default: return bug_in_dsl(call, text);
    }
}

GpuFailure nccl_failure(int status, const std::string& call, const std::string& text) {
    const std::string said = fmt::format("({}: {})", call, text);
    switch (status) {
        case nccl_status::unhandled_cuda_error:
            return user_failure(fmt::format(
                "a CUDA call inside NCCL failed {}, most often for the GPU out of memory or a driver problem: run "
                "again with NCCL_DEBUG=INFO to see which, or send the messages through host memory (dsl run "
                "--gpu-comm mpi)",
                said));
        case nccl_status::system_error:
            return user_failure(fmt::format(
                "a system call or the network failed inside NCCL {}: often a shared-memory segment too small "
                "(/dev/shm; a container's --shm-size), a network interface NCCL cannot use (choose one with "
                "NCCL_SOCKET_IFNAME) or a process of the run that died; run again with NCCL_DEBUG=INFO to see "
                "which",
                said));
        case nccl_status::remote_error:
            return user_failure(fmt::format(
                "another process of the run, or the network between nodes, failed {}: that process's own error "
                "says why; run again with NCCL_DEBUG=INFO for NCCL's account",
                said));
        case nccl_status::invalid_usage:
            return user_failure(fmt::format(
                "NCCL refused the call {}, as it does when two processes of a run share a GPU: give each process "
                "a GPU of its own (one process per GPU of each node, CUDA_VISIBLE_DEVICES) or send the messages "
                "through host memory (dsl run --gpu-comm mpi); run again with NCCL_DEBUG=WARN for NCCL's reason",
                said));
        default: return bug_in_dsl(call, text);
    }
}

void throw_failure(const GpuFailure& f) {
    if (f.kind == GpuFailure::out_of_memory) throw OutOfMemory(f.message);
    if (f.kind == GpuFailure::user) throw UserError(f.message);
    throw std::runtime_error(f.message);
}

}  // namespace dsl::backend::gpu
