#pragma once

// The kernel functions of Note [Kernel functions], one row each: what lowering may call, what
// checkKernel accepts, what each target's prelude defines, and what a test compares them with.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace lazyfuse {

/// The compute types (Note [Kernel IR]) a kernel function's arguments may have.
enum class FnArgs : uint8_t {
  kFloating,  // Float and Double
  kFloat,     // Float only
  kNumeric,   // Float, Double and the integer types, not Bool
  kIntegral,  // the integer types and Bool
  kBool,      // Bool only (KernelBuilder casts the arguments of the logical_ functions)
  kAll,       // every compute type
};

/// The type of a kernel function's result.
enum class FnResult : uint8_t {
  kArgs,  // the arguments' type
  kBool,
};

struct KernelFunction {
  const char* name;  // the IR's KInstr::fn; every target calls it lf_<name>
  int arity;         // 1 (KOp::kUnary) or 2 (KOp::kBinary)
  FnArgs args;
  FnResult result;
  /// Worth computing once per row and caching in a CPU row group (Note [CPU row groups]).
  bool expensive;
  /// Why the CPU loop of the function over Float buffers stays scalar (nullptr: it vectorizes);
  /// test_vectorized_loops.cpp holds the function to it. See Note [Vectorized CPU loops].
  const char* cpu_scalar;
  /// The text of the CPU prelude defining lf_<name> (Note [CPU prelude]) with the C math
  /// functions it declares; it may use the helpers of the prelude's head and the lf_ functions
  /// of the rows above it.
  const char* cpu;
  /// The same for the CUDA prelude (Note [CUDA prelude]); it also compiles as host C++ under the
  /// emulation shim of Note [CUDA emulation].
  const char* cuda;
  /// What eager PyTorch computes, on CPU tensors of the arguments' type (`b` is ignored by a
  /// unary function): the CPU target's lf_<name> gives the same values
  /// (test_kernel_functions.cpp compares them).
  at::Tensor (*reference)(const at::Tensor& a, const at::Tensor& b);
};

/// Every kernel function, in the order the preludes define them.
const std::vector<KernelFunction>& kernelFunctions();
/// The row of kernel function `fn`, or nullptr when there is no such one.
const KernelFunction* findKernelFunction(const std::string& fn);
/// Whether kernel function arguments of compute type `dtype` are in `args`.
bool fnAcceptsType(FnArgs args, c10::ScalarType dtype);

}  // namespace lazyfuse
