// The choice of device, the stream on it, and the GPU kernel set (what dsl/backend/gpu.hpp declares). Every
// kernel and copy runs in order on that one stream (gpu_context.hpp).
#include "gpu_common.cuh"

#include <dsl/backend/gpu.hpp>
#include <dsl/base/error.hpp>

#include <atomic>
#include <string>

namespace dsl::backend {
namespace gpu {
namespace {

std::atomic<int> selected_device{0};
std::atomic<bool> stream_created{false};

}  // namespace

// The CUDA runtime's current device is per host thread: any thread that reaches the GPU first makes the
// selected device its own, so work never lands on device 0 by default.
void bind_device() {
    thread_local int bound = -1;
    const int device = selected_device.load();
    if (bound == device) return;
    check(cudaSetDevice(device), "cudaSetDevice");
    bound = device;
}

cudaStream_t stream() {
    bind_device();
    // Non-blocking: the legacy default stream, which libraries may use, never waits for it or makes it wait.
    static const cudaStream_t created = [] {
        cudaStream_t s = nullptr;
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        stream_created = true;
        return s;
    }();
    return created;
}

}  // namespace gpu

using gpu::bind_device;
using gpu::check;
using gpu::selected_device;
using gpu::stream_created;

bool gpu_built() { return true; }

int gpu_devices(std::string* why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (why) *why = std::string("no CUDA device: ") + cudaGetErrorString(e);
        return 0;
    }
    if (count <= 0) {
        if (why) *why = "no CUDA device: the driver reports none";
        return 0;
    }
    return count;
}

void gpu_select(int device) {
    DSL_INTERNAL_CHECK(!stream_created || device == selected_device.load(),
                       "gpu_select(" + std::to_string(device) + ") after device " +
                           std::to_string(selected_device.load()) + " was first used");
    check(cudaSetDevice(device), "cudaSetDevice");
    selected_device = device;
    bind_device();
}

int gpu_for_local_rank(int local_rank, int devices) {
    DSL_INTERNAL_CHECK(devices > 0, "gpu_for_local_rank: no GPU to choose from");
    DSL_INTERNAL_CHECK(local_rank >= 0, "gpu_for_local_rank: negative local rank");
    return local_rank % devices;
}

std::string gpu_name() {
    bind_device();
    cudaDeviceProp properties{};
    check(cudaGetDeviceProperties(&properties, selected_device.load()), "cudaGetDeviceProperties");
    return properties.name;
}

std::int64_t gpu_memory_in_use() {
    bind_device();
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return static_cast<std::int64_t>(total - free);
}

void* gpu_allocate_pinned(std::size_t bytes) {
    bind_device();
    void* data = nullptr;
    if (cudaMallocHost(&data, bytes) != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: ordinary memory serves instead
        return nullptr;
    }
    return data;
}

void gpu_free_pinned(void* data) {
    if (data) cudaFreeHost(data);
}

Kernels gpu_kernels(const GpuOptions& options) {
    static const Kernels set = [&] {
        gpu::context().options = options;
        Kernels k;
        k.conv = gpu::conv_kernels();
        k.conv_bfloat16 = gpu::conv_kernels(scheduler::Precision::bfloat16);
        k.conv_float16 = gpu::conv_kernels(scheduler::Precision::float16);
        k.batchnorm = gpu::batchnorm_kernels();
        k.activation = gpu::activation_kernels();
        k.pool = gpu::pool_kernels();
        k.fc = gpu::fc_kernels();
        k.eltwise = gpu::eltwise_kernels();
        k.loss = gpu::loss_kernels();
        k.memory = gpu::memory_kernels();
        k.synthetic = gpu::synthetic_kernels();
        k.upsample = gpu::upsample_kernels();
        k.deconv = gpu::deconv_kernels();
        k.groupnorm = gpu::groupnorm_kernels();
        k.dropout = gpu::dropout_kernels();
        return k;
    }();
    return set;
}

}  // namespace dsl::backend
