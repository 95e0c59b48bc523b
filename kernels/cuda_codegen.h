#pragma once

// The GPU target: kernel IR rendered as CUDA C++ with no includes, compiled by NVRTC.
// See Note [Kernel IR] in lowering/kernel_ir.h and Note [CUDA kernel structure].

#include "lowering/execution_plan.h"
#include "lowering/kernel_ir.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lazyfuse {

/// Bumped whenever the rendered code changes for the same kernel IR; part of the cubin cache
/// key. See Note [CUDA kernel cache key].
constexpr int kCudaCodegenVersion = 3;

/// The largest parameter table of a kernel batch: CUDA 12.1 drivers take 32764 bytes of kernel
/// parameters, older ones 4096 (kCudaBatchTableBytesBefore12_1).
constexpr size_t kCudaBatchTableBytes = 32000;
constexpr size_t kCudaBatchTableBytesBefore12_1 = 4000;

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
  /// A split reduction (Note [CUDA split reductions]) when > 1: the kernel takes two more
  /// pointers, a workspace of `workspace` bytes and `split_blocks` zeroed 32-bit counters, and
  /// runs split_blocks * split blocks exactly.
  int split = 1;
  int64_t split_blocks = 0;
  int64_t workspace = 0;
  /// The constants a shape-generic function takes as `lf_i64` arguments after all the others,
  /// for the function `name` and for `vector_name` (Note [Shape-generic kernels]).
  std::vector<int64_t> arguments, vector_arguments;
};

/// How to launch the kernel of a kernel batch (Note [CUDA kernel batches]). Its one parameter is
/// a table of 64-bit words passed by value: [segments, blocks, n[capacity],
/// first[capacity], then one array of `capacity` per buffer (addresses) and per parameter
/// (lf_i64, or the bits of a double)], where segment s is a member of the batch with n[s] points
/// whose chunks are the blocks first[s] ..; a launch runs `blocks` blocks of `block` threads.
struct CudaBatchShape {
  std::string name;
  std::string vector_name;  // the 4-wide variant: every buffer in vector_buffers 4-aligned
  std::vector<int32_t> vector_buffers;
  int capacity = 1;   // segments one launch takes
  int64_t chunk = 0;  // points per block
  int block = 256;
};

/// Words of the table of a batch kernel (see CudaBatchShape) and the index of one of its words.
size_t cudaBatchTableWords(const CudaBatchShape& shape, size_t buffers, size_t params);
size_t cudaBatchTableWord(const CudaBatchShape& shape, size_t field, size_t segment);

struct CudaSource {
  std::string source;
  std::vector<CudaLaunchShape> kernels;  // in the order of the kernels rendered
  std::vector<CudaBatchShape> batches;   // in the order of the batches rendered
};

/// CUDA C++ defining one `extern "C" __global__` function per kernel (and its vector variant)
/// and one per kernel batch (its members, kernels of one batchKey); a null kernel renders
/// nothing (the member of a batch) and gets an empty shape. The same input always renders
/// byte-identical text.
/// A batch's table takes at most `table_bytes` (see Note [CUDA kernel batches]).
CudaSource renderCuda(const std::vector<const Kernel*>& kernels,
                      const std::vector<std::vector<const Kernel*>>& batches = {},
                      size_t table_bytes = kCudaBatchTableBytes);

/// What renderCuda takes for a plan: its kernels, null for the members of a batch, and its
/// batches.
struct CudaPlanKernels {
  std::vector<const Kernel*> kernels;
  std::vector<std::vector<const Kernel*>> batches;
};
CudaPlanKernels cudaPlanKernels(const ExecutionPlan& plan);

}  // namespace lazyfuse
