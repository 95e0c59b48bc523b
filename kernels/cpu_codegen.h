#pragma once

// The CPU target: kernel IR rendered as plain C++ (no includes), compiled by the system compiler.
// See Note [Kernel IR] in lowering/kernel_ir.h.

#include "lowering/kernel_ir.h"

#include <string>
#include <vector>

namespace lazyfuse {

/// Bumped whenever the rendered code changes for the same kernel IR (it is part of the disk
/// cache key through the source text and the compile flags). See Note [CPU kernel cache key].
constexpr int kCpuCodegenVersion = 2;

/// C++ source defining, for each kernel, a function with C linkage
///   void <name>(int64_t begin, int64_t end, void* const* buffers, const int64_t* iparams,
///               const double* fparams);
/// that runs the points [begin, end) of the kernel's domain, flattened in row-major order.
/// The same kernels always render byte-identical text.
std::string renderCpp(const std::vector<const Kernel*>& kernels);

/// An epilogue instruction a row group reads from an array of the row instead of computing it:
/// the statistics kernel's instruction `stats_instr`, in the loop of a reduction over the
/// epilogue's last dimension, computes the same value at r0 = c as `epilogue_instr` does at
/// v<last> = c. See Note [CPU row groups].
struct CpuRowCache {
  int32_t stats_instr = -1;
  int32_t epilogue_instr = -1;
};

/// One function of the rendered source: a kernel alone (`name` is its name), or a row group,
/// `kernel` (reductions over rows, domain [..., 1]) and `epilogue` (no reductions, domain
/// [..., C]), whose function takes the two kernels' buffers and then parameters one after the
/// other and runs the rows [begin, end): for each, `kernel`'s point, then `epilogue`'s C points.
struct CpuFunction {
  std::string name;
  const Kernel* kernel = nullptr;
  const Kernel* epilogue = nullptr;
  std::vector<CpuRowCache> caches;
};

/// The source of `functions`, with the same signature as above; the same functions always render
/// byte-identical text.
std::string renderCppFunctions(const std::vector<CpuFunction>& functions);
/// What renderCppFunctions writes before the functions: a version line and the prelude.
std::string renderCppHeader();
/// The text of one function, as renderCppFunctions writes it after the header.
std::string renderCppFunction(const CpuFunction& function);

}  // namespace lazyfuse
