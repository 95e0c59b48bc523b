#pragma once

// Kernel families on the CUDA targets (Note [Shape-generic kernels] in kernels/kernel_constants.h):
// each kernel function of a rendered plan is replaced by the function of its family that runs
// it, so that a plan of new sizes renders the same source as one compiled before, which the
// compile caches then serve. Kernel batches are left as rendered.

#include "kernels/cuda_codegen.h"
#include "kernels/kernel_families.h"
#include "kernels/target.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lazyfuse {

struct CudaFamilySource {
  /// The source to compile and the shapes to launch with: each kernel's function names, and
  /// the constants the generic ones take as arguments.
  CudaSource source;
  std::vector<FamilyChoice> choices;                 // one per kernel function
  int64_t reused = 0, dynamic = 0, generalized = 0;  // kernels
  std::vector<std::string> recompiles;
};

/// The CUDA targets' families (the real and the emulated target take the same decisions).
KernelFamilies& cudaKernelFamilies();
/// `rendered` (renderCuda's) with its kernel functions chosen by `families` under `mode`.
CudaFamilySource cudaFamilySource(const CudaSource& rendered, config::DynamicShapes mode,
                                  KernelFamilies& families = cudaKernelFamilies());
/// The functions of `source` compiled: later plans may choose them.
void cudaFamiliesCompiled(const CudaFamilySource& source,
                          KernelFamilies& families = cudaKernelFamilies());
/// cudaFamilySource of `rendered` (LAZYFUSE_DYNAMIC's policy) given to `compile`, which says
/// whether it compiled. When it did not and it held new generic functions, their families are
/// specialized from now on and the plan is chosen and compiled once more. What compiled is
/// reported to `families`. Returns the source last given to `compile`.
CudaFamilySource compileWithFamilies(const CudaSource& rendered,
                                     const std::function<bool(const CudaFamilySource&)>& compile,
                                     KernelFamilies& families = cudaKernelFamilies());
/// Counts `plan`'s kernels in `outcome`: those `source` runs with functions compiled before as
/// reused (dynamic, generalized as it says), the others as compiled, or loaded from a compile
/// cache when `cached`.
void countFamilies(const CudaFamilySource& source, const ExecutionPlan& plan, bool cached,
                   CompileOutcome& outcome);

}  // namespace lazyfuse
