#pragma once

// Runs fused kernels on a CUDA device: loads a graph's compiled binary as a driver module on the
// device, and launches each kernel on torch's current CUDA stream with outputs allocated by
// torch's caching allocator. Only reached where the driver was found (see kernels/cuda_api.h).

#include "kernels/cuda_codegen.h"
#include "kernels/cuda_compiler.h"
#include "kernels/fused_runner.h"

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

struct CudaKernelHandle {
  void* function = nullptr;         // CuFunction
  void* vector_function = nullptr;  // CuFunction of the 4-wide variant, or null
  int max_blocks = 1;               // resident blocks of the kernel over the whole device
  CudaLaunchShape shape;
};

/// A graph's kernels loaded on one device; unloading is left to process exit (plans are cached
/// for the life of the process).
struct CudaModule {
  c10::Device device = c10::Device(c10::DeviceType::CUDA, 0);
  std::vector<CudaKernelHandle> kernels;  // in the order of CudaSource::kernels
};

/// The compute capability of `device` as major * 10 + minor.
int cudaArch(c10::Device device);

/// Loads `binary` on `device` and resolves the kernels `shapes` describe. Throws on a driver
/// error (the caller falls back to node-by-node execution).
std::shared_ptr<const CudaModule> loadCudaModule(const CudaBinary& binary,
                                                 const std::vector<CudaLaunchShape>& shapes,
                                                 c10::Device device);

/// Launches kernel `index` of `module`, the compiled `fused`, over the plan's values.
void runCudaKernel(const FusedKernel& fused, const CudaModule& module, size_t index,
                   const Graph& graph, PlanValues& values);

}  // namespace lazyfuse
