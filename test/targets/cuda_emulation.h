#pragma once

// Runs rendered CUDA kernels on the CPU: the same source, compiled as host C++ under a shim that
// runs every CUDA thread of a block on a thread of its own from a pool (Note [CUDA emulation]).
// Slow, and only for tests: it checks what the CUDA renderer computes (reductions across lanes, the
// 4-wide variant, index math) against eager PyTorch on a machine without a GPU.

#include "kernels/cpu_compiler.h"
#include "kernels/cuda_codegen.h"
#include "kernels/fused_runner.h"

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

using CudaEmulatedRunner = void (*)(unsigned threads, void (*entry)(void*, unsigned), void* ctx);
using CudaEmulatedFn = void (*)(CudaEmulatedRunner runner, unsigned grid, void** args);

struct CudaEmulatedKernel {
  CudaEmulatedFn function = nullptr;
  CudaEmulatedFn vector_function = nullptr;  // null when the kernel has no 4-wide variant
  CudaLaunchShape shape;
};

struct CudaEmulatedBatch {
  CudaEmulatedFn function = nullptr;
  CudaEmulatedFn vector_function = nullptr;  // null when the batch has no 4-wide variant
  CudaBatchShape shape;
};

struct CudaEmulatedModule {
  std::shared_ptr<const CpuModule> module;  // keeps the shared object loaded
  std::vector<CudaEmulatedKernel> kernels;  // in the order of the kernels rendered
  std::vector<CudaEmulatedBatch> batches;   // in the order of the batches rendered
};

/// The emulated module of `rendered`, the CUDA source of `kernels` (renderCuda's, its functions
/// possibly chosen by their families), or null with `error` set; `disk_hit` says whether it came
/// from the disk cache.
std::shared_ptr<const CudaEmulatedModule> compileCudaEmulation(
    const std::vector<const Kernel*>& kernels, const CudaSource& rendered, std::string& error,
    bool& disk_hit);

/// Runs kernel `index` of `module` (the compiled `fused`) over the plan's values on the CPU.
void runEmulatedCudaKernel(const FusedKernel& fused, const CudaEmulatedModule& module, size_t index,
                           const Graph& graph, PlanValues& values);

/// Runs kernel batch `batch` of `plan` (the compiled module.batches[batch]) on the CPU; returns
/// the number of launches.
size_t runEmulatedCudaBatch(const ExecutionPlan& plan, size_t batch,
                            const CudaEmulatedModule& module, const Graph& graph,
                            PlanValues& values);

}  // namespace lazyfuse
