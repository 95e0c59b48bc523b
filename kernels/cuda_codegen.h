#pragma once

// The GPU target: kernel IR rendered as CUDA C++ with no includes, compiled by NVRTC.
// See Note [Kernel IR] in lowering/kernel_ir.h and Note [CUDA kernel structure].

#include "lowering/kernel_ir.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lazyfuse {

/// Bumped whenever the rendered code changes for the same kernel IR; part of the cubin cache
/// key. See Note [CUDA kernel cache key].
constexpr int kCudaCodegenVersion = 2;

/// How to launch one rendered kernel. Its parameters are, in order: one pointer per kernel
/// buffer (its storage type), then one value per kernel parameter (`long long`, or `double`
/// when the parameter is floating). Blocks have `block` threads; `group` threads share a point,
/// so a block runs block / group points and any grid is correct (the kernels stride over the
/// points); `points` is the number of points, so ceil(points * group / block) blocks cover them.
struct CudaLaunchShape {
  std::string name;
  int64_t points = 0;
  int group = 1;
  int block = 256;
  /// A variant that runs 4 consecutive points per thread with one 4-element load or store of
  /// each of `vector_buffers` (16 bytes for float); usable when every one of those buffers'
  /// addresses is a multiple of 4 elements. Empty when the kernel has none.
  std::string vector_name;
  std::vector<int32_t> vector_buffers;
};

struct CudaSource {
  std::string source;
  std::vector<CudaLaunchShape> kernels;  // in the order of the kernels rendered
};

/// CUDA C++ defining one `extern "C" __global__` function per kernel (and its vector variant).
/// The same kernels always render byte-identical text.
CudaSource renderCuda(const std::vector<const Kernel*>& kernels);

}  // namespace lazyfuse
