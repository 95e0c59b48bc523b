#pragma once

// How a row loop's inner loop is split into loops that each touch few buffers; see Note [CPU
// loop parts] in kernels/cpu_loop_parts.cpp.

#include "lowering/kernel_ir.h"

#include <cstddef>
#include <vector>

namespace lazyfuse::detail {

/// The most buffers one part's loop reads and writes, unless one independent computation alone
/// needs more.
constexpr size_t kPartBuffers = 16;

struct CpuLoopPart {
  std::vector<bool> instrs;  // per instruction: computed in this part's loop
  std::vector<bool> stores;  // per store: written by this part's loop
};

/// The parts of the inner loop over the instructions marked `inner`, in the order they run:
/// one part when the whole loop touches at most kPartBuffers buffers.
std::vector<CpuLoopPart> cpuLoopParts(const Kernel& k, const std::vector<bool>& inner);

}  // namespace lazyfuse::detail
