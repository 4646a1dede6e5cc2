// DSL_HOST_DEVICE marks the functions that the host's kernels and the GPU's (gpu/*.cu) share, so that both
// compute the same values from one definition: __host__ __device__ where nvcc compiles them, nothing for the
// host's compiler.
#pragma once

#if defined(__CUDACC__)
#define DSL_HOST_DEVICE __host__ __device__
#else
#define DSL_HOST_DEVICE
#endif
