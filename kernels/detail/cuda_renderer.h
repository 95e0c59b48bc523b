#pragma once

// The CUDA renderer of one kernel of the kernel IR; renderCuda (kernels/cuda_codegen.h) is its
// entry point. Its pointwise, batch and instruction rendering live in kernels/cuda_codegen.cpp,
// its reductions in kernels/cuda_reduction_codegen.cpp.

#include "kernels/cuda_codegen.h"
#include "lowering/kernel_ir.h"

#include <set>
#include <string>

namespace lazyfuse::detail {

class CudaRenderer {
 public:
  explicit CudaRenderer(const Kernel& kernel) : k_(kernel) {}

  CudaLaunchShape render(std::string& out);

  /// The kernel of a batch whose members are this kernel with other sizes and bindings; `this`
  /// is the template (Note [CUDA kernel batches]).
  CudaBatchShape renderBatch(std::string& out, const std::string& name, int capacity);

 private:
  std::string signature(const std::string& name, const std::string& extra = "") const;

  static std::string batchSignature(const std::string& name, const std::string& batch);

  /// Finds this block's segment and chunk [begin, end), and binds the segment's buffers and
  /// parameters to the names the body uses.
  std::string batchPrologue() const;

  /// A loop of the block's threads over the points [from, to).
  std::string pointLoopIn(const std::string& from, const std::string& to) const;

  std::string pointLoop(const std::string& var, int64_t count, int per_block) const;

  std::string variables(const std::string& indent, const std::string& flat) const;

  std::string pointwiseBody();

  /// The body of a pointwise kernel at point `p`.
  std::string pointLines() const;

  /// Buffers every access of which is at the flat point index itself.
  std::set<int32_t> contiguousBuffers() const;

  std::string vectorBody(const std::set<int32_t>& wide);

  /// The body of the 4-wide variant at points p0 .. p0 + 3.
  std::string vectorLines(const std::set<int32_t>& wide);

  /// The loop over points of a group smaller than a warp: the loop runs over warp-wide steps,
  /// so every lane of a warp takes the same iterations (its shuffles need all 32 lanes); a
  /// group past the last point recomputes the last one and does not store.
  std::string subWarpLoop() const;

  std::string groupBody();

  /// A kernel whose blocks each fold one slice of the reductions; see Note [CUDA split
  /// reductions].
  std::string splitBody();

  /// The workspace address of partial result `r` of slice `slice` of point p: 16 bytes, the
  /// value, then the index of an arg reduction.
  std::string partialAddress(const std::string& slice, int r) const;

  /// Redefines a<at> (and x<at>) as the fold of every slice's partial, in slice order.
  std::string foldPartials(int32_t at, int r) const;

  std::string sharedMemory() const;

  static bool isArg(const KReduction& r);

  c10::ScalarType accumulatorType(const KReduction& r) const;

  /// The fold of reduction instruction `at` over this lane's elements: all of them, or with
  /// `split`, the elements [q<at>lo, q<at>hi) (Note [CUDA split reductions]).
  std::string reductionLines(int32_t at, bool split = false);

  static const char* opName(ReduceKind kind);

  static std::string initValue(ReduceKind kind, c10::ScalarType dtype);

  /// One step of a lane's in-order fold; see Note [CUDA prelude].
  static std::string foldLine(ReduceKind kind, const std::string& acc, const std::string& idx,
                              const std::string& x);

  // --- instructions, loads and stores ---

  static std::string t(int32_t i);

  std::string instrLine(size_t i, const std::string&) const;

  std::string instrExpr(const KInstr& instr, int32_t i) const;

  bool isUniform(int32_t i) const;

  /// `value` (of type `from`) converted to `to`. A floating value becomes uint8 through int64,
  /// as c10's casts do (-1.0 -> 255); a direct conversion would saturate on the GPU.
  static std::string castText(c10::ScalarType to, c10::ScalarType from, const std::string& value);

  /// The element of `buffer` at `index`: a lane of its 4-wide pack in a vector body.
  std::string element(int32_t buffer, const IxPtr& index) const;

  std::string loadValue(const KInstr& instr) const;

  std::string storeValue(const KStore& store) const;

  const Kernel& k_;
  int group_ = 1;
  int split_ = 1;
  std::string ix_ = "lf_i64";
  int lane_ = 0;
  const std::set<int32_t>* wide_ = nullptr;
};

}  // namespace lazyfuse::detail
