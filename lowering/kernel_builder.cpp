#include "lowering/kernel_builder.h"

#include <cstring>
#include <memory>

#include "lazy_ir/check.h"
#include "lazy_ir/hash.h"
#include "lowering/kernel_functions.h"

namespace lazyfuse {

c10::ScalarType computeType(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16) {
    return c10::ScalarType::Float;
  }
  return dtype;
}

bool returnsBool(const std::string& fn) {
  const KernelFunction* row = findKernelFunction(fn);
  return row && row->result == FnResult::kBool;
}

namespace {

/// Whether `fn` takes Bool arguments, to which KernelBuilder casts what it is given.
bool takesBool(const std::string& fn) {
  const KernelFunction* row = findKernelFunction(fn);
  return row && row->args == FnArgs::kBool;
}

}  // namespace

KernelBuilder::KernelBuilder(std::vector<int64_t> domain) { kernel_.domain = std::move(domain); }

std::vector<IxPtr> KernelBuilder::identityIndex() const {
  std::vector<IxPtr> index;
  for (size_t d = 0; d < kernel_.domain.size(); ++d) {
    index.push_back(kernel_.domain[d] == 1 ? ixConst(0) : ixVar(static_cast<int>(d)));
  }
  return index;
}

bool KernelBuilder::isIdentity(const std::vector<IxPtr>& index) const {
  return ixSame(index, identityIndex());
}

int32_t KernelBuilder::addBuffer(c10::ScalarType dtype, bool output) {
  kernel_.buffers.push_back(KBuffer{dtype, output});
  return static_cast<int32_t>(kernel_.buffers.size() - 1);
}

int32_t KernelBuilder::addParam(bool floating) {
  kernel_.params.push_back(KParam{floating});
  return static_cast<int32_t>(kernel_.params.size() - 1);
}

KValue KernelBuilder::newParam(c10::ScalarType dtype) {
  const bool floating = c10::isFloatingType(dtype);
  return param(addParam(floating), floating ? c10::ScalarType::Double : c10::ScalarType::Long);
}

int32_t KernelBuilder::scopeFor(const KInstr& instr) const {
  if (scope_ < 0) return -1;
  if (instr.index && ixUsesRVar(instr.index)) return scope_;
  for (KValue a : instr.args) {
    if (kernel_.instrs[a].scope == scope_) return scope_;
  }
  return -1;  // depends on the point only: computed once per point, outside the loop
}

bool KernelBuilder::InstrKey::operator==(const InstrKey& other) const {
  const KInstr& a = *instr;
  const KInstr& b = *other.instr;
  return a.op == b.op && a.dtype == b.dtype && a.fn == b.fn && a.buffer == b.buffer &&
         fbits == other.fbits && a.ivalue == b.ivalue && a.scope == b.scope && a.args == b.args &&
         (a.index == nullptr) == (b.index == nullptr) && (!a.index || ixSame(a.index, b.index));
}

size_t KernelBuilder::InstrKeyHash::operator()(const InstrKey& key) const {
  const KInstr& i = *key.instr;
  HashValue h = hashCombine(static_cast<HashValue>(i.op), static_cast<HashValue>(i.dtype));
  h = hashCombine(h, hashString(i.fn));
  h = hashCombine(h, static_cast<HashValue>(i.buffer));
  h = hashCombine(h, i.index ? i.index->hash : 0);
  h = hashCombine(h, key.fbits);
  h = hashCombine(h, static_cast<HashValue>(i.ivalue));
  h = hashCombine(h, static_cast<HashValue>(i.scope));
  for (KValue a : i.args) h = hashCombine(h, static_cast<HashValue>(a));
  return static_cast<size_t>(h);
}

KValue KernelBuilder::append(KInstr instr, std::optional<int32_t> forced_scope) {
  instr.scope = forced_scope ? *forced_scope : scopeFor(instr);
  uint64_t fbits = 0;
  std::memcpy(&fbits, &instr.fvalue, sizeof(fbits));
  auto it = seen_.find(InstrKey{&instr, fbits});
  if (it != seen_.end()) return it->second;
  const auto value = static_cast<KValue>(kernel_.instrs.size());
  kernel_.instrs.push_back(std::move(instr));
  // The key points into kernel_.instrs, which grows: keep keys on a stable copy.
  keys_.push_back(std::make_unique<KInstr>(kernel_.instrs.back()));
  seen_.emplace(InstrKey{keys_.back().get(), fbits}, value);
  return value;
}

KValue KernelBuilder::load(int32_t buffer, IxPtr offset) {
  KInstr instr;
  instr.op = KOp::kLoad;
  instr.dtype = computeType(kernel_.buffers.at(buffer).dtype);
  instr.buffer = buffer;
  instr.index = std::move(offset);
  return append(std::move(instr));
}

KValue KernelBuilder::constant(double value, c10::ScalarType dtype) {
  KInstr instr;
  instr.op = KOp::kConst;
  instr.dtype = computeType(dtype);
  if (c10::isFloatingType(instr.dtype)) {
    instr.fvalue = value;
  } else {
    instr.ivalue = static_cast<int64_t>(value);
  }
  return append(std::move(instr));
}

KValue KernelBuilder::param(int32_t slot, c10::ScalarType dtype) {
  KInstr instr;
  instr.op = KOp::kParam;
  instr.dtype = computeType(dtype);
  instr.ivalue = slot;
  return append(std::move(instr));
}

KValue KernelBuilder::index(IxPtr ix) {
  KInstr instr;
  instr.op = KOp::kIndex;
  instr.dtype = c10::ScalarType::Long;
  instr.index = std::move(ix);
  return append(std::move(instr));
}

KValue KernelBuilder::cast(KValue a, c10::ScalarType dtype) {
  dtype = computeType(dtype);
  if (dtypeOf(a) == dtype) return a;
  KInstr instr;
  instr.op = KOp::kCast;
  instr.dtype = dtype;
  instr.args = {a};
  return append(std::move(instr));
}

// A Half (BFloat16) load, or a value already rounded to Half (BFloat16), is its own rounding: a
// conversion between two such buffers (`y.copy_(x)`, Note [Conversions round]) would otherwise
// round twice, and each rounding is a store and a load of 16 bits in the CPU code.
bool KernelBuilder::alreadyRounded(const std::string& fn, KValue a) const {
  const KInstr& instr = kernel_.instrs.at(a);
  if (instr.op == KOp::kUnary) return instr.fn == fn;
  if (instr.op != KOp::kLoad) return false;
  const char* rounding = roundingFunction(kernel_.buffers.at(instr.buffer).dtype);
  return rounding != nullptr && fn == rounding;
}

KValue KernelBuilder::unary(const std::string& fn, KValue a) {
  if (fn.rfind("round_to_", 0) == 0 && alreadyRounded(fn, a)) return a;
  KInstr instr;
  instr.op = KOp::kUnary;
  instr.fn = fn;
  instr.dtype = returnsBool(fn) ? c10::ScalarType::Bool : dtypeOf(a);
  instr.args = {takesBool(fn) ? cast(a, c10::ScalarType::Bool) : a};
  return append(std::move(instr));
}

KValue KernelBuilder::binary(const std::string& fn, KValue a, KValue b) {
  LF_INTERNAL_ASSERT(dtypeOf(a) == dtypeOf(b), "binary ", fn, " on ", dtypeOf(a), " and ",
                     dtypeOf(b));
  KInstr instr;
  instr.op = KOp::kBinary;
  instr.fn = fn;
  instr.dtype = returnsBool(fn) ? c10::ScalarType::Bool : dtypeOf(a);
  if (takesBool(fn)) {
    a = cast(a, c10::ScalarType::Bool);
    b = cast(b, c10::ScalarType::Bool);
  }
  instr.args = {a, b};
  return append(std::move(instr));
}

KValue KernelBuilder::where(KValue cond, KValue a, KValue b) {
  LF_INTERNAL_ASSERT(dtypeOf(a) == dtypeOf(b), "where on ", dtypeOf(a), " and ", dtypeOf(b));
  KInstr instr;
  instr.op = KOp::kWhere;
  instr.dtype = dtypeOf(a);
  instr.args = {cast(cond, c10::ScalarType::Bool), a, b};
  return append(std::move(instr));
}

KValue KernelBuilder::reduce(ReduceKind kind, c10::ScalarType acc, std::vector<int64_t> sizes,
                             const std::function<KValue(const std::vector<IxPtr>&)>& body) {
  LF_INTERNAL_ASSERT(scope_ < 0, "nested reductions");
  const int32_t r = static_cast<int32_t>(kernel_.reductions.size());
  std::vector<IxPtr> rvars;
  for (size_t d = 0; d < sizes.size(); ++d) {
    rvars.push_back(sizes[d] == 1 ? ixConst(0) : ixRVar(static_cast<int>(d)));
  }
  kernel_.reductions.push_back(KReduction{kind, std::move(sizes), -1, computeType(acc)});
  scope_ = r;
  KValue value = body(rvars);
  const bool is_arg = kind == ReduceKind::kArgMax || kind == ReduceKind::kArgMin;
  // An argmax folds the value itself; every other reduction folds in its accumulator type.
  KValue folded = is_arg ? value : cast(value, acc);
  // A value that does not change inside the loop (a constant, a point's own value) is still
  // folded once per reduced element: give the loop a body instruction of its own scope.
  if (kernel_.instrs[folded].scope != r) {
    KInstr copy;  // a cast to its own type
    copy.op = KOp::kCast;
    copy.dtype = dtypeOf(folded);
    copy.args = {folded};
    folded = append(std::move(copy), /*forced_scope=*/r);
  }
  scope_ = -1;
  kernel_.reductions[r].body = folded;
  KInstr instr;
  instr.op = KOp::kReduce;
  instr.dtype = is_arg ? c10::ScalarType::Long : kernel_.reductions[r].dtype;
  instr.ivalue = r;
  return append(std::move(instr));
}

void KernelBuilder::store(KValue value, int32_t buffer, IxPtr offset) {
  LF_INTERNAL_ASSERT(kernel_.instrs[value].scope < 0, "store of a value inside a reduction");
  kernel_.stores.push_back(KStore{value, buffer, std::move(offset)});
}

Kernel KernelBuilder::finish(std::string name) && {
  kernel_.name = std::move(name);
  return std::move(kernel_);
}

}  // namespace lazyfuse
