#pragma once

// How a kernel maps onto the GPU, decided from its IR alone: the width of its index math, the
// threads that share a point, and how many blocks split its reductions. See Note [CUDA kernel
// structure] and Note [CUDA split reductions] in kernels/cuda_schedule.cpp.

#include "lowering/kernel_ir.h"

#include <cstdint>
#include <vector>

namespace lazyfuse::detail {

/// Threads of a block of every rendered kernel.
constexpr int kCudaBlock = 256;

int64_t numel(const std::vector<int64_t>& sizes);
/// a + b and a * b, saturating at the largest int64.
int64_t saturatingAdd(int64_t a, int64_t b);
int64_t saturatingMul(int64_t a, int64_t b);

/// True when 32-bit index arithmetic cannot overflow in `k`.
bool fitsIndex32(const Kernel& k);
/// Threads per point of a kernel with reductions: 1, 8, 32 or kCudaBlock.
int groupSize(const Kernel& k);
/// For each instruction of `k`, whether it uses a reduction's result (directly or not).
std::vector<bool> dependsOnReduction(const Kernel& k);
/// Blocks per point (per block of points when `group` is 1) of a split reduction, or 1.
int splitCount(const Kernel& k, int group);

}  // namespace lazyfuse::detail
