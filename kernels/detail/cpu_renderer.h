#pragma once

// The C++ renderer of one kernel of the kernel IR; renderCpp and renderCppFunctions
// (kernels/cpu_codegen.h) are its entry points. Its row and point loops, row groups,
// instructions and stores live in kernels/cpu_codegen.cpp, its reductions and the segment loop
// in kernels/cpu_reduction_codegen.cpp. See Note [CPU loop structure] in kernels/cpu_codegen.cpp.

#include "kernels/cpu_codegen.h"
#include "kernels/detail/cpu_loop_parts.h"
#include "lowering/kernel_ir.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lazyfuse::detail {

/// The rows and columns of a tile of Note [Tiled loops] (kernels/cpu_codegen.cpp).
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileCols = 64;

class CpuRenderer {
 public:
  explicit CpuRenderer(const Kernel& kernel) : k_(kernel) {}

  std::string render();

  /// The function of a row group: `stats` then `epilogue`, row by row, in one loop over the rows
  /// [begin, end). See Note [CPU row groups].
  static std::string renderRowGroup(const CpuFunction& function);

 private:
  void declareBuffers();

  // --- the loops, see Note [CPU loop structure] ---

  void renderRowLoop();

  /// One part of the row loop's inner loop (Note [CPU loop parts]): the instructions marked in
  /// `instrs` and the stores in part_stores_, over [lo, hi), in blocks where Note [Half blocks]
  /// or Note [Streaming stores] asks for them.
  void partLoop(const std::vector<bool>& instrs, const std::string& v);

  /// The row loop's `omp simd` loop `for (lf_i64 <bounds>)` over the instructions marked
  /// `inner`, then the stores, at `indent`.
  void innerLoop(const std::vector<bool>& inner, const std::string& indent,
                 const std::string& bounds);

  /// Marks the contiguous Half loads and stores of the row loop's inner loop, whose conversion
  /// runs a block at a time (Note [Half blocks]), and the stores that stream (Note [Streaming
  /// stores]); sets block_var_ when there is one of either.
  void chooseBlocks(const std::vector<bool>& inner);
  /// The loads of the inner loop that walk their buffer with step 1 along the second-innermost
  /// variable instead of the innermost (Note [Tiled loops]).
  std::vector<bool> transposedLoads(const std::vector<bool>& inner) const;
  /// The row loop's tiled path, emitted before its plain one when the kernel has transposed
  /// loads (Note [Tiled loops]); `vars` marks the variables the kernel uses.
  void tileLoop(const std::vector<bool>& inner, const std::vector<bool>& vars,
                const std::vector<CpuLoopPart>& parts);

  /// Which instructions depend on the innermost variable and must stay in the inner loop.
  std::vector<bool> innerInstrs() const;

  void renderPointLoop();

  /// The body of the point loop: point p's variables, instructions (reductions are loops) and
  /// stores.
  void pointBody();

  /// A row group's epilogue for row p, a block of its own (its names shadow the statistics
  /// kernel's): the row loop of one whole row, where each cached instruction is read from the
  /// array the statistics kernel filled. See Note [CPU row groups].
  void rowBlock();

  /// Whether the kernel folds columns: a reduction loop reads at the innermost point variable,
  /// so neighbouring points read neighbouring elements, and folding them side by side (a
  /// segment) vectorizes and reads each cache line once. argmax/argmin keep the point loop.
  bool readsAcrossPoints() const;

  /// 256 points (a 1 KiB run of floats per reduced row, which the prefetcher streams: a column
  /// sum of [8192, 1024] took 3.1-3.5 ms on one thread with 256, 3.8-4.8 ms with 64), fewer when
  /// the arrays would pass 256 KiB of stack.
  int64_t segmentSize() const;

  void renderSegmentLoop();

  /// An `omp simd` loop over the segment computing outer-scope instructions `instrs` into their
  /// arrays, then `tail`.
  void segmentLines(const std::vector<size_t>& instrs, const std::string& tail);

  /// The fold loop nest of the reductions `group` (over equal sizes), one accumulator each.
  void segmentReductionLines(const std::vector<int32_t>& group);

  /// Whether reduction `at` may fold in the loop of `group`: the same sizes, and a body that
  /// reads none of the instructions in `after` (those computed after the group's loop).
  bool joinsGroup(const std::vector<int32_t>& group, int32_t at,
                  const std::vector<size_t>& after) const;

  void reductionLines(int32_t at);

  // --- instructions and stores ---

  std::string instrLine(size_t i) const;

  /// Instruction `i`'s value; in a segment loop an outer-scope one is its array's element.
  std::string t(int32_t i) const;

  std::string instrExpr(const KInstr& instr, int32_t i) const;

  std::string loadExpr(const KInstr& instr) const;

  void storeLines(const std::string& indent);

  std::string storeText(const std::string& indent) const;
  int32_t storedValue(const KStore& store) const;

  std::string bufferName(int32_t b) const;

  const Kernel& k_;
  std::string out_;
  std::vector<bool> varying_;  // per instruction: whether it changes inside its innermost loop
  std::string segment_var_;    // in a segment loop: the innermost point variable
  // While a row loop in blocks is rendered (Note [Half blocks]): its innermost variable, and
  // which loads (per instruction) and stores read or fill the block's arrays.
  std::string block_var_;
  std::vector<bool> half_loads_;
  std::vector<bool> half_stores_;
  std::vector<bool> streams_;      // per store: written with non-temporal stores
  std::vector<bool> tiled_;        // per instruction: a load staged in a tile's array
  std::vector<bool> part_stores_;  // the stores of the part being rendered; empty: all
  // In a row group's function (Note [CPU row groups]): where this kernel's buffers and
  // parameters start in the function's arrays, and the values its two kernels share.
  int32_t buffer_base_ = 0;
  int32_t param_base_ = 0;
  std::vector<CpuRowCache> caches_;
};

}  // namespace lazyfuse::detail
