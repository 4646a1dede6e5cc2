// The GPU backend's stand-in in a build without CUDA, cuDNN or NCCL: it says so and runs nothing.
#include <dsl/backend/gpu.hpp>

#include <dsl/base/error.hpp>

namespace dsl::backend {

namespace {
// The command asks gpu_devices() first: a call that gets here is a bug.
[[noreturn]] void not_built() {
    internal_failure(__FILE__, __LINE__, "gpu_built()",
                     "this build of dsl has no GPU backend (CUDA, cuDNN or NCCL was not found when it was built)");
}
}  // namespace

bool gpu_built() { return false; }

int gpu_devices(std::string* why) {
    if (why) *why = "this build of dsl has no GPU backend (CUDA, cuDNN or NCCL was not found when it was built)";
    return 0;
}

void gpu_select(int) { not_built(); }
int gpu_for_local_rank(int, int) { not_built(); }
std::string gpu_name() { not_built(); }
std::int64_t gpu_memory_in_use() { not_built(); }
void* gpu_allocate_pinned(std::size_t) { return nullptr; }
void gpu_free_pinned(void*) {}
Kernels gpu_kernels(const GpuOptions&) { not_built(); }
std::unique_ptr<Comm> gpu_comm(std::unique_ptr<Comm>, bool) { not_built(); }

}  // namespace dsl::backend
