// Device memory: allocation, the context that holds every kernel's scratch, and the Memory interface
// (copies to and from the host, and the packing of views that communication sends).
#include "../tensors/narrow.hpp"
#include "gpu_common.cuh"
#include "gpu_map.cuh"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>

namespace dsl::backend::gpu {

// cudaMalloc's out-of-memory is an OutOfMemory (a std::bad_alloc, which the convolutions' planning catches to
// try with less) that says how much was asked and what needs less. The error is not sticky; clearing it keeps
// later checks from reporting it again.
void* device_malloc(std::size_t bytes) {
    bind_device();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) cudaGetLastError();
    check(e, "cudaMalloc", bytes);
    return p;
}

void device_free(void* p) {
    if (!p) return;
    // Kernels already queued may still use it.
    check(cudaStreamSynchronize(gpu::stream()), "cudaStreamSynchronize before cudaFree");
    check(cudaFree(p), "cudaFree");
}

// Never destroyed: at exit the CUDA runtime may be unloaded before static destructors would free it.
Context& context() {
    static Context* ctx = new Context();
    return *ctx;
}

namespace {

class GpuMemory final : public Memory {
public:
    bool host() const override { return false; }

    float* allocate(std::int64_t count) override {
        // At least one element, so that every allocation is a distinct pointer as on the host.
        const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(float);
        void* p = device_malloc(bytes);
        // Zeroed before any other stream (NCCL's, the legacy default one) can see it.
        const cudaError_t set = cudaMemsetAsync(p, 0, bytes, gpu::stream());
        const cudaError_t done = set == cudaSuccess ? cudaStreamSynchronize(gpu::stream()) : set;
        if (done != cudaSuccess) {
            cudaFree(p);
            check(done, "zeroing new device memory");
        }
        return static_cast<float*>(p);
    }

    // Tensors and buffers release from destructors, where an exception would end the process. An error here
    // is the sticky one of a kernel that failed before, which the call that met it first has thrown.
    void release(float* data) override {
        try {
            device_free(data);
        } catch (const std::exception&) {
        }
    }

    void fill(View v, float value) override {
        const Volumes p = volumes(v);
        map("fill", p.dims, Merge::all, operand(p), no_inputs(), Fill{{}, value});
    }

    void upload(const float* host, float* data, std::int64_t count) override {
        if (count <= 0) return;
        check(cudaMemcpyAsync(data, host, static_cast<std::size_t>(count) * sizeof(float), cudaMemcpyHostToDevice,
                              gpu::stream()),
              "upload (cudaMemcpyAsync)");
        // The caller may reuse `host` as soon as this returns.
        check(cudaStreamSynchronize(gpu::stream()), "upload (cudaStreamSynchronize)");
    }

    void download(const float* data, float* host, std::int64_t count) override {
        if (count <= 0) return;
        check(cudaMemcpyAsync(host, data, static_cast<std::size_t>(count) * sizeof(float), cudaMemcpyDeviceToHost,
                              gpu::stream()),
              "download (cudaMemcpyAsync)");
        check(cudaStreamSynchronize(gpu::stream()), "download (cudaStreamSynchronize)");
    }

    // Views of any rank (a volume's halo pieces are 3-D boxes), packed in the order of their elements: samples,
    // channels, then the places, the columns fastest, as the host packs them.
    void pack(ConstView v, float* out) override {
        const ConstVolumes p = volumes(v);
        map("pack", p.dims, Merge::all, dense_operand(out, p.dims), inputs(p), Copy{});
    }

    void unpack(const float* in, View v, bool add) override {
        const Volumes p = volumes(v);
        const ConstVolumes from = dense_volumes(in, p.dims);
        if (add)
            map("unpack", p.dims, Merge::all, operand(p), inputs(ConstVolumes(p), from), Add2{});
        else
            map("unpack", p.dims, Merge::all, operand(p), inputs(from), Copy{});
    }

    void synchronize() override { check(cudaStreamSynchronize(gpu::stream()), "cudaStreamSynchronize"); }

    // One pass over the view and its dense 16 bits (a dense float32 copy of it was three).
    void narrow(View v, scheduler::Precision p, std::uint16_t* out) override {
        const Volumes view = volumes(v);
        map("narrow", view.dims, Merge::none, operand(view), inputs(ConstVolumes(view)),
            Narrow16InPlace{{out, view.dims, p == scheduler::Precision::bfloat16}});
    }

    void widen(const std::uint16_t* in, scheduler::Precision p, View v) override {
        const Volumes view = volumes(v);
        map("widen", view.dims, Merge::none, operand(view), no_inputs(),
            Widen16{{in, view.dims, p == scheduler::Precision::bfloat16}});
    }
};

}  // namespace

Memory* memory_kernels() {
    static GpuMemory instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
