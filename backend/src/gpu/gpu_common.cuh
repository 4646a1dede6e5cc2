// What the GPU kernel files share: device memory, the scratch every kernel uses (the context), and launch
// helpers. Internal to the GPU backend; everything is in dsl::backend::gpu.
//
// Calls come from one thread at a time (the trainer's; MPI runs FUNNELED): the scratch buffers, the pinned
// staging memory and the convolutions' plans are shared by every call without locks.
#pragma once

#include "gpu_context.hpp"

// tensor.hpp's, planes.hpp's and gpu_volumes.hpp's conversions of a view to its const view are never called on
// a view that is const already, and nvcc warns so at every instantiation of ConstView (ConstPlanes,
// ConstVolumes).
#pragma nv_diag_suppress 554

#include <dsl/backend/gpu.hpp>

#include "../tensors/planes.hpp"
#include "gpu_volumes.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>

namespace dsl::backend::gpu {

// Makes the selected device the calling thread's current one (gpu_device.cu).
void bind_device();

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// Device memory (gpu_memory.cu).
void* device_malloc(std::size_t bytes);
void device_free(void* p);

// Device scratch that grows to the largest request and keeps it, so that steady-state calls allocate
// nothing. Its contents do not survive growth.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get(std::size_t bytes) {
        if (bytes > size_) {
            release();
            data_ = device_malloc(bytes);
            size_ = bytes;
        }
        return data_;
    }
    template <typename T>
    T* as(std::int64_t count) {
        return static_cast<T*>(get(static_cast<std::size_t>(count) * sizeof(T)));
    }
    void release() {
        device_free(data_);
        data_ = nullptr;
        size_ = 0;
    }
    void shrink_to(std::size_t bytes) {
        if (size_ > bytes) release();
    }

private:
    void* data_ = nullptr;
    std::size_t size_ = 0;
};

// Pinned host memory through which host arrays travel to and from the device: copies from pinned memory
// are truly asynchronous, so an upload never waits for the stream. Before the host overwrites it, it waits
// for the copy that last read it (long done, in practice: kernels that upload also download a result).
class Staging {
public:
    Staging() = default;
    Staging(const Staging&) = delete;
    Staging& operator=(const Staging&) = delete;

    void* get(std::size_t bytes) {
        if (pending_) {
            check(cudaEventSynchronize(read_), "cudaEventSynchronize (staging)");
            pending_ = false;
        }
        if (bytes > size_) {
            if (data_) check(cudaFreeHost(data_), "cudaFreeHost");
            data_ = nullptr;
            size_ = 0;
            bind_device();
            check(cudaMallocHost(&data_, bytes), "cudaMallocHost");
            size_ = bytes;
        }
        return data_;
    }
    // After enqueueing a copy that reads the staging memory.
    void read_by_stream() {
        if (!read_) check(cudaEventCreateWithFlags(&read_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventRecord(read_, gpu::stream()), "cudaEventRecord");
        pending_ = true;
    }

private:
    void* data_ = nullptr;
    std::size_t size_ = 0;
    cudaEvent_t read_ = nullptr;
    bool pending_ = false;
};

// A host array of per-channel values, float or double (uploaded as doubles: exact either way). Implicit, so
// that `upload` takes a braced list of either.
struct HostValues {
    HostValues(const float* p) : f(p) {}
    HostValues(const double* p) : d(p) {}
    double operator[](std::int64_t i) const { return f ? double(f[i]) : d[i]; }
    const float* f = nullptr;
    const double* d = nullptr;
};

// What every kernel shares: the options and the scratch memory.
struct Context {
    GpuOptions options;
    Staging staging;
    DeviceBuffer values;    // host arrays uploaded for the next kernel
    DeviceBuffer partials;  // reductions' per-warp or per-block sums
    DeviceBuffer totals;    // reductions' results, before they go to the host
    DeviceBuffer labels;    // the loss's labels, densely
    DeviceBuffer argmax;    // max pooling's window offsets, between the backward's two passes
    DeviceBuffer sum;       // add's running sum when it has more inputs than one kernel takes

    // Copies `arrays` of `count` values each, one after another, into device memory as doubles; array k is at
    // k * count of the result.
    const double* upload(std::int64_t count, std::initializer_list<HostValues> arrays) {
        const std::int64_t total = count * static_cast<std::int64_t>(arrays.size());
        const std::size_t bytes = static_cast<std::size_t>(total) * sizeof(double);
        auto* host = static_cast<double*>(staging.get(bytes));
        std::int64_t k = 0;
        for (const HostValues& a : arrays) {
            for (std::int64_t i = 0; i < count; ++i) host[k * count + i] = a[i];
            ++k;
        }
        double* device = values.as<double>(total);
        if (bytes) {
            check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, gpu::stream()), "upload of host values");
            staging.read_by_stream();
        }
        return device;
    }

    // The `count` doubles at `device` on the host, once the kernels that write them are done.
    const double* fetch(const double* device, std::int64_t count) {
        const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(double);
        auto* host = static_cast<double*>(staging.get(bytes));
        if (bytes)
            check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, gpu::stream()), "download of sums");
        check(cudaStreamSynchronize(gpu::stream()), "cudaStreamSynchronize");
        return host;
    }
};

// The one context (gpu_memory.cu).
Context& context();

// The kernels of each layer kind and the device memory, one file each; gpu_kernels() puts them together.
// gpu_conv.cu: float32's, or (Kernels::conv_bfloat16, conv_float16) a 16-bit precision's.
ConvKernels* conv_kernels(scheduler::Precision p = scheduler::Precision::float32);
FcKernels* fc_kernels();                  // gpu_conv.cu
BatchNormKernels* batchnorm_kernels();    // gpu_batchnorm.cu
GroupNormKernels* groupnorm_kernels();    // gpu_batchnorm.cu
DropoutKernels* dropout_kernels();        // gpu_eltwise.cu
ActivationKernels* activation_kernels();  // gpu_eltwise.cu
PoolKernels* pool_kernels();              // gpu_pool.cu
EltwiseKernels* eltwise_kernels();        // gpu_eltwise.cu
LossKernels* loss_kernels();              // gpu_loss.cu
Memory* memory_kernels();                 // gpu_memory.cu
SyntheticKernels* synthetic_kernels();    // gpu_synthetic.cu
UpsampleKernels* upsample_kernels();      // gpu_resample.cu
DeconvKernels* deconv_kernels();          // gpu_resample.cu: cuDNN's convolutions

}  // namespace dsl::backend::gpu
