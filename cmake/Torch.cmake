# Note [Linking torch]
# We use LibTorch's headers and link only libtorch_cpu and libc10: the CUDA parts of torch
# (and libcuda / libnvrtc) are reached through the dispatcher or dlopen at run time, so the
# library loads on machines without a GPU. find_package(Torch) is avoided on purpose: on a CUDA
# build of torch it requires a matching CUDA toolkit and pulls CUDA libraries into the link.
if(NOT TORCH_ROOT)
  foreach(prefix IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${prefix}/Torch/TorchConfig.cmake")
      get_filename_component(TORCH_ROOT "${prefix}/../.." ABSOLUTE)
    endif()
  endforeach()
endif()
if(NOT TORCH_ROOT OR NOT EXISTS "${TORCH_ROOT}/include/ATen/ATen.h")
  message(FATAL_ERROR "torch not found: pass -DCMAKE_PREFIX_PATH=$(python -c 'import torch;print(torch.utils.cmake_prefix_path)')")
endif()
message(STATUS "lazyfuse: torch at ${TORCH_ROOT}")

add_library(lazyfuse_torch INTERFACE)
target_include_directories(lazyfuse_torch SYSTEM INTERFACE
  $<BUILD_INTERFACE:${TORCH_ROOT}/include>
  $<BUILD_INTERFACE:${TORCH_ROOT}/include/torch/csrc/api/include>)
target_link_libraries(lazyfuse_torch INTERFACE
  $<BUILD_INTERFACE:${TORCH_ROOT}/lib/libtorch_cpu.so>
  $<BUILD_INTERFACE:${TORCH_ROOT}/lib/libc10.so>)
target_compile_definitions(lazyfuse_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)

# Shared precompiled header for every torch-facing target. See Note [Precompiled headers].
add_library(lazyfuse_pch OBJECT cmake/pch.cpp)
target_link_libraries(lazyfuse_pch PUBLIC lazyfuse_torch)
target_precompile_headers(lazyfuse_pch PRIVATE
  <ATen/core/Tensor.h> <ATen/core/dispatch/Dispatcher.h> <ATen/core/ivalue.h>
  <c10/core/TensorImpl.h> <torch/library.h> <vector> <string> <memory>)

# Note [Precompiled headers]
# Parsing torch's headers dominates our compile time; every target reuses one PCH.
function(lazyfuse_use_pch target)
  target_precompile_headers(${target} REUSE_FROM lazyfuse_pch)
endfunction()
