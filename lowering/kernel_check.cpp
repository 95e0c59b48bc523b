// Structural checks of a Kernel (Note [Kernel IR]) that every renderer runs before it writes
// code: a malformed kernel is our bug and must fail loudly, not render into wrong code.

#include "lazy_ir/check.h"
#include "lowering/kernel_functions.h"
#include "lowering/kernel_ir.h"

#include <cctype>

namespace lazyfuse {
namespace {

void checkBuffer(const Kernel& k, int32_t buffer, bool output) {
  LF_INTERNAL_ASSERT(buffer >= 0 && static_cast<size_t>(buffer) < k.buffers.size(), "buffer ",
                     buffer, " out of range");
  LF_INTERNAL_ASSERT(k.buffers[buffer].output == output, "buffer ", buffer,
                     output ? " stored but not an output" : " is an output and loaded");
}

void checkInstr(const Kernel& k, int32_t i) {
  const KInstr& instr = k.instrs[i];
  LF_INTERNAL_ASSERT(instr.scope >= -1 && instr.scope < static_cast<int32_t>(k.reductions.size()),
                     "instruction ", i, " in scope ", instr.scope);
  for (int32_t arg : instr.args) {
    LF_INTERNAL_ASSERT(arg >= 0 && arg < i, "instruction ", i, " uses ", arg);
    int32_t scope = k.instrs[arg].scope;
    LF_INTERNAL_ASSERT(scope == -1 || scope == instr.scope, "instruction ", i, " uses instruction ",
                       arg, " of another reduction's scope");
  }
  if (instr.op == KOp::kLoad) checkBuffer(k, instr.buffer, /*output=*/false);
  if (instr.op == KOp::kLoad || instr.op == KOp::kIndex) {
    LF_INTERNAL_ASSERT(instr.index, "instruction ", i, " has no index");
    LF_INTERNAL_ASSERT(instr.scope != -1 || !ixUsesRVar(instr.index), "instruction ", i,
                       " uses a reduction variable outside a reduction");
  }
  if (instr.op == KOp::kUnary || instr.op == KOp::kBinary) {
    size_t arity = instr.op == KOp::kUnary ? 1 : 2;
    LF_INTERNAL_ASSERT(
        kernelFunctionArity(instr.fn) == static_cast<int>(arity) && instr.args.size() == arity,
        "unknown kernel function ", instr.fn, " with ", instr.args.size(), " args");
  }
  if (instr.op == KOp::kParam) {
    LF_INTERNAL_ASSERT(instr.ivalue >= 0 && static_cast<size_t>(instr.ivalue) < k.params.size(),
                       "parameter ", instr.ivalue, " out of range");
  }
  if (instr.op == KOp::kReduce) {
    LF_INTERNAL_ASSERT(instr.scope == -1 && instr.ivalue >= 0 &&
                           static_cast<size_t>(instr.ivalue) < k.reductions.size() &&
                           k.instrs[k.reductions[instr.ivalue].body].scope == instr.ivalue &&
                           k.reductions[instr.ivalue].body < i,
                       "malformed reduction at instruction ", i);
  }
  size_t args = instr.op == KOp::kWhere ? 3 : instr.op == KOp::kCast ? 1 : instr.args.size();
  LF_INTERNAL_ASSERT(instr.args.size() == args, "instruction ", i, " has ", instr.args.size(),
                     " args");
}

}  // namespace

const char* roundingFunction(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Half) return "round_to_half";
  if (dtype == c10::ScalarType::BFloat16) return "round_to_bfloat16";
  return nullptr;
}

int kernelFunctionArity(const std::string& fn) {
  const KernelFunction* row = findKernelFunction(fn);
  return row ? row->arity : 0;
}

void ixCollectVars(const IxPtr& ix, std::vector<bool>& vars, std::vector<bool>& rvars) {
  if (!ix) return;
  if (ix->op == IxOp::kVar || ix->op == IxOp::kRVar) {
    std::vector<bool>& used = ix->op == IxOp::kVar ? vars : rvars;
    LF_INTERNAL_ASSERT(ix->value >= 0 && static_cast<size_t>(ix->value) < used.size(),
                       ix->op == IxOp::kVar ? "v" : "r", ix->value, " out of range");
    used[ix->value] = true;
    return;
  }
  ixCollectVars(ix->a, vars, rvars);
  ixCollectVars(ix->b, vars, rvars);
}

void checkKernel(const Kernel& k) {
  LF_INTERNAL_ASSERT(!k.name.empty() && !std::isdigit(static_cast<unsigned char>(k.name[0])),
                     "kernel name '", k.name, "' is not a C identifier");
  for (char c : k.name) {
    LF_INTERNAL_ASSERT(std::isalnum(static_cast<unsigned char>(c)) || c == '_', "kernel name '",
                       k.name, "' is not a C identifier");
  }
  for (size_t i = 0; i < k.instrs.size(); ++i) checkInstr(k, static_cast<int32_t>(i));
  for (const KReduction& reduction : k.reductions) {
    LF_INTERNAL_ASSERT(reduction.body >= 0 && static_cast<size_t>(reduction.body) < k.instrs.size(),
                       "reduction body ", reduction.body, " out of range");
  }
  for (const KStore& store : k.stores) {
    LF_INTERNAL_ASSERT(store.value >= 0 && static_cast<size_t>(store.value) < k.instrs.size() &&
                           k.instrs[store.value].scope == -1,
                       "store of ", store.value, " which is not an outer-scope instruction");
    checkBuffer(k, store.buffer, /*output=*/true);
    LF_INTERNAL_ASSERT(!ixUsesRVar(store.index), "store index uses a reduction variable");
  }
}

}  // namespace lazyfuse
