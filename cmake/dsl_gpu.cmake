# The GPU backend is built when CUDA (nvcc and the runtime), cuDNN 9 and NCCL 2 are found, by default
# under /usr/local/cuda; otherwise the configure step says what is missing and the backend is skipped.
# DSL_GPU=OFF skips it on purpose; DSL_GPU=ON makes a missing piece an error.
set(DSL_GPU AUTO CACHE STRING "Build the GPU backend: AUTO (when CUDA, cuDNN and NCCL are found), ON or OFF")
set_property(CACHE DSL_GPU PROPERTY STRINGS AUTO ON OFF)
set(DSL_GPU_BUILT OFF)

function(dsl_gpu_skip why)
  if(DSL_GPU STREQUAL "ON")
    message(FATAL_ERROR "dsl: DSL_GPU=ON, but ${why}")
  endif()
  message(STATUS "dsl: GPU backend skipped: ${why}")
endfunction()

if(DSL_GPU STREQUAL "OFF")
  message(STATUS "dsl: GPU backend skipped: DSL_GPU=OFF")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "The CUDA compiler")
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  dsl_gpu_skip("no CUDA compiler (nvcc) was found")
  return()
endif()
# Ampere and Hopper as machine code, and Hopper's PTX for later GPUs to compile when they load it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "GPU architectures the CUDA kernels are built for")
endif()
enable_language(CUDA)
find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  dsl_gpu_skip("the CUDA toolkit's runtime was not found")
  return()
endif()

find_path(DSL_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(DSL_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
find_path(DSL_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(DSL_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
if(NOT DSL_CUDNN_INCLUDE OR NOT DSL_CUDNN_LIBRARY)
  dsl_gpu_skip("cuDNN (cudnn.h, libcudnn) was not found")
  return()
endif()
if(NOT DSL_NCCL_INCLUDE OR NOT DSL_NCCL_LIBRARY)
  dsl_gpu_skip("NCCL (nccl.h, libnccl) was not found")
  return()
endif()

add_library(dsl_cudnn UNKNOWN IMPORTED)
set_target_properties(dsl_cudnn PROPERTIES IMPORTED_LOCATION "${DSL_CUDNN_LIBRARY}"
                                           INTERFACE_INCLUDE_DIRECTORIES "${DSL_CUDNN_INCLUDE}")
add_library(dsl_nccl UNKNOWN IMPORTED)
set_target_properties(dsl_nccl PROPERTIES IMPORTED_LOCATION "${DSL_NCCL_LIBRARY}"
                                          INTERFACE_INCLUDE_DIRECTORIES "${DSL_NCCL_INCLUDE}")
set(DSL_GPU_BUILT ON)
message(STATUS "dsl: GPU backend built: CUDA ${CUDAToolkit_VERSION} (${CMAKE_CUDA_ARCHITECTURES}), "
               "${DSL_CUDNN_LIBRARY}, ${DSL_NCCL_LIBRARY}")
