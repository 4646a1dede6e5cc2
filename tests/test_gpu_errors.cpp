// The classing of CUDA's, cuDNN's and NCCL's failures (backend/src/gpu/gpu_errors.hpp): the statuses a user
// can act on give a user error that says what to do, every other status stays a bug in dsl with the call and
// the library's text. Host code: these run on any machine, with or without a GPU or CUDA.
#include "../backend/src/gpu/gpu_errors.hpp"

#include <dsl/base/error.hpp>

#include <catch2/catch.hpp>

#include <new>
#include <stdexcept>
#include <string>

using namespace dsl;
using namespace dsl::backend::gpu;

namespace {

enum class Library { cuda, cudnn, nccl };

GpuFailure failure(Library library, int status, std::int64_t bytes = 0) {
    switch (library) {
        case Library::cuda: return cuda_failure(status, "theCall", "the library's text", bytes);
        case Library::cudnn: return cudnn_failure(status, "theCall", "the library's text");
        case Library::nccl: return nccl_failure(status, "theCall", "the library's text");
    }
    return {};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("GPU failures the user can act on are user errors that say what to do", "[errors][gpu]") {
    const auto [library, status, kind, says] = GENERATE(table<Library, int, GpuFailure::Kind, std::string>({
        {Library::cuda, cuda_status::no_device, GpuFailure::user, "no CUDA device is visible"},
        {Library::cuda, cuda_status::insufficient_driver, GpuFailure::user, "the NVIDIA driver is missing, or older"},
        {Library::cuda, cuda_status::stub_library, GpuFailure::user, "stub, not a driver"},
        {Library::cuda, cuda_status::system_driver_mismatch, GpuFailure::user, "of different versions"},
        {Library::cuda, cuda_status::compat_not_supported_on_device, GpuFailure::user, "forward-compatibility"},
        {Library::cuda, cuda_status::devices_unavailable, GpuFailure::user, "busy or unavailable"},
        {Library::cuda, cuda_status::no_kernel_image_for_device, GpuFailure::user, "CMAKE_CUDA_ARCHITECTURES"},
        {Library::cuda, cuda_status::memory_allocation, GpuFailure::out_of_memory, "CUDA ran out of memory"},
        {Library::cudnn, cudnn_status::host_allocation_failed, GpuFailure::out_of_memory, "out of host memory"},
        {Library::cudnn, cudnn_status::device_allocation_failed, GpuFailure::out_of_memory, "the GPU ran out"},
        {Library::cudnn, cudnn_status::arch_mismatch, GpuFailure::user, "does not support this GPU's architecture"},
        {Library::cudnn, cudnn_status::incompatible_cuda_driver, GpuFailure::user, "does not match the NVIDIA driver"},
        {Library::cudnn, cudnn_status::incompatible_cudart, GpuFailure::user, "does not match the NVIDIA driver"},
        {Library::cudnn, cudnn_status::sublibrary_loading_failed, GpuFailure::user, "installation is incomplete"},
        {Library::cudnn, cudnn_status::sublibrary_version_mismatch, GpuFailure::user, "installation is incomplete"},
        {Library::nccl, nccl_status::unhandled_cuda_error, GpuFailure::user, "NCCL_DEBUG=INFO"},
        {Library::nccl, nccl_status::system_error, GpuFailure::user, "NCCL_SOCKET_IFNAME"},
        {Library::nccl, nccl_status::remote_error, GpuFailure::user, "another process of the run"},
        {Library::nccl, nccl_status::invalid_usage, GpuFailure::user, "a GPU of its own"},
    }));
    CAPTURE(static_cast<int>(library), status);
    const GpuFailure f = failure(library, status);
    CHECK(f.kind == kind);
    CHECK(has(f.message, says));
    // The call and the library's own text stay, for whoever reads further; the message ends without a period.
    CHECK(has(f.message, "theCall"));
    CHECK(has(f.message, "the library's text"));
    CHECK(f.message.back() != '.');
}

TEST_CASE("every other GPU failure stays a bug in dsl, said as the call and the library's text", "[errors][gpu]") {
    const auto [library, status] = GENERATE(table<Library, int>({
        {Library::cuda, 1},      // cudaErrorInvalidValue: dsl passed it
        {Library::cuda, 400},    // cudaErrorInvalidResourceHandle
        {Library::cuda, 700},    // cudaErrorIllegalAddress: a kernel of dsl's read outside its memory
        {Library::cudnn, 2000},  // CUDNN_STATUS_BAD_PARAM
        {Library::cudnn, 3000},  // CUDNN_STATUS_NOT_SUPPORTED: planning tries another layout
        {Library::cudnn, 4000},  // CUDNN_STATUS_INTERNAL_ERROR
        {Library::nccl, 3},      // ncclInternalError
        {Library::nccl, 4},      // ncclInvalidArgument
    }));
    CAPTURE(static_cast<int>(library), status);
    const GpuFailure f = failure(library, status);
    CHECK(f.kind == GpuFailure::internal);
    CHECK(f.message == "theCall: the library's text");
}

TEST_CASE("the GPU out of memory says how much was asked and what needs less", "[errors][gpu]") {
    const GpuFailure asked =
        cuda_failure(cuda_status::memory_allocation, "cudaMalloc", "out of memory", std::int64_t{3} << 29);
    CHECK(asked.message ==
          "the GPU ran out of memory: cudaMalloc asked for 1.5 GiB (out of memory); a smaller mini-batch (--batch), "
          "or more processes with a schedule that splits the samples or their rows and columns among them (see "
          "'dsl check NET SCHED'), needs less on each GPU");
    CHECK(has(cuda_failure(cuda_status::memory_allocation, "cudaMalloc", "out of memory", 512).message,
              "asked for 512 B"));
    // Where the call does not say how much (pinned host memory, a stream's), the message names the call.
    CHECK(has(cuda_failure(cuda_status::memory_allocation, "cudaMallocHost", "out of memory").message,
              "CUDA ran out of memory in cudaMallocHost (out of memory); a smaller mini-batch"));
    CHECK(has(cudnn_failure(cudnn_status::device_allocation_failed, "cudnnFind", "CUDNN_STATUS_INTERNAL_ERROR").message,
              "the GPU ran out of memory in cudnnFind (CUDNN_STATUS_INTERNAL_ERROR); a smaller mini-batch"));
}

TEST_CASE("GPU failures are thrown as the kind they are", "[errors][gpu]") {
    const GpuFailure oom = cuda_failure(cuda_status::memory_allocation, "cudaMalloc", "out of memory", 1024);
    // A std::bad_alloc, which code that can do with less memory catches; what() is the whole sentence.
    CHECK_THROWS_AS(throw_failure(oom), std::bad_alloc);
    try {
        throw_failure(oom);
    } catch (const OutOfMemory& e) {
        CHECK(std::string(e.what()) == oom.message);
    }
    CHECK_THROWS_AS(throw_failure(nccl_failure(nccl_status::system_error, "ncclCommInitRank", "system error")),
                    UserError);
    CHECK_THROWS_WITH(throw_failure(cudnn_failure(2000, "cudnnSetTensorNdDescriptor", "CUDNN_STATUS_BAD_PARAM")),
                      "cudnnSetTensorNdDescriptor: CUDNN_STATUS_BAD_PARAM");
    bool user = false;
    try {
        throw_failure(cuda_failure(700, "kernel", "an illegal memory access was encountered"));
    } catch (const UserError&) {
        user = true;
    } catch (const std::runtime_error&) {
    }
    CHECK_FALSE(user);
}
