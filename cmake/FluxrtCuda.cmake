# The CUDA backend is built when nvcc is found (FLUXRT_CUDA=AUTO) or required (ON). Without it the
# backend library is a stub whose create() throws Unsupported("built without CUDA"), and the CUDA
# language is never enabled, so a CPU-only build never needs the toolkit.
set(FLUXRT_HAVE_CUDA OFF)
if(NOT FLUXRT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # SASS for A100 (sm_80) and H100/H200 (sm_90), plus compute_90 PTX so newer GPUs can JIT it.
      # Nothing here uses Hopper-only (sm_90a) instructions: mma.sync m16n8k16 runs on both.
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 12+'s C++20 flag; core's headers need C++20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(FLUXRT_HAVE_CUDA ON)
  elseif(FLUXRT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FLUXRT_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

set(FLUXRT_HAVE_CUDNN OFF)
if(FLUXRT_HAVE_CUDA)
  find_path(FLUXRT_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(FLUXRT_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(FLUXRT_CUDNN_INCLUDE AND FLUXRT_CUDNN_LIBRARY)
    set(FLUXRT_HAVE_CUDNN ON)
  endif()
endif()
message(STATUS "fluxrt: CUDA backend ${FLUXRT_HAVE_CUDA} (cuDNN convolutions ${FLUXRT_HAVE_CUDNN})")

function(fluxrt_cuda_layer)
  if(FLUXRT_HAVE_CUDA)
    file(GLOB _sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
    add_library(fluxrt_backend_cuda STATIC ${_sources})
    set_target_properties(fluxrt_backend_cuda PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON
                                                         CUDA_SEPARABLE_COMPILATION OFF)
    # .cu files never include fmt (nvcc cannot compile its consteval checks; see cuda/launch.h). Device code stays strict IEEE
    # (no --use_fast_math: the kernels pick fast intrinsics explicitly where they are exact enough).
    target_compile_options(fluxrt_backend_cuda PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcudafe=--diag_suppress=esa_on_defaulted_function_ignored>)
    target_link_libraries(fluxrt_backend_cuda PUBLIC fluxrt_core PRIVATE CUDA::cudart_static CUDA::cublasLt)
    target_compile_definitions(fluxrt_backend_cuda PUBLIC FLUXRT_HAVE_CUDA=1)
    if(FLUXRT_HAVE_CUDNN)
      target_include_directories(fluxrt_backend_cuda PRIVATE ${FLUXRT_CUDNN_INCLUDE})
      target_link_libraries(fluxrt_backend_cuda PRIVATE ${FLUXRT_CUDNN_LIBRARY})
      target_compile_definitions(fluxrt_backend_cuda PRIVATE FLUXRT_HAVE_CUDNN=1)
    endif()
  else()
    add_library(fluxrt_backend_cuda STATIC ${CMAKE_SOURCE_DIR}/src/backend/cuda_stub/cuda_stub.cpp)
    target_link_libraries(fluxrt_backend_cuda PUBLIC fluxrt_core)
  endif()
  target_include_directories(fluxrt_backend_cuda PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
endfunction()
