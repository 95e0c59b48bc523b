#pragma once

// The CPU target: kernel IR rendered as plain C++ (no includes), compiled by the system compiler.
// See Note [Kernel IR] in lowering/kernel_ir.h.

#include "lowering/kernel_ir.h"

#include <string>
#include <vector>

namespace lazyfuse {

/// Bumped whenever the rendered code changes for the same kernel IR (it is part of the disk
/// cache key through the source text and the compile flags). See Note [CPU kernel cache key].
constexpr int kCpuCodegenVersion = 1;

/// C++ source defining, for each kernel, a function with C linkage
///   void <name>(int64_t begin, int64_t end, void* const* buffers, const int64_t* iparams,
///               const double* fparams);
/// that runs the points [begin, end) of the kernel's domain, flattened in row-major order.
/// The same kernels always render byte-identical text.
std::string renderCpp(const std::vector<const Kernel*>& kernels);

}  // namespace lazyfuse
