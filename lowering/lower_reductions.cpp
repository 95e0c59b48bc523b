// Lowerings of reductions (sum, mean, amax, amin, prod, var, std, argmax, argmin) and of softmax,
// log_softmax and layer norm, forward and backward, as reductions plus pointwise nodes.

#include "lowering/lower_ops.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using V = KValue;

LoopId self(LoweringCall& call) { return *call.tensor("self"); }
const LoopNode& input(LoweringCall& call) { return call.loop(self(call)); }

/// The reduced dimensions of `self` named by the constant argument `dim` (None or [] means all),
/// sorted; all of them when `over_dims` is false (an op without `dim`).
std::vector<int64_t> reducedDims(LoweringCall& call, bool over_dims = true) {
  const int64_t rank = input(call).sizes.size();
  std::vector<int64_t> dims;
  if (over_dims && !call.isNone("dim")) {
    const c10::IValue& v = call.constant("dim");
    dims = v.isInt() ? std::vector<int64_t>{v.toInt()} : v.toIntVector();
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  for (int64_t& d : dims) d = rank == 0 ? 0 : wrapDim(d, rank);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (rank == 0) dims.clear();
  return dims;
}

int64_t reducedCount(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

/// Sums and products accumulate in double (floating inputs) or int64 (integers and bool).
ScalarType accumulator(ScalarType dtype) {
  return c10::isFloatingType(dtype) ? ScalarType::Double : ScalarType::Long;
}

V castIn(LoopContext& c, V v, ScalarType t) { return c.ops().cast(v, t); }

// Note [Split full reductions]
// A reduction to a single value is a kernel of one point, and a point runs on one thread. A
// large one is computed in two steps instead: partial results over the leading dimensions (one
// point each, so the points split across threads; a 1-d input is viewed as [parts, n / parts]
// when some parts count in [kMinParts, kMaxParts] divides n), then the fold of the partials,
// which is small. Sums and products keep their accumulator type for the partials; max and min
// are exact in any order. argmax/argmin stay whole (the partials would need their indices).
constexpr int64_t kSplitMinElements = int64_t{1} << 16;
constexpr int64_t kMinParts = 64;
constexpr int64_t kMaxParts = 1024;

/// The partials' source for a split of `input` (sizes `sizes`), and how many leading dimensions
/// of that source the partials keep; nullopt when it does not split.
std::optional<std::pair<LoopId, size_t>> splitSource(LoweringCall& call, LoopId input,
                                                     const std::vector<int64_t>& sizes) {
  size_t lead = 0;
  int64_t parts = 1;
  while (lead + 1 < sizes.size() && parts < kMinParts) parts *= sizes[lead++];
  if (parts >= kMinParts) return std::make_pair(input, lead);
  if (sizes.size() != 1) return std::nullopt;
  const int64_t n = sizes[0];
  for (int64_t p = kMaxParts; p >= kMinParts; --p) {
    if (n % p != 0) continue;
    const int64_t chunk = n / p;
    LoopId view = call.view(input, {p, chunk}, [chunk](const std::vector<IxPtr>& index) {
      return std::vector<IxPtr>{ixAdd(ixMul(index[0], ixConst(chunk)), index[1])};
    });
    return std::make_pair(view, size_t{1});
  }
  return std::nullopt;
}

// Note [Split column reductions]
// A sum over the rows of a tall input (a weight or bias gradient: [4096, 1024] summed over dim 0)
// folds each output point down a column, and the CPU renderer runs a segment of the row's points
// at a time: each task reads one segment of every row, a row's length apart, and the few output
// points make few tasks. Such a reduction is computed in two steps instead: partials over groups
// of kColumnGroupRows..2*kColumnGroupRows rows (the input viewed as [G, R / G, ...], summed over
// its middle dimension: G times as many tasks, each over rows of its own) in the accumulator
// type, then the fold of the G partials. Only for a leading dimension of at least
// kColumnSplitMinRows rows whose row count such a group size divides.
constexpr int64_t kColumnSplitMinRows = 256;
constexpr int64_t kColumnGroupRows = 64;

/// The grouped view [G, rows, ...] of `input` for a split of its reduction over `dims`; nullopt
/// when it does not split.
std::optional<LoopId> columnSplitSource(LoweringCall& call, LoopId input,
                                        const std::vector<int64_t>& sizes,
                                        const std::vector<int64_t>& dims) {
  // The reduced dimensions must be the leading ones, with some left: their rows are R.
  const size_t lead = dims.size();
  if (lead == 0 || lead >= sizes.size()) return std::nullopt;
  for (size_t d = 0; d < lead; ++d) {
    if (dims[d] != static_cast<int64_t>(d)) return std::nullopt;
  }
  const int64_t total_rows = reducedCount(sizes, dims);
  int64_t elements = 1;
  for (int64_t s : sizes) elements *= s;
  if (total_rows < kColumnSplitMinRows || elements < kSplitMinElements) return std::nullopt;
  for (int64_t rows = kColumnGroupRows; rows <= 2 * kColumnGroupRows; ++rows) {
    if (total_rows % rows != 0) continue;
    std::vector<int64_t> grouped{total_rows / rows, rows};
    grouped.insert(grouped.end(), sizes.begin() + static_cast<std::ptrdiff_t>(lead), sizes.end());
    LoopId view = call.view(input, grouped, [rows, lead, sizes](const std::vector<IxPtr>& index) {
      // Row g * rows + r of the flattened leading dimensions, back to their indices.
      IxPtr row = ixAdd(ixMul(index[0], ixConst(rows)), index[1]);
      std::vector<IxPtr> source(lead);
      int64_t stride = 1;
      for (size_t d = lead; d-- > 0;) {
        IxPtr above = ixDiv(row, ixConst(stride));
        source[d] = d == 0 ? above : ixMod(above, ixConst(sizes[d]));
        stride *= sizes[d];
      }
      source.insert(source.end(), index.begin() + 2, index.end());
      return source;
    });
    return view;
  }
  return std::nullopt;
}

}  // namespace

/// call.reduce, in two steps when it folds a large input to a single value or down the rows of a
/// tall one; see Note [Split full reductions] and Note [Split column reductions].
LoopId reduceMaybeSplit(LoweringCall& call, LoopId input, const std::vector<int64_t>& dims,
                        bool keepdim, ReduceKind kind, ScalarType acc, ScalarType dtype,
                        ReduceFn pre, ReduceFn post) {
  const std::vector<int64_t> sizes = call.loop(input).sizes;
  const bool arg = kind == ReduceKind::kArgMax || kind == ReduceKind::kArgMin;
  if (auto grouped = arg ? std::nullopt : columnSplitSource(call, input, sizes, dims)) {
    LoopId partials = call.reduce(*grouped, {1}, false, kind, acc, acc, pre, nullptr);
    const size_t lead = dims.size();
    LoopId folded =
        call.reduce(partials, {0}, keepdim && lead == 1, kind, acc, dtype, nullptr, post);
    if (!keepdim || lead == 1) return folded;
    // The fold keeps one dimension for the `lead` reduced ones: keepdim keeps each of them.
    std::vector<int64_t> kept(lead, 1);
    kept.insert(kept.end(), sizes.begin() + static_cast<std::ptrdiff_t>(lead), sizes.end());
    return call.view(folded, kept, [lead](const std::vector<IxPtr>& index) {
      return std::vector<IxPtr>(index.begin() + static_cast<std::ptrdiff_t>(lead), index.end());
    });
  }
  std::optional<std::pair<LoopId, size_t>> split;
  if (!arg && dims.size() == sizes.size() && reducedCount(sizes, dims) >= kSplitMinElements) {
    split = splitSource(call, input, sizes);
  }
  if (!split) return call.reduce(input, dims, keepdim, kind, acc, dtype, pre, post);
  auto [source, lead] = *split;
  const size_t rank = call.loop(source).sizes.size();
  // A view changes the rank: its partials drop the reduced dimension, and the fold then has the
  // input's rank (1) when keepdim.
  const bool partial_keepdim = keepdim && source == input;
  std::vector<int64_t> inner, outer;
  for (size_t d = 0; d < rank; ++d) (d < lead ? outer : inner).push_back(static_cast<int64_t>(d));
  LoopId partials = call.reduce(source, inner, partial_keepdim, kind, acc, acc, pre, nullptr);
  return call.reduce(partials, outer, keepdim, kind, acc, dtype, nullptr, post);
}

namespace {

/// sum, mean and prod over `dim` (and `keepdim`), or over everything when `over_dims` is false.
bool lowerSumLike(LoweringCall& call, ReduceKind kind, bool over_dims, bool mean) {
  const ScalarType out = call.out().dtype;
  const ScalarType acc = accumulator(out);
  std::vector<int64_t> dims = reducedDims(call, over_dims);
  const bool keepdim = over_dims && call.constant("keepdim").toBool();
  const double count = static_cast<double>(reducedCount(input(call).sizes, dims));
  ReduceFn pre = [acc](LoopContext& c, V v) { return castIn(c, v, acc); };
  ReduceFn post = nullptr;
  if (mean) {
    post = [count](LoopContext& c, V s) {
      // Eager's CUDA mean multiplies by 1/N: see Note [CUDA prelude].
      return c.ops().binary("div_by_scalar", s, c.ops().constant(count, c.ops().dtypeOf(s)));
    };
  }
  call.outputs = {reduceMaybeSplit(call, self(call), dims, keepdim, kind, acc, out, pre, post)};
  return true;
}

/// amax and amin over `dim`.
bool lowerMinMax(LoweringCall& call, ReduceKind kind) {
  std::vector<int64_t> dims = reducedDims(call);
  const bool keepdim = call.constant("keepdim").toBool();
  const ScalarType t = computeType(input(call).dtype);
  call.outputs = {reduceMaybeSplit(call, self(call), dims, keepdim, kind, t, call.out().dtype,
                                   nullptr, nullptr)};
  return true;
}

/// var/std (correction form), two-pass: the mean first, then the sum of squared deviations.
bool lowerVariance(LoweringCall& call, bool is_std) {
  const LoopId x = self(call);
  std::vector<int64_t> dims = reducedDims(call);
  const bool keepdim = call.constant("keepdim").toBool();
  const double n = static_cast<double>(reducedCount(input(call).sizes, dims));
  const ScalarType acc = ScalarType::Double;
  LoopId mean = reduceMaybeSplit(
      call, x, dims, /*keepdim=*/true, ReduceKind::kSum, acc, acc,
      [acc](LoopContext& c, V v) { return castIn(c, v, acc); },
      [n](LoopContext& c, V s) {
        return c.ops().binary("div", s, c.ops().constant(n, ScalarType::Double));
      });
  std::vector<int64_t> sizes = input(call).sizes;
  LoopId sq = call.combine({x, mean}, sizes, acc, [acc](KernelBuilder& o, const std::vector<V>& v) {
    V d = o.binary("sub", o.cast(v[0], acc), v[1]);
    return o.binary("mul", d, d);
  });
  const ArgIndex correction = call.index("correction");
  const bool default_correction = call.isNone("correction");
  ReduceFn post = [=, args = call.args()](LoopContext& c, V s) {
    KernelBuilder& o = c.ops();
    V corr = default_correction ? o.constant(1, acc) : args->scalar(c, correction, acc);
    V denom = o.binary("maximum", o.binary("sub", o.constant(n, acc), corr), o.constant(0, acc));
    V var = o.binary("div", s, denom);
    return is_std ? o.unary("sqrt", var) : var;
  };
  call.outputs = {reduceMaybeSplit(call, sq, dims, keepdim, ReduceKind::kSum, acc, call.out().dtype,
                                   nullptr, post)};
  return true;
}

bool lowerArg(LoweringCall& call, ReduceKind kind) {
  std::vector<int64_t> dims = reducedDims(call);
  const bool keepdim = call.constant("keepdim").toBool();
  const ScalarType t = computeType(input(call).dtype);
  call.outputs = {call.reduce(self(call), dims, keepdim, kind, t, call.out().dtype)};
  return true;
}

/// softmax and log_softmax over `dim`: max, then the sum of exp(x - max), then the output.
bool lowerSoftmax(LoweringCall& call, bool log) {
  const LoopId x = self(call);
  const std::vector<int64_t> sizes = input(call).sizes;
  std::vector<int64_t> dims = reducedDims(call);
  const ScalarType t = computeType(call.out().dtype);
  LoopId max = call.reduce(x, dims, true, ReduceKind::kMax, t, t,
                           [t](LoopContext& c, V v) { return castIn(c, v, t); });
  LoopId shifted = call.combine({x, max}, sizes, t, [t](KernelBuilder& o, const std::vector<V>& v) {
    // An all -inf row has max -inf: eager's result there is NaN, as is exp(-inf - -inf).
    return o.binary("sub", o.cast(v[0], t), v[1]);
  });
  LoopId sum = call.reduce(shifted, dims, true, ReduceKind::kSum, t, t,
                           [](LoopContext& c, V v) { return c.ops().unary("exp", v); });
  call.outputs = {call.combine({shifted, sum}, sizes, call.out().dtype,
                               [log](KernelBuilder& o, const std::vector<V>& v) {
                                 if (log) return o.binary("sub", v[0], o.unary("log", v[1]));
                                 return o.binary("div", o.unary("exp", v[0]), v[1]);
                               })};
  return true;
}

/// softmax backward: y * (g - sum(g * y)); log_softmax backward: g - exp(y) * sum(g).
bool lowerSoftmaxBackward(LoweringCall& call, bool log) {
  const LoopId g = *call.tensor("grad_output"), y = *call.tensor("output");
  const std::vector<int64_t> sizes = call.loop(g).sizes;
  const int64_t rank = sizes.size();
  std::vector<int64_t> dims = {rank == 0 ? 0 : wrapDim(call.constant("dim").toInt(), rank)};
  if (rank == 0) dims.clear();
  const ScalarType t = computeType(call.out().dtype);
  LoopId prod =
      log ? g : call.combine({g, y}, sizes, t, [t](KernelBuilder& o, const std::vector<V>& v) {
        return o.binary("mul", o.cast(v[0], t), o.cast(v[1], t));
      });
  LoopId sum = call.reduce(prod, dims, true, ReduceKind::kSum, t, t,
                           [t](LoopContext& c, V v) { return castIn(c, v, t); });
  call.outputs = {call.combine(
      {g, y, sum}, sizes, call.out().dtype, [log, t](KernelBuilder& o, const std::vector<V>& v) {
        V gv = o.cast(v[0], t), yv = o.cast(v[1], t);
        if (log) return o.binary("sub", gv, o.binary("mul", o.unary("exp", yv), v[2]));
        return o.binary("mul", yv, o.binary("sub", gv, v[2]));
      })};
  return true;
}

}  // namespace

void registerReductionLowerings(LoweringRegistry& r) {
  constexpr OpClass kReduction = OpClass::kReduction;
  auto sumLike = [](ReduceKind kind, bool over_dims, bool mean) -> LoweringFn {
    return [=](LoweringCall& call) { return lowerSumLike(call, kind, over_dims, mean); };
  };
  r.add(kReduction, {"aten::sum.dim_IntList"}, sumLike(ReduceKind::kSum, true, false));
  r.add(kReduction, {"aten::sum.default"}, sumLike(ReduceKind::kSum, false, false));
  r.add(kReduction, {"aten::mean.dim"}, sumLike(ReduceKind::kSum, true, true));
  r.add(kReduction, {"aten::mean.default"}, sumLike(ReduceKind::kSum, false, true));
  r.add(kReduction, {"aten::prod.dim_int"}, sumLike(ReduceKind::kProd, true, false));
  r.add(kReduction, {"aten::prod.default"}, sumLike(ReduceKind::kProd, false, false));
  r.add(kReduction, {"aten::amax"},
        [](LoweringCall& c) { return lowerMinMax(c, ReduceKind::kMax); });
  r.add(kReduction, {"aten::amin"},
        [](LoweringCall& c) { return lowerMinMax(c, ReduceKind::kMin); });
  r.add(kReduction, {"aten::var.correction"},
        [](LoweringCall& c) { return lowerVariance(c, false); });
  r.add(kReduction, {"aten::std.correction"},
        [](LoweringCall& c) { return lowerVariance(c, true); });
  r.add(kReduction, {"aten::argmax"},
        [](LoweringCall& c) { return lowerArg(c, ReduceKind::kArgMax); });
  r.add(kReduction, {"aten::argmin"},
        [](LoweringCall& c) { return lowerArg(c, ReduceKind::kArgMin); });
  r.add(kReduction, {"aten::_softmax"}, [](LoweringCall& c) { return lowerSoftmax(c, false); });
  r.add(kReduction, {"aten::_log_softmax"}, [](LoweringCall& c) { return lowerSoftmax(c, true); });
  r.add(kReduction, {"aten::_softmax_backward_data"},
        [](LoweringCall& c) { return lowerSoftmaxBackward(c, false); });
  r.add(kReduction, {"aten::_log_softmax_backward_data"},
        [](LoweringCall& c) { return lowerSoftmaxBackward(c, true); });
}

}  // namespace lazyfuse
