# Per-target toolchain set-up and the helper that compiles kernel sources (.cu) for the
# target of this build tree: nvcc for cuda, the HIP compiler for hip, the C++ compiler
# (against the SIMT emulator) for host. The .cu files are never renamed or copied.

if(LW_GPU STREQUAL "cuda")
  enable_language(CUDA)
  # CMake before 3.26 does not know nvcc's C++20 dialect (nvcc has had it since 12.0).
  if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  set(LW_GPU_DEFINE LW_TARGET_CUDA)
  # The vendor libraries: cuBLASLt, cuRAND, CUB (header-only, with the toolkit) and NCCL.
  add_library(lw_vendor_libs INTERFACE)
  target_link_libraries(lw_vendor_libs INTERFACE CUDA::cublasLt CUDA::curand)
  find_library(LW_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  find_path(LW_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  if(LW_NCCL_LIBRARY AND LW_NCCL_INCLUDE)
    target_link_libraries(lw_vendor_libs INTERFACE ${LW_NCCL_LIBRARY})
    target_include_directories(lw_vendor_libs INTERFACE ${LW_NCCL_INCLUDE})
    target_compile_definitions(lw_vendor_libs INTERFACE LW_HAVE_NCCL=1)
  else()
    message(STATUS "lightwave: NCCL not found (set NCCL_HOME); multi-GPU collectives will be unavailable")
  endif()
elseif(LW_GPU STREQUAL "hip")
  enable_language(HIP)
  set(CMAKE_HIP_STANDARD 20)
  set(CMAKE_HIP_STANDARD_REQUIRED ON)
  find_package(hip REQUIRED)
  set(LW_GPU_DEFINE LW_TARGET_HIP)
  # The vendor libraries, in place of cuBLASLt, cuRAND, CUB and NCCL.
  find_package(hipblaslt REQUIRED)
  find_package(hiprand REQUIRED)
  find_package(hipcub REQUIRED)
  find_package(rccl REQUIRED)
  add_library(lw_vendor_libs INTERFACE)
  target_link_libraries(lw_vendor_libs INTERFACE roc::hipblaslt hip::hiprand hip::hipcub roc::rccl)
  target_compile_definitions(lw_vendor_libs INTERFACE LW_HAVE_NCCL=1)
else()
  find_package(Boost 1.74 REQUIRED COMPONENTS context)
  find_package(Threads REQUIRED)
  set(LW_GPU_DEFINE LW_TARGET_HOST)
endif()

# lw_gpu_sources(<target> <file.cu>...): adds kernel sources compiled for this build's GPU target
# (on the host target as C++ with the emulator's warp built-ins: LW_DEVICE_CODE, see
# lw_simt/types.h).
function(lw_gpu_sources target)
  target_sources(${target} PRIVATE ${ARGN})
  if(LW_GPU STREQUAL "hip")
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE HIP)
  elseif(LW_GPU STREQUAL "host")
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++"
                                COMPILE_DEFINITIONS LW_DEVICE_CODE)
  endif()
endfunction()
