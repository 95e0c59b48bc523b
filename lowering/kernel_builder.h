#pragma once

// The `ops` handler that lowerings call, define-by-run: each call appends one instruction to the
// kernel being built and returns its SSA number; equal calls return the same number (common
// subexpressions are merged). See Note [Kernel IR].

#include "lowering/kernel_ir.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace lazyfuse {

using KValue = int32_t;

/// The type a value of `dtype` computes in: Half and BFloat16 compute in Float.
c10::ScalarType computeType(c10::ScalarType dtype);

class KernelBuilder {
 public:
  explicit KernelBuilder(std::vector<int64_t> domain);

  const std::vector<int64_t>& domain() const { return kernel_.domain; }
  /// v0.. for the domain's dimensions, constant 0 where a dimension has size 1.
  std::vector<IxPtr> identityIndex() const;
  /// Whether `index` is identityIndex(), expression by expression.
  bool isIdentity(const std::vector<IxPtr>& index) const;

  int32_t addBuffer(c10::ScalarType dtype, bool output);
  int32_t addParam(bool floating);

  KValue load(int32_t buffer, IxPtr offset);
  KValue constant(double value, c10::ScalarType dtype);
  KValue param(int32_t slot, c10::ScalarType dtype);
  /// A new parameter of `dtype`'s kind (double when floating, else int64), read as that.
  KValue newParam(c10::ScalarType dtype);
  KValue index(IxPtr ix);
  /// A function of Note [Kernel functions]; arguments are cast to `dtype` first (comparisons
  /// and predicates compute in `dtype` and return Bool).
  KValue unary(const std::string& fn, KValue a);
  KValue binary(const std::string& fn, KValue a, KValue b);
  KValue where(KValue cond, KValue a, KValue b);
  KValue cast(KValue a, c10::ScalarType dtype);
  /// A reduction over `sizes`; `body` gets the reduction variables r0.. and returns the value to
  /// fold, which is cast to `acc`.
  KValue reduce(ReduceKind kind, c10::ScalarType acc, std::vector<int64_t> sizes,
                const std::function<KValue(const std::vector<IxPtr>&)>& body);
  void store(KValue value, int32_t buffer, IxPtr offset);

  /// The reduction whose loop body is being built, or -1.
  int32_t scope() const { return scope_; }
  c10::ScalarType dtypeOf(KValue v) const { return kernel_.instrs.at(v).dtype; }
  Kernel finish(std::string name) &&;

 private:
  /// Appends `instr` in the scope its arguments put it in (or `forced_scope`), unless an equal
  /// instruction exists.
  KValue append(KInstr instr, std::optional<int32_t> forced_scope = std::nullopt);
  int32_t scopeFor(const KInstr& instr) const;
  /// True when rounding `a` with `fn` (round_to_half or round_to_bfloat16) changes nothing.
  bool alreadyRounded(const std::string& fn, KValue a) const;

  /// An instruction as far as merging equal ones goes (the constant by its bits).
  struct InstrKey {
    const KInstr* instr;
    uint64_t fbits;
    bool operator==(const InstrKey& other) const;
  };
  struct InstrKeyHash {
    size_t operator()(const InstrKey& key) const;
  };

  Kernel kernel_;
  int32_t scope_ = -1;  // the reduction whose body is being built
  std::unordered_map<InstrKey, KValue, InstrKeyHash> seen_;
  std::vector<std::unique_ptr<KInstr>> keys_;  // what seen_'s keys point at
};

/// Functions whose result is Bool whatever their argument type.
bool returnsBool(const std::string& fn);

}  // namespace lazyfuse
