#pragma once

// Note [Kernel IR]
// A Kernel is one fused loop nest, the unit every target renders (C++ for the CPU, CUDA C++ for
// a GPU). It iterates over `domain`, an N-d index space whose variables are v0..v{N-1}; each
// point runs the outer-scope instructions in order and then the stores. A kReduce instruction
// is a loop over its reduction's own index space (variables r0..r{M-1}) inside the point; the
// instructions of that reduction's scope run once per reduced element and are emitted inside
// that loop, all before the kReduce that closes it.
//
// Instructions are SSA: an instruction refers to earlier ones by their index in `instrs`.
// Types: an instruction's `dtype` is the type it computes in and never Half or BFloat16 (a load
// from such a buffer yields Float; a store of Float into one rounds to nearest even). The
// arguments of a unary or binary function have the instruction's dtype, except comparisons and
// the is* predicates, whose arguments share one dtype and whose result is Bool. Every integer
// result wraps to its dtype, as eager integer arithmetic does.
//
// Index expressions are integers over the variables, never negative: lowerings clamp before
// they divide. A load or store offset is in elements of its buffer.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

enum class IxOp : uint8_t { kVar, kRVar, kConst, kAdd, kMul, kDiv, kMod, kMin, kMax };

struct Ix;
using IxPtr = std::shared_ptr<const Ix>;

/// An integer index expression. kVar/kRVar: `value` is the variable's number; kConst: `value`.
/// kDiv and kMod take non-negative operands (C division then equals floor division).
struct Ix {
  IxOp op = IxOp::kConst;
  int64_t value = 0;
  IxPtr a, b;
  uint64_t hash = 0;  // of op, value and operands: equal for ixSame expressions
};

/// Constructors that fold constants and drop neutral operands (x*1, x+0, x*0 -> 0, ...).
IxPtr ixConst(int64_t value);
IxPtr ixVar(int index);
IxPtr ixRVar(int index);
IxPtr ixAdd(IxPtr a, IxPtr b);
IxPtr ixMul(IxPtr a, IxPtr b);
IxPtr ixDiv(IxPtr a, IxPtr b);
IxPtr ixMod(IxPtr a, IxPtr b);
IxPtr ixMin(IxPtr a, IxPtr b);
IxPtr ixMax(IxPtr a, IxPtr b);
/// C syntax for the expression, `v0`, `r1`, `(v0 * 1024 + v1)`; canonical, so equal text means
/// an equal expression (used to merge equal loads).
std::string ixText(const IxPtr& ix);
/// Whether two expressions are the same: what equal ixText means, found without building text.
bool ixSame(const IxPtr& a, const IxPtr& b);
/// Whether two index lists are the same, element by element.
bool ixSame(const std::vector<IxPtr>& a, const std::vector<IxPtr>& b);
/// A hash of an index list, equal for ixSame lists.
uint64_t ixHash(const std::vector<IxPtr>& index);
/// True when `ix` uses a reduction variable.
bool ixUsesRVar(const IxPtr& ix);
/// Marks in `vars` (`rvars`) the variables v<d> (r<d>) that `ix` uses; each must be in range.
void ixCollectVars(const IxPtr& ix, std::vector<bool>& vars, std::vector<bool>& rvars);
/// The row-major flat index of the point (v0, v1, ...) of `domain`.
IxPtr ixFlatIndex(const std::vector<int64_t>& domain);
/// sum(index[d] * strides[d]).
IxPtr ixOffset(const std::vector<IxPtr>& index, const std::vector<int64_t>& strides);
/// Adds `scale` times `ix` to `coeffs` (per domain variable) and `constant`; false when `ix` is
/// not affine in the domain variables (a division, remainder, min, max or reduction variable).
bool ixAddAffine(const IxPtr& ix, int64_t scale, std::vector<int64_t>& coeffs, int64_t& constant);
/// Whether `ix` equals sum(coeffs[d] * v<d>) + constant at every point of a domain of `sizes`,
/// division and modulo included (Note [Affine over a domain], lowering/ix_affine.cpp); fills
/// coeffs (one per dimension; 0 for a dimension of size 1) and constant.
bool ixAffineOver(const IxPtr& ix, const std::vector<int64_t>& sizes, std::vector<int64_t>& coeffs,
                  int64_t& constant);

enum class KOp : uint8_t {
  kLoad,    // buffers[buffer] at offset `index`
  kConst,   // `fvalue` for floating dtypes, `ivalue` for integer and Bool
  kParam,   // the kernel parameter `ivalue` (see KParam), converted to dtype
  kIndex,   // the integer value of `index`, as Long
  kUnary,   // fn(args[0]); see the table of Note [Kernel functions]
  kBinary,  // fn(args[0], args[1])
  kWhere,   // args[0] (Bool) ? args[1] : args[2]
  kCast,    // args[0] converted to dtype (to Bool: != 0)
  kReduce,  // the result of reductions[ivalue] at this point
};

// Note [Kernel functions]
// The functions a kUnary or kBinary instruction may call are the rows of one table,
// kernelFunctions() in lowering/kernel_functions.cpp (Note [Kernel function table]). A row holds
// the name and arity (checkKernel rejects any other), the argument types and whether the result is
// Bool (KernelBuilder reads both), the text that defines lf_<name> in the CPU and in the CUDA
// prelude (both preludes are assembled from the rows), whether a CPU row group caches it
// (Note [CPU row groups]), and its reference: the ATen function whose eager CPU result it computes,
// NaN, infinities, signed zeros and subnormals included (where eager's loops disagree, see
// Note [Kernel function table]). Every test that covers the functions iterates the table:
// test_kernel_functions.cpp compares each with its reference on the CPU target,
// test_cuda_codegen.cpp compiles each with NVRTC, test_vectorized_loops.cpp requires each loop over
// Float to vectorize. So a new function is a new row, and a lowering where an ATen op should use
// it.
// round_to_half and round_to_bfloat16 round a Float to the nearest value of that type, NaN kept:
// what a store to and a load from such a buffer do. Integer division and remainder are not kernel
// functions: eager raises on a zero divisor, so those ops run as ATen calls.

struct KInstr {
  KOp op = KOp::kConst;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::string fn;             // kUnary, kBinary
  std::vector<int32_t> args;  // earlier instructions
  int32_t buffer = -1;        // kLoad
  IxPtr index;                // kLoad, kIndex
  double fvalue = 0;          // kConst
  int64_t ivalue = 0;         // kConst, kParam (slot), kReduce (reduction)
  int32_t scope = -1;         // -1: the point; k: inside reductions[k]'s loop
};

enum class ReduceKind : uint8_t { kSum, kProd, kMax, kMin, kArgMax, kArgMin };

/// A loop over `sizes` (variables r0..) folding `body` (an instruction of this scope). kMax and
/// kMin propagate NaN; kArgMax/kArgMin yield the flat reduced index (Long) of the first maximum
/// (or first NaN), as eager does. `dtype` is the accumulator's and the result's type.
struct KReduction {
  ReduceKind kind = ReduceKind::kSum;
  std::vector<int64_t> sizes;
  int32_t body = -1;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

struct KStore {
  int32_t value = -1;  // an outer-scope instruction
  int32_t buffer = -1;
  IxPtr index;
};

struct KBuffer {
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool output = false;  // written by this kernel (never also read by it, but see may_alias)
  /// May share memory with another buffer of this kernel, element for element: an output that
  /// may be written into an input's memory, or that input. See Note [Donated buffers].
  bool may_alias = false;
  /// For an output that may alias: the input buffer whose memory it may take (-1: none, or
  /// device data the kernel does not read). The CPU renderer keeps the input's loads in the
  /// output's loop (Note [CPU loop parts]).
  int32_t donor = -1;
};

/// A runtime scalar. Parameter k (its position in Kernel::params) is iparams[k] when !floating,
/// else fparams[k]; both arrays have one entry per parameter.
struct KParam {
  bool floating = false;
};

struct Kernel {
  std::string name;             // a C identifier, unique within its plan
  std::vector<int64_t> domain;  // may be empty: a single point
  std::vector<KBuffer> buffers;
  std::vector<KParam> params;
  std::vector<KReduction> reductions;
  std::vector<KInstr> instrs;
  std::vector<KStore> stores;
};

int64_t domainNumel(const Kernel& kernel);
/// Arguments of kernel function `fn` (Note [Kernel functions]), or 0 when there is no such one.
int kernelFunctionArity(const std::string& fn);
/// The kernel function that rounds a Float to the nearest value a `dtype` buffer holds
/// ("round_to_half", "round_to_bfloat16"), or nullptr when `dtype` is neither Half nor BFloat16.
const char* roundingFunction(c10::ScalarType dtype);
/// Asserts that `kernel` is well formed: SSA order, scopes, buffers, arities, a C name.
void checkKernel(const Kernel& kernel);
/// Elements one point of the kernel visits: itself plus every element its reductions fold.
int64_t workPerPoint(const Kernel& kernel);
/// What one point costs, in cheap instructions: calls of expensive kernel functions weigh more,
/// instructions inside a reduction count once per element they fold.
int64_t costPerPoint(const Kernel& kernel);
/// Points per thread when the kernel is split across threads (Note [Thread grain]).
int64_t threadGrain(const Kernel& kernel);

}  // namespace lazyfuse
