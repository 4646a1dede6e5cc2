// splitmix64: the 64-bit mixing function behind every value that must be a pure function of its indices
// (synthetic data, initial weights), so that any process can make any part without communicating. The GPU's
// kernels (gpu/gpu_synthetic.cu) use it too.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSL_HOST_DEVICE __host__ __device__
#else
#define DSL_HOST_DEVICE
#endif

namespace dsl::backend {

DSL_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace dsl::backend
