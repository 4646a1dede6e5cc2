// The GPU backend: cuDNN convolutions and CUDA kernels for every other layer (gpu/gpu_*.cu), device
// selection, and the communicators of device buffers (gpu/gpu_comm.cpp): NCCL where every process has a
// GPU of its own, MPI through host memory where processes share one. It is built when CUDA, cuDNN and
// NCCL are found; in a build without it, gpu_built() is false, gpu_devices() is 0 and says why, and the
// rest throws.
#pragma once

#include <dsl/backend/comm.hpp>
#include <dsl/backend/kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dsl::backend {

bool gpu_built();

// The GPUs this process sees; 0 where there are none (or no GPU backend), with the reason in `why`.
int gpu_devices(std::string* why = nullptr);

// Makes `device` this process's GPU: before any other GPU call. Processes of one node pick theirs by local
// rank (gpu_for_local_rank).
void gpu_select(int device);
int gpu_for_local_rank(int local_rank, int devices);
std::string gpu_name();  // the selected GPU's name, e.g. "NVIDIA H100 80GB HBM3"
// Bytes in use on the selected GPU now, by every process that uses it (its total less what is free).
std::int64_t gpu_memory_in_use();

// Page-locked host memory of `bytes`, which copies to the selected GPU read without staging it (the buffers of
// reads ahead of the step, --prefetch), freed by gpu_free_pinned; null where it cannot be had (no GPU backend,
// or none left), and the caller takes ordinary memory.
void* gpu_allocate_pinned(std::size_t bytes);
void gpu_free_pinned(void* data);

struct GpuOptions {
    // The most scratch memory a convolution's algorithm may use: cuDNN's fastest algorithm within it is
    // chosen (each shape timed once, as PyTorch's benchmark mode does). Platforms give it as `workspace`.
    std::int64_t workspace = std::int64_t{256} << 20;
    bool tf32 = false;  // let convolutions round their inputs to TF32 (faster; ~1e-3 relative error)
};

// The kernel set of the selected GPU, its memory the device's, every kernel on one stream. Options apply
// from the first call on; later calls return the same set.
Kernels gpu_kernels(const GpuOptions& options = {});

// The communicator of a GPU run over the processes of `host` (MPI's, or one process's), whose buffers are
// device memory: `nccl` sends them GPU to GPU with NCCL (every process must have its own GPU); otherwise
// they go through pinned host memory over `host`. Host values (allreduce of doubles, max, all) go over
// `host` either way.
std::unique_ptr<Comm> gpu_comm(std::unique_ptr<Comm> host, bool nccl);

}  // namespace dsl::backend
