#include "kernels/cpu_row_groups.h"

#include "lazy_ir/check.h"
#include "lowering/kernel_functions.h"

#include <algorithm>
#include <map>
#include <utility>

namespace lazyfuse {
namespace {

// Note [CPU row groups]
// A row reduction's plan is two kernels: the statistics kernel over [..., 1] (max and sum of
// exp for softmax, mean and variance for layer norm) and the epilogue over [..., C], which reads
// the same rows and the statistics again. Where the epilogue computes again an expensive value
// the statistics kernel computed inside a reduction over that same row (softmax's exp(x - max)),
// the CPU target runs the two as one function, a row group, row by row: for each row the
// statistics kernel's point, whose reduction loop also writes that value into an array of the
// row (one per cached value, on the stack), then the epilogue's row, which reads the array
// instead of computing the value again. Composite softmax [4096, 1024], one thread, kernels
// alone: 3.9 ms -> 3.4 ms; [4096, 8192]: 39 ms -> 30 ms. A pair with nothing to cache (layer
// norm: mean and variance, then (x - mean) * rsqrt(var + eps)) is a group too: the epilogue then
// reads each row while the statistics kernel has just left it in the cache, instead of reading
// the whole input from memory once more. With 2 threads, composite layer norm [4096, 1024] took
// 1.0-1.25 ms as two kernels and 0.64-0.75 ms as a group (0.92-1.13x the native ATen kernel ->
// 1.52-1.76x); [4096, 4096] 8.7-9.1 -> 7.4-9.0 ms; the W3 block's minimum 11.3-14.1 ->
// 11.1-11.8 ms. The kernel IR is unchanged (the CUDA target runs the two kernels as
// before); the group is the CPU target's schedule of two consecutive kernel steps, and
//  - the epilogue reads the statistics kernel's outputs only at its own row (the index of the
//    statistics kernel's store, which does not use the last variable), so rows split across
//    threads never read another thread's rows;
//  - an epilogue instruction is cached only when it equals, operand by operand, an
//    instruction in the loop of a reduction over exactly the epilogue's last dimension, with the
//    epilogue's last variable read as that loop's r0 (loads of the same binding at equal index
//    text, the same parameters and constants, the statistics kernel's stored values for loads of
//    its outputs); so the cached value is the very value the epilogue would have computed;
//  - the cache arrays of one function stay under kCacheBytes;
//  - a pair with nothing to cache has at least kMinRowsWithoutCache rows: a group splits only
//    its rows across threads, where the epilogue alone splits all its points ([2, 1000000]
//    would run on 2 threads).
constexpr int64_t kCacheBytes = 64 * 1024;
constexpr int64_t kMinRowsWithoutCache = 256;

bool sameBinding(const BufferBinding& a, const BufferBinding& b) {
  if (a.temp != b.temp || !(a.meta == b.meta)) return false;
  if (a.temp) return a.slot == b.slot;
  return a.value.position == b.value.position && a.value.index == b.value.index;
}

bool sameParam(const ParamBinding& a, const ParamBinding& b) {
  return a.position == b.position && a.index == b.index && a.floating == b.floating &&
         a.element == b.element;
}

/// `ix` with v<var> replaced by `by`.
IxPtr substitute(const IxPtr& ix, int var, const IxPtr& by) {
  if (!ix) return ix;
  switch (ix->op) {
    case IxOp::kVar: return ix->value == var ? by : ix;
    case IxOp::kRVar:
    case IxOp::kConst: return ix;
    case IxOp::kAdd: return ixAdd(substitute(ix->a, var, by), substitute(ix->b, var, by));
    case IxOp::kMul: return ixMul(substitute(ix->a, var, by), substitute(ix->b, var, by));
    case IxOp::kDiv: return ixDiv(substitute(ix->a, var, by), substitute(ix->b, var, by));
    case IxOp::kMod: return ixMod(substitute(ix->a, var, by), substitute(ix->b, var, by));
    case IxOp::kMin: return ixMin(substitute(ix->a, var, by), substitute(ix->b, var, by));
    case IxOp::kMax: return ixMax(substitute(ix->a, var, by), substitute(ix->b, var, by));
  }
  LF_INTERNAL_ASSERT(false, "unknown index op ", static_cast<int>(ix->op));
}

bool usesVar(const IxPtr& ix, size_t rank, size_t var) {
  std::vector<bool> vars(rank, false), rvars(64, false);
  ixCollectVars(ix, vars, rvars);
  return vars[var];
}

/// The statistics kernel's store into its buffer `buffer`, or null.
const KStore* storeInto(const Kernel& kernel, int32_t buffer) {
  for (const KStore& store : kernel.stores) {
    if (store.buffer == buffer) return &store;
  }
  return nullptr;
}

/// Which buffer of `stats` (an output) `binding` is, or -1.
int32_t statsOutput(const FusedKernel& stats, const BufferBinding& binding) {
  for (size_t b = 0; b < stats.buffers.size(); ++b) {
    if (stats.kernel.buffers[b].output && sameBinding(stats.buffers[b], binding)) {
      return static_cast<int32_t>(b);
    }
  }
  return -1;
}

bool expensive(const KInstr& instr) {
  if (instr.op != KOp::kUnary && instr.op != KOp::kBinary) return false;
  const KernelFunction* row = findKernelFunction(instr.fn);
  return row && row->expensive;
}

/// Whether epilogue instruction j computes, at row p and v<last> = c, what statistics
/// instruction i computes at row p and r0 = c. See Note [CPU row groups].
class RowMatcher {
 public:
  RowMatcher(const FusedKernel& stats, const FusedKernel& epilogue)
      : s_(stats), e_(epilogue), last_(static_cast<int>(epilogue.kernel.domain.size()) - 1) {}

  bool same(int32_t i, int32_t j) {
    auto key = std::make_pair(i, j);
    auto found = memo_.find(key);
    if (found != memo_.end()) return found->second;
    const bool result = compare(i, j);
    memo_[key] = result;
    return result;
  }

 private:
  bool compare(int32_t i, int32_t j) {
    const KInstr& a = s_.kernel.instrs[i];
    const KInstr& b = e_.kernel.instrs[j];
    if (b.op == KOp::kLoad && statsOutput(s_, e_.buffers[b.buffer]) >= 0) {
      // A load of what the statistics kernel stored for this row is the stored value itself,
      // when the buffer holds it exactly.
      const int32_t buffer = statsOutput(s_, e_.buffers[b.buffer]);
      const KStore* store = storeInto(s_.kernel, buffer);
      return store && store->value == i && s_.kernel.buffers[buffer].dtype == a.dtype &&
             b.dtype == a.dtype;
    }
    if (a.op != b.op || a.dtype != b.dtype || a.fn != b.fn || a.args.size() != b.args.size()) {
      return false;
    }
    switch (a.op) {
      case KOp::kLoad:
        if (!sameBinding(s_.buffers[a.buffer], e_.buffers[b.buffer])) return false;
        return sameIndex(a.index, b.index);
      case KOp::kIndex: return sameIndex(a.index, b.index);
      case KOp::kConst: return a.fvalue == b.fvalue && a.ivalue == b.ivalue;
      case KOp::kParam:
        return sameParam(s_.params[a.ivalue], e_.params[b.ivalue]) &&
               s_.kernel.params[a.ivalue].floating == e_.kernel.params[b.ivalue].floating;
      case KOp::kReduce: return false;
      case KOp::kUnary:
      case KOp::kBinary:
      case KOp::kWhere:
      case KOp::kCast: break;
    }
    for (size_t k = 0; k < a.args.size(); ++k) {
      if (!same(a.args[k], b.args[k])) return false;
    }
    return true;
  }

  /// The statistics kernel's last variable is 0 (its last dimension has size 1); the
  /// epilogue's last variable is the reduction's r0.
  bool sameIndex(const IxPtr& a, const IxPtr& b) {
    return ixText(substitute(a, last_, ixConst(0))) == ixText(substitute(b, last_, ixRVar(0)));
  }

  const FusedKernel& s_;
  const FusedKernel& e_;
  const int last_;
  std::map<std::pair<int32_t, int32_t>, bool> memo_;
};

/// Whether `epilogue` may run row by row after `stats` (see Note [CPU row groups]).
bool rowsMatch(const FusedKernel& stats, const FusedKernel& epilogue) {
  const Kernel& s = stats.kernel;
  const Kernel& e = epilogue.kernel;
  if (s.reductions.empty() || !e.reductions.empty() || s.domain.empty()) return false;
  if (s.domain.size() != e.domain.size() || s.domain.back() != 1 || e.domain.back() <= 1) {
    return false;
  }
  if (!std::equal(s.domain.begin(), s.domain.end() - 1, e.domain.begin())) return false;
  if (domainNumel(s) <= 0) return false;
  const size_t rank = e.domain.size();
  for (const KInstr& instr : e.instrs) {
    if (instr.op != KOp::kLoad) continue;
    const int32_t buffer = statsOutput(stats, epilogue.buffers[instr.buffer]);
    if (buffer < 0) continue;
    const KStore* store = storeInto(s, buffer);
    if (!store || usesVar(instr.index, rank, rank - 1)) return false;
    if (ixText(store->index) != ixText(instr.index)) return false;
  }
  return true;
}

/// The epilogue instructions to cache, each with the statistics instruction holding its value:
/// walking back from the stores, an expensive instruction that some reduction loop over the
/// epilogue's last dimension computes is cached, and what only it needed is not computed.
std::vector<CpuRowCache> rowCaches(const FusedKernel& stats, const FusedKernel& epilogue) {
  const Kernel& s = stats.kernel;
  const Kernel& e = epilogue.kernel;
  const size_t rank = e.domain.size();
  const int64_t row = e.domain.back();
  std::vector<bool> inner(e.instrs.size(), false), needed(e.instrs.size(), false);
  for (size_t j = 0; j < e.instrs.size(); ++j) {
    inner[j] = e.instrs[j].index && usesVar(e.instrs[j].index, rank, rank - 1);
    for (int32_t arg : e.instrs[j].args) inner[j] = inner[j] || inner[arg];
  }
  for (const KStore& store : e.stores) needed[store.value] = true;
  RowMatcher matcher(stats, epilogue);
  std::vector<CpuRowCache> caches;
  int64_t bytes = 0;
  for (size_t j = e.instrs.size(); j-- > 0;) {
    if (!needed[j]) continue;
    const KInstr& instr = e.instrs[j];
    const int64_t size = static_cast<int64_t>(c10::elementSize(instr.dtype)) * row;
    if (inner[j] && expensive(instr) && bytes + size <= kCacheBytes) {
      int32_t found = -1;
      for (size_t i = 0; i < s.instrs.size() && found < 0; ++i) {
        const int32_t scope = s.instrs[i].scope;
        if (scope < 0 || s.reductions[scope].sizes != std::vector<int64_t>{row}) continue;
        if (matcher.same(static_cast<int32_t>(i), static_cast<int32_t>(j))) {
          found = static_cast<int32_t>(i);
        }
      }
      if (found >= 0) {
        caches.push_back(CpuRowCache{found, static_cast<int32_t>(j)});
        bytes += size;
        continue;
      }
    }
    for (int32_t arg : instr.args) needed[arg] = true;
  }
  std::reverse(caches.begin(), caches.end());
  return caches;
}

/// Whether plan kernel `k` is the kernel of the step after the one running kernel `k - 1`.
bool nextStep(const ExecutionPlan& plan, int32_t k) {
  for (size_t s = 0; s + 1 < plan.steps.size(); ++s) {
    if (plan.steps[s].kind == StepKind::kFusedKernel && plan.steps[s].kernel == k - 1) {
      return plan.steps[s + 1].kind == StepKind::kFusedKernel && plan.steps[s + 1].kernel == k;
    }
  }
  return false;
}

}  // namespace

std::vector<CpuFunction> cpuFunctions(const ExecutionPlan& plan) {
  std::vector<CpuFunction> functions;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const FusedKernel& kernel = plan.kernels[k];
    if (k + 1 < plan.kernels.size() && nextStep(plan, static_cast<int32_t>(k + 1)) &&
        rowsMatch(kernel, plan.kernels[k + 1])) {
      std::vector<CpuRowCache> caches = rowCaches(kernel, plan.kernels[k + 1]);
      if (!caches.empty() || domainNumel(kernel.kernel) >= kMinRowsWithoutCache) {
        functions.push_back(CpuFunction{kernel.kernel.name + "_rows", &kernel.kernel,
                                        &plan.kernels[k + 1].kernel, std::move(caches)});
        ++k;
        continue;
      }
    }
    functions.push_back(CpuFunction{kernel.kernel.name, &kernel.kernel, nullptr, {}});
  }
  return functions;
}

CpuProgram renderCppProgram(const ExecutionPlan& plan) {
  const std::vector<CpuFunction> functions = cpuFunctions(plan);
  CpuProgram program;
  program.source = renderCppFunctions(functions);
  for (const CpuFunction& function : functions) {
    program.names.push_back(function.name);
    if (function.epilogue) program.names.emplace_back();
  }
  LF_INTERNAL_ASSERT(program.names.size() == plan.kernels.size(), "functions do not cover plan");
  return program;
}

CpuCompileResult compileCppProgram(const CpuProgram& program) {
  std::vector<std::string> names;
  for (const std::string& name : program.names) {
    if (!name.empty()) names.push_back(name);
  }
  CpuCompileResult result = compileCpp(program.source, names);
  if (!result.module) return result;
  auto module = std::make_shared<CpuModule>(*result.module);
  module->functions.clear();
  size_t next = 0;
  for (const std::string& name : program.names) {
    module->functions.push_back(name.empty() ? nullptr : result.module->functions.at(next++));
  }
  result.module = std::move(module);
  return result;
}

void runCpuKernel(const ExecutionPlan& plan, size_t index,
                  const std::vector<CpuKernelFn>& functions, const Graph& graph, PlanValues& values,
                  const std::vector<std::vector<int64_t>>* arguments) {
  CpuKernelFn fn = functions.at(index);
  if (!fn) return;  // its row group ran it with the kernel before it
  const c10::ArrayRef<int64_t> args =
      arguments ? c10::ArrayRef<int64_t>(arguments->at(index)) : c10::ArrayRef<int64_t>();
  if (index + 1 < functions.size() && !functions[index + 1]) {
    runFusedRowGroup(plan.kernels[index], plan.kernels[index + 1], fn, graph, values, args);
    return;
  }
  runFusedKernel(plan.kernels[index], fn, graph, values, args);
}

}  // namespace lazyfuse
