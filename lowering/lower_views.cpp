// Lowerings of views (*_copy), scatters, copies and conversions as index functions. See Note
// [Loop graph].

#include "lowering/lower_ops.h"

#include <algorithm>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using Index = std::vector<IxPtr>;

LoopId self(LoweringCall& call) { return *call.tensor("self"); }
const std::vector<int64_t>& inSizes(LoweringCall& call) { return call.loop(self(call)).sizes; }

int64_t contiguousNumel(const std::vector<int64_t>& sizes, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t d = from; d < to; ++d) n *= sizes[d];
  return n;
}

/// Any reshape: dims equal at both ends map directly, the middle goes through a flat index.
Index reshapeIndex(const Index& out_index, const std::vector<int64_t>& out_sizes,
                   const std::vector<int64_t>& in_sizes) {
  size_t prefix = 0;
  while (prefix < out_sizes.size() && prefix < in_sizes.size() &&
         out_sizes[prefix] == in_sizes[prefix]) {
    ++prefix;
  }
  size_t suffix = 0;
  while (suffix < out_sizes.size() - prefix && suffix < in_sizes.size() - prefix &&
         out_sizes[out_sizes.size() - 1 - suffix] == in_sizes[in_sizes.size() - 1 - suffix]) {
    ++suffix;
  }
  const size_t out_mid = out_sizes.size() - suffix, in_mid = in_sizes.size() - suffix;
  IxPtr flat = ixConst(0);
  for (size_t d = prefix; d < out_mid; ++d) {
    flat = ixAdd(flat, ixMul(out_index[d], ixConst(contiguousNumel(out_sizes, d + 1, out_mid))));
  }
  Index in_index(out_index.begin(), out_index.begin() + prefix);
  for (size_t d = prefix; d < in_mid; ++d) {
    if (in_sizes[d] == 1) {
      in_index.push_back(ixConst(0));
      continue;
    }
    IxPtr ix = ixDiv(flat, ixConst(contiguousNumel(in_sizes, d + 1, in_mid)));
    in_index.push_back(d == prefix ? ix : ixMod(ix, ixConst(in_sizes[d])));
  }
  in_index.insert(in_index.end(), out_index.begin() + out_mid, out_index.end());
  return in_index;
}

bool lowerReshape(LoweringCall& call) {
  std::vector<int64_t> in = inSizes(call), out = call.out().sizes;
  call.outputs = {call.view(
      self(call), out, [in, out](const Index& index) { return reshapeIndex(index, out, in); })};
  return true;
}

bool lowerPermute(LoweringCall& call, std::vector<int64_t> dims) {
  const int64_t rank = static_cast<int64_t>(inSizes(call).size());
  for (int64_t& d : dims) d = wrapDim(d, rank);
  call.outputs = {call.view(self(call), call.out().sizes, [dims](const Index& index) {
    Index in(index.size());
    for (size_t d = 0; d < dims.size(); ++d) in[dims[d]] = index[d];
    return in;
  })};
  return true;
}

std::vector<int64_t> swapDims(int64_t rank, int64_t a, int64_t b) {
  std::vector<int64_t> dims(rank);
  for (int64_t d = 0; d < rank; ++d) dims[d] = d;
  if (rank > 0) std::swap(dims[wrapDim(a, rank)], dims[wrapDim(b, rank)]);
  return dims;
}

bool lowerExpand(LoweringCall& call) {
  std::vector<int64_t> in = inSizes(call);
  call.outputs = {call.view(self(call), call.out().sizes,
                            [in](const Index& index) { return broadcastIndex(index, in); })};
  return true;
}

/// start, step and length of slice(dim, start, end, step) on a dimension of `size`, as eager.
struct SliceRange {
  int64_t start = 0, step = 1, length = 0;
};
SliceRange sliceRange(LoweringCall& call, int64_t size, int64_t length) {
  SliceRange r;
  r.step = call.constant("step").toInt();
  r.length = length;
  if (!call.isNone("start")) r.start = call.constant("start").toInt();
  if (r.start < 0) r.start += size;
  r.start = std::clamp<int64_t>(r.start, 0, size);
  return r;
}

bool lowerSlice(LoweringCall& call) {
  const int64_t dim = wrapDim(call.constant("dim").toInt(), inSizes(call).size());
  SliceRange r = sliceRange(call, inSizes(call)[dim], call.out().sizes[dim]);
  call.outputs = {call.view(self(call), call.out().sizes, [dim, r](const Index& index) {
    Index in = index;
    in[dim] = ixAdd(ixMul(index[dim], ixConst(r.step)), ixConst(r.start));
    return in;
  })};
  return true;
}

/// split_copy and split_with_sizes_copy: output k is the slice of the input along `dim` that
/// starts where output k-1 ends; unbind_copy: output k selects index k. Each a view, so a
/// Linear's q, k and v are read from its output where they are used (eager's split returns
/// views too), not copied by an extern call.
bool lowerSplit(LoweringCall& call, bool unbind) {
  const std::vector<int64_t> in = inSizes(call);
  const int64_t dim = wrapDim(call.constant("dim").toInt(), in.size());
  int64_t start = 0;
  for (size_t k = 0; k < call.attrs().outputs.size(); ++k) {
    const std::vector<int64_t>& sizes = call.out(k).sizes;
    call.outputs.push_back(call.view(self(call), sizes, [dim, start, unbind](const Index& index) {
      Index result = index;
      if (unbind) {
        result.insert(result.begin() + dim, ixConst(start));
      } else {
        result[dim] = ixAdd(index[dim], ixConst(start));
      }
      return result;
    }));
    start += unbind ? 1 : sizes.at(dim);
  }
  return !call.outputs.empty();
}

bool lowerSelect(LoweringCall& call) {
  const std::vector<int64_t> in = inSizes(call);
  const int64_t dim = wrapDim(call.constant("dim").toInt(), in.size());
  int64_t pos = call.constant("index").toInt();
  if (pos < 0) pos += in[dim];
  call.outputs = {call.view(self(call), call.out().sizes, [dim, pos](const Index& index) {
    Index result = index;
    result.insert(result.begin() + dim, ixConst(pos));
    return result;
  })};
  return true;
}

bool lowerDiagonal(LoweringCall& call) {
  const std::vector<int64_t> in = inSizes(call);
  const int64_t rank = in.size();
  const int64_t offset = call.constant("offset").toInt();
  const int64_t d1 = wrapDim(call.constant("dim1").toInt(), rank);
  const int64_t d2 = wrapDim(call.constant("dim2").toInt(), rank);
  call.outputs = {call.view(self(call), call.out().sizes, [=](const Index& index) {
    Index result(rank);
    size_t next = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != d1 && d != d2) result[d] = index[next++];
    }
    IxPtr diag = index.back();
    result[d1] = ixAdd(diag, ixConst(std::max<int64_t>(-offset, 0)));
    result[d2] = ixAdd(diag, ixConst(std::max<int64_t>(offset, 0)));
    return result;
  })};
  return true;
}

/// self where the index is outside the scattered region, src (read at `src_index`) inside it.
bool lowerScatter(LoweringCall& call, std::function<KValue(KernelBuilder&, const Index&)> inside,
                  std::function<Index(const Index&)> src_index) {
  const LoopId base = self(call), src = *call.tensor("src");
  const ScalarType t = computeType(call.out().dtype);
  LoopNode node;
  node.kind = LoopNode::kCompute;
  node.dtype = call.out().dtype;
  node.sizes = call.out().sizes;
  node.inputs = {base, src};
  node.remaps = true;
  node.compute = [=](LoopContext& c, const Index& index) {
    KernelBuilder& ops = c.ops();
    KValue from_src = ops.cast(c.at(src, src_index(index)), t);
    return ops.where(inside(ops, index), from_src, ops.cast(c.at(base, index), t));
  };
  call.outputs = {call.loops().add(std::move(node))};
  return true;
}

bool lowerSliceScatter(LoweringCall& call) {
  const std::vector<int64_t>& base = call.out().sizes;
  const int64_t dim = wrapDim(call.constant("dim").toInt(), base.size());
  const int64_t length = call.loop(*call.tensor("src")).sizes.at(dim);
  SliceRange r = sliceRange(call, base[dim], length);
  if (length == 0) return false;
  auto inside = [dim, r](KernelBuilder& ops, const Index& index) {
    KValue i = ops.index(index[dim]);
    auto lng = [&](int64_t v) { return ops.constant(static_cast<double>(v), ScalarType::Long); };
    KValue in_range = ops.binary("logical_and", ops.binary("ge", i, lng(r.start)),
                                 ops.binary("lt", i, lng(r.start + (r.length - 1) * r.step + 1)));
    KValue on_step = ops.binary(
        "eq",
        ops.index(ixMod(ixMax(ixAdd(index[dim], ixConst(-r.start)), ixConst(0)), ixConst(r.step))),
        lng(0));
    return ops.binary("logical_and", in_range, on_step);
  };
  auto src_index = [dim, r](const Index& index) {
    Index in = index;
    IxPtr rel = ixMax(ixAdd(index[dim], ixConst(-r.start)), ixConst(0));
    in[dim] = ixMin(ixDiv(rel, ixConst(r.step)), ixConst(r.length - 1));
    return in;
  };
  return lowerScatter(call, inside, src_index);
}

bool lowerSelectScatter(LoweringCall& call) {
  const std::vector<int64_t>& base = call.out().sizes;
  const int64_t dim = wrapDim(call.constant("dim").toInt(), base.size());
  int64_t pos = call.constant("index").toInt();
  if (pos < 0) pos += base[dim];
  // src may be smaller than the selected slice: functionalization writes an out= result that
  // eager resized into the view it was given (test_out_view_resized_like_eager). Only the part
  // src covers is written, and src is never read past its end.
  const std::vector<int64_t> src_sizes = call.loop(*call.tensor("src")).sizes;
  if (src_sizes.size() + 1 != base.size()) return false;
  std::vector<int64_t> short_dims;  // src dims shorter than the slice's
  for (size_t d = 0, s = 0; d < base.size(); ++d) {
    if (static_cast<int64_t>(d) == dim) continue;
    if (src_sizes[s] > base[d]) return false;            // ATen raises; so does the extern call
    if (src_sizes[s] == 0 && base[d] > 0) return false;  // nothing to read from
    if (src_sizes[s] < base[d]) short_dims.push_back(static_cast<int64_t>(s));
    ++s;
  }
  auto inside = [dim, pos, src_sizes, short_dims](KernelBuilder& ops, const Index& index) {
    auto lng = [&](int64_t v) { return ops.constant(static_cast<double>(v), ScalarType::Long); };
    KValue in = ops.binary("eq", ops.index(index[dim]), lng(pos));
    for (int64_t s : short_dims) {
      const size_t d = static_cast<size_t>(s < dim ? s : s + 1);
      in = ops.binary("logical_and", in, ops.binary("lt", ops.index(index[d]), lng(src_sizes[s])));
    }
    return in;
  };
  auto src_index = [dim, src_sizes, short_dims](const Index& index) {
    Index in = index;
    in.erase(in.begin() + dim);
    for (int64_t s : short_dims)
      in[s] = ixMin(in[s], ixConst(std::max<int64_t>(src_sizes[s] - 1, 0)));
    return in;
  };
  return lowerScatter(call, inside, src_index);
}

// Note [Conversions round]
// A Half or BFloat16 value is computed in Float inside a kernel (Note [Kernel IR]) and rounded
// when stored. Between ops of one kernel it stays in Float, as a fusing compiler keeps it (eager
// rounds after every op; the difference is within the type's precision). Conversions are
// different: `x.half().float()` asks for the rounding, so a conversion rounds both the value it
// converts, to the type that value has, and its result, to its own type.

/// `value` (in its compute type) rounded to what `dtype` holds, when `dtype` is Half or BFloat16.
KValue roundTo(KernelBuilder& ops, KValue value, ScalarType dtype) {
  const char* rounding = roundingFunction(dtype);
  return rounding == nullptr ? value : ops.unary(rounding, ops.cast(value, ScalarType::Float));
}

/// Argument `arg` of `call` converted to the output's dtype (Note [Conversions round]).
bool lowerConversion(LoweringCall& call, std::string_view arg) {
  const ScalarType from = call.loop(*call.tensor(arg)).dtype, to = call.out().dtype;
  call.outputs = {
      call.pointwise({arg}, to, [from, to](KernelBuilder& ops, const std::vector<KValue>& v) {
        return roundTo(ops, ops.cast(roundTo(ops, v[0], from), to), to);
      })};
  return true;
}

}  // namespace

void registerViewLowerings(LoweringRegistry& r) {
  r.add(OpClass::kView,
        {"aten::view_copy.default", "aten::_unsafe_view", "aten::_reshape_alias_copy",
         "aten::reshape", "aten::squeeze_copy", "aten::unsqueeze_copy"},
        lowerReshape);
  r.add(OpClass::kView, {"aten::permute_copy"},
        [](LoweringCall& call) { return lowerPermute(call, call.constant("dims").toIntVector()); });
  r.add(OpClass::kView, {"aten::transpose_copy"}, [](LoweringCall& call) {
    const int64_t rank = static_cast<int64_t>(inSizes(call).size());
    return lowerPermute(
        call, swapDims(rank, call.constant("dim0").toInt(), call.constant("dim1").toInt()));
  });
  r.add(OpClass::kView, {"aten::t_copy"}, [](LoweringCall& call) {
    return lowerPermute(call, swapDims(inSizes(call).size(), 0, -1));
  });
  r.add(OpClass::kView, {"aten::expand_copy"}, lowerExpand);
  r.add(OpClass::kView, {"aten::slice_copy"}, lowerSlice);
  r.add(OpClass::kView, {"aten::select_copy"}, lowerSelect);
  r.add(OpClass::kView, {"aten::split_copy", "aten::split_with_sizes_copy"},
        [](LoweringCall& call) { return lowerSplit(call, false); });
  r.add(OpClass::kView, {"aten::unbind_copy"},
        [](LoweringCall& call) { return lowerSplit(call, true); });
  r.add(OpClass::kView, {"aten::diagonal_copy"}, lowerDiagonal);
  r.add(OpClass::kScatter, {"aten::slice_scatter"}, lowerSliceScatter);
  r.add(OpClass::kScatter, {"aten::select_scatter"}, lowerSelectScatter);
}

void registerConversionLowerings(LoweringRegistry& r) {
  auto convertSelf = [](LoweringCall& call) { return lowerConversion(call, "self"); };
  r.add(OpClass::kView, {"aten::alias_copy", "aten::detach_copy", "aten::lift_fresh_copy"},
        convertSelf);
  r.add(OpClass::kPointwise, {"aten::clone", "aten::_to_copy", "aten::contiguous"}, convertSelf);
  // copy(self, src): src broadcast to self's shape, in self's dtype.
  r.add(OpClass::kPointwise, {"aten::copy"},
        [](LoweringCall& call) { return lowerConversion(call, "src"); });
}

}  // namespace lazyfuse
