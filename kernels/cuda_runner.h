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

struct CudaBatchHandle {
  void* function = nullptr;         // CuFunction
  void* vector_function = nullptr;  // CuFunction of the 4-wide variant, or null
  CudaBatchShape shape;
};

/// A graph's kernels loaded on one device; unloading is left to process exit (plans are cached
/// for the life of the process).
struct CudaModule {
  c10::Device device = c10::Device(c10::DeviceType::CUDA, 0);
  void* module = nullptr;                 // CuModule
  std::vector<CudaKernelHandle> kernels;  // in the order of CudaSource::kernels
  std::vector<CudaBatchHandle> batches;   // in the order of CudaSource::batches
};

/// The compute capability of `device` as major * 10 + minor.
int cudaArch(c10::Device device);

/// Loads `binary` on `device` and resolves the kernels and batches `source` describes (an empty
/// kernel shape gets a null handle). Throws on a driver error (the caller falls back to
/// node-by-node execution).
std::shared_ptr<const CudaModule> loadCudaModule(const CudaBinary& binary, const CudaSource& source,
                                                 c10::Device device);

/// Launches kernel `index` of `module`, the compiled `fused`, over the plan's values.
void runCudaKernel(const FusedKernel& fused, const CudaModule& module, size_t index,
                   const Graph& graph, PlanValues& values);

/// Launches kernel batch `batch` of `plan` (the compiled module.batches[batch]) over the plan's
/// values; returns the number of launches.
size_t runCudaBatch(const ExecutionPlan& plan, size_t batch, const CudaModule& module,
                    const Graph& graph, PlanValues& values);

/// One launch of a batch kernel: its table (see CudaBatchShape), the blocks it runs, and
/// whether the 4-wide variant may run it.
struct CudaBatchLaunch {
  std::vector<int64_t> table;
  int64_t blocks = 0;
  bool vector = false;
};

/// Allocates the outputs of every member of `batch` on `device` and fills the tables of the
/// launches that run them (capacity members each).
std::vector<CudaBatchLaunch> prepareCudaBatchLaunches(const ExecutionPlan& plan,
                                                      const KernelBatch& batch,
                                                      const CudaBatchShape& shape,
                                                      const Graph& graph, PlanValues& values,
                                                      c10::Device device);

/// The arguments of one launch of a rendered kernel (see CudaLaunchShape for their order).
struct CudaLaunchArgs {
  std::vector<void*> pointers;  // buffer addresses
  std::vector<int64_t> ints;    // parameter values, by parameter
  std::vector<double> floats;
  std::vector<void*> args;         // the address of each argument, as cuLaunchKernel takes them
  bool vector = false;             // launch the 4-wide variant
  int64_t points = 0;              // points of the variant launched (points / 4 for the 4-wide one)
  at::Tensor workspace, counters;  // a split reduction's (see CudaLaunchShape::split)
  void* split_pointers[2] = {nullptr, nullptr};
  std::vector<int64_t> constants;  // a shape-generic function's (CudaLaunchShape::arguments)
};

/// Allocates the outputs of `fused` on `device` (torch's allocator) and gathers the arguments
/// of its launch; the 4-wide variant is chosen when `has_vector` and its buffers are aligned.
void prepareCudaLaunch(const FusedKernel& fused, const CudaLaunchShape& shape, bool has_vector,
                       const Graph& graph, PlanValues& values, c10::Device device,
                       CudaLaunchArgs& launch);
/// Blocks for `points` points of `shape`: enough to cover them, at most `max_blocks` (the
/// kernels stride over the rest). See Note [CUDA kernel structure].
unsigned cudaGridFor(int64_t points, const CudaLaunchShape& shape, int max_blocks);
/// Blocks of a launch of `shape` with `launch` (a split reduction runs exactly its blocks).
unsigned cudaGridFor(const CudaLaunchArgs& launch, const CudaLaunchShape& shape, int max_blocks);

}  // namespace lazyfuse
