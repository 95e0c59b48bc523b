#include "backend/shape_functions.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace lazyfuse {

// Note [Shape functions]
// Views (recorded as their *_copy ops under functionalization) and LayerNorm take sizes as
// arguments (view_copy's `size`, select_copy's `index`, native_layer_norm's `normalized_shape`),
// and cat and stack add or count their operands' sizes, so their outputs cannot be learned as
// equalities between input sizes (Note [Size-generic meta]), and every new size ran their meta
// kernels again, most of them Python (torch._refs): 0.1-1 ms a call, most of what recording a new
// size cost. These C++ functions compute the output sizes from the input sizes and the arguments
// instead (copy's too: its source broadcasts to its destination). Each returns nullopt for any
// call eager refuses (a view of the wrong element count, an index out of range, a dim out of
// range, mismatched cat operands), and for calls with an output of size 0, so those calls still
// go to the meta kernel, which raises eager's error. The rest of a call's attrs (dtypes, which
// outputs are undefined) come from a call of the same op, dtypes, ranks and constants that was
// inferred on Meta, where the function's sizes were checked against the meta kernel's (a
// difference ends the function's use for those calls; LAZYFUSE_VERIFY_META=1 makes it an error,
// and checks every call served too). Used by meta_templates.cpp.

namespace {

using Sizes = std::vector<int64_t>;
using torch::jit::Stack;

Sizes sizesOf(const c10::IValue& v) { return v.toTensor().sizes().vec(); }

/// `dim` wrapped into [0, rank) as eager wraps it (a 0-dim tensor takes dims 0 and -1), or
/// nullopt when eager would raise.
std::optional<int64_t> wrapDim(int64_t dim, int64_t rank) {
  const int64_t n = std::max<int64_t>(rank, 1);
  if (dim < -n || dim >= n) return std::nullopt;
  return dim < 0 ? dim + n : dim;
}

std::optional<ShapeList> one(Sizes sizes) { return ShapeList{std::move(sizes)}; }

/// The sizes `view(size)` gives a tensor of `numel` elements (one -1 inferred).
std::optional<Sizes> inferView(Sizes size, int64_t numel) {
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == -1) {
      if (inferred >= 0) return std::nullopt;
      inferred = static_cast<int>(i);
    } else if (size[i] <= 0 || __builtin_mul_overflow(known, size[i], &known) || known > numel) {
      return std::nullopt;
    }
  }
  if (inferred >= 0) {
    if (numel % known != 0) return std::nullopt;
    size[static_cast<size_t>(inferred)] = numel / known;
  } else if (known != numel) {
    return std::nullopt;
  }
  return size;
}

std::optional<ShapeList> view(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  int64_t numel = 1;
  for (int64_t s : self) numel *= s;
  auto sizes = inferView(a[1].toIntVector(), numel);
  if (!sizes) return std::nullopt;
  return one(std::move(*sizes));
}

std::optional<ShapeList> expand(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const Sizes size = a[1].toIntVector();
  if (size.size() < self.size()) return std::nullopt;
  const size_t lead = size.size() - self.size();
  Sizes out(size.size());
  for (size_t i = 0; i < size.size(); ++i) {
    if (i < lead) {
      if (size[i] <= 0) return std::nullopt;
      out[i] = size[i];
      continue;
    }
    const int64_t s = self[i - lead];
    if (size[i] == -1 || size[i] == s) {
      out[i] = s;
    } else if (s == 1 && size[i] > 0) {
      out[i] = size[i];
    } else {
      return std::nullopt;
    }
  }
  return one(std::move(out));
}

std::optional<ShapeList> same(const Stack& a) { return one(sizesOf(a[0])); }

std::optional<ShapeList> t(const Stack& a) {
  Sizes self = sizesOf(a[0]);
  if (self.size() > 2) return std::nullopt;
  std::reverse(self.begin(), self.end());
  return one(std::move(self));
}

std::optional<ShapeList> transpose(const Stack& a) {
  Sizes self = sizesOf(a[0]);
  const auto rank = static_cast<int64_t>(self.size());
  const auto d0 = wrapDim(a[1].toInt(), rank);
  const auto d1 = wrapDim(a[2].toInt(), rank);
  if (!d0 || !d1) return std::nullopt;
  if (rank > 0) std::swap(self[static_cast<size_t>(*d0)], self[static_cast<size_t>(*d1)]);
  return one(std::move(self));
}

std::optional<ShapeList> permute(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const Sizes dims = a[1].toIntVector();
  if (dims.size() != self.size()) return std::nullopt;
  std::vector<bool> seen(self.size(), false);
  Sizes out;
  for (int64_t d : dims) {
    const auto w = wrapDim(d, static_cast<int64_t>(self.size()));
    if (!w || self.empty() || seen[static_cast<size_t>(*w)]) return std::nullopt;
    seen[static_cast<size_t>(*w)] = true;
    out.push_back(self[static_cast<size_t>(*w)]);
  }
  return one(std::move(out));
}

/// The dim `a[dim_arg]` of a tensor of rank >= 1, wrapped.
std::optional<size_t> dimOf(const Sizes& self, const c10::IValue& dim) {
  if (self.empty()) return std::nullopt;
  const auto w = wrapDim(dim.toInt(), static_cast<int64_t>(self.size()));
  if (!w) return std::nullopt;
  return static_cast<size_t>(*w);
}

std::optional<Sizes> selectSizes(Sizes self, const c10::IValue& dim_arg, int64_t index) {
  const auto dim = dimOf(self, dim_arg);
  if (!dim || index < -self[*dim] || index >= self[*dim]) return std::nullopt;
  self.erase(self.begin() + static_cast<ptrdiff_t>(*dim));
  return self;
}

std::optional<ShapeList> select(const Stack& a) {
  auto sizes = selectSizes(sizesOf(a[0]), a[1], a[2].toInt());
  if (!sizes) return std::nullopt;
  return one(std::move(*sizes));
}

/// slice(dim, start, end, step) as eager clamps it; nullopt for an empty slice.
std::optional<Sizes> sliceSizes(Sizes self, const c10::IValue& dim_arg,
                                const c10::IValue& start_arg, const c10::IValue& end_arg,
                                const c10::IValue& step_arg) {
  const auto dim = dimOf(self, dim_arg);
  const int64_t step = step_arg.toInt();
  if (!dim || step <= 0) return std::nullopt;
  const SliceBounds bounds = sliceBounds(self[*dim], start_arg, end_arg, step);
  if (bounds.length == 0) return std::nullopt;
  self[*dim] = bounds.length;
  return self;
}

std::optional<ShapeList> slice(const Stack& a) {
  auto sizes = sliceSizes(sizesOf(a[0]), a[1], a[2], a[3], a[4]);
  if (!sizes) return std::nullopt;
  return one(std::move(*sizes));
}

std::optional<ShapeList> narrow(const Stack& a) {
  Sizes self = sizesOf(a[0]);
  const auto dim = dimOf(self, a[1]);
  if (!dim) return std::nullopt;
  int64_t start = a[2].toInt();
  const int64_t length = a[3].toInt();
  const int64_t size = self[*dim];
  if (start < -size || start > size) return std::nullopt;
  if (start < 0) start += size;
  if (length <= 0 || start > size - length) return std::nullopt;
  self[*dim] = length;
  return one(std::move(self));
}

/// The pieces of `self` along `dim` of these lengths (all > 0, summing to its size).
std::optional<ShapeList> pieces(const Sizes& self, size_t dim, const Sizes& lengths) {
  int64_t total = 0;
  ShapeList out;
  for (int64_t length : lengths) {
    if (length <= 0 || __builtin_add_overflow(total, length, &total)) return std::nullopt;
    Sizes piece = self;
    piece[dim] = length;
    out.push_back(std::move(piece));
  }
  if (total != self[dim]) return std::nullopt;
  return out;
}

std::optional<ShapeList> split(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const auto dim = dimOf(self, a[2]);
  const int64_t split_size = a[1].toInt();
  if (!dim || split_size <= 0) return std::nullopt;
  return pieces(self, *dim, splitLengths(self[*dim], split_size));
}

std::optional<ShapeList> splitWithSizes(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const auto dim = dimOf(self, a[2]);
  if (!dim) return std::nullopt;
  return pieces(self, *dim, a[1].toIntVector());
}

std::optional<ShapeList> unbind(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const auto dim = dimOf(self, a[1]);
  if (!dim) return std::nullopt;
  Sizes rest = self;
  rest.erase(rest.begin() + static_cast<ptrdiff_t>(*dim));
  return ShapeList(static_cast<size_t>(self[*dim]), rest);
}

std::optional<ShapeList> unsqueeze(const Stack& a) {
  Sizes self = sizesOf(a[0]);
  const int64_t rank = static_cast<int64_t>(self.size()) + 1;
  const int64_t dim = a[1].toInt();
  if (dim < -rank || dim >= rank) return std::nullopt;
  self.insert(self.begin() + (dim < 0 ? dim + rank : dim), 1);
  return one(std::move(self));
}

/// squeeze over the wrapped `dims` (every dim when `all`).
std::optional<ShapeList> squeezeDims(const Stack& a, const Sizes& dims, bool all) {
  const Sizes self = sizesOf(a[0]);
  std::vector<bool> chosen(std::max<size_t>(self.size(), 1), all);
  for (int64_t d : dims) {
    const auto w = wrapDim(d, static_cast<int64_t>(self.size()));
    if (!w || chosen[static_cast<size_t>(*w)]) return std::nullopt;
    chosen[static_cast<size_t>(*w)] = true;
  }
  Sizes out;
  for (size_t d = 0; d < self.size(); ++d) {
    if (!(chosen[d] && self[d] == 1)) out.push_back(self[d]);
  }
  return one(std::move(out));
}

std::optional<ShapeList> squeeze(const Stack& a) { return squeezeDims(a, {}, /*all=*/true); }
std::optional<ShapeList> squeezeDim(const Stack& a) {
  return squeezeDims(a, {a[1].toInt()}, /*all=*/false);
}
std::optional<ShapeList> squeezeDimList(const Stack& a) {
  return squeezeDims(a, a[1].toIntVector(), /*all=*/false);
}

std::optional<ShapeList> cat(const Stack& a) {
  const c10::List<at::Tensor> tensors = a[0].toTensorList();
  if (tensors.empty()) return std::nullopt;
  Sizes out = tensors.get(0).sizes().vec();
  const auto dim = dimOf(out, a[1]);
  if (!dim) return std::nullopt;
  out[*dim] = 0;
  for (const at::Tensor& t : tensors) {
    if (t.dim() != static_cast<int64_t>(out.size())) return std::nullopt;
    for (size_t d = 0; d < out.size(); ++d) {
      if (d != *dim && t.size(static_cast<int64_t>(d)) != out[d]) return std::nullopt;
    }
    out[*dim] += t.size(static_cast<int64_t>(*dim));
  }
  return one(std::move(out));
}

std::optional<ShapeList> stack(const Stack& a) {
  const c10::List<at::Tensor> tensors = a[0].toTensorList();
  if (tensors.empty()) return std::nullopt;
  Sizes out = tensors.get(0).sizes().vec();
  for (const at::Tensor& t : tensors) {
    if (t.sizes().vec() != out) return std::nullopt;
  }
  const int64_t rank = static_cast<int64_t>(out.size()) + 1;
  const int64_t dim = a[1].toInt();
  if (dim < -rank || dim >= rank) return std::nullopt;
  out.insert(out.begin() + (dim < 0 ? dim + rank : dim), static_cast<int64_t>(tensors.size()));
  return one(std::move(out));
}

/// copy(self, src): self's sizes, where src broadcasts to them.
std::optional<ShapeList> copy(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const Sizes src = sizesOf(a[1]);
  if (src.size() > self.size()) return std::nullopt;
  const size_t lead = self.size() - src.size();
  for (size_t d = 0; d < src.size(); ++d) {
    if (src[d] != 1 && src[d] != self[lead + d]) return std::nullopt;
  }
  return one(self);
}

/// The statistics' sizes of a LayerNorm of `input` over its trailing `normalized` dims, where
/// `weight` and `bias` (when defined) have the normalized shape.
std::optional<Sizes> layerNormStats(const Sizes& input, const Sizes& normalized,
                                    const c10::IValue& weight, const c10::IValue& bias) {
  if (normalized.empty() || normalized.size() > input.size()) return std::nullopt;
  const size_t axis = input.size() - normalized.size();
  if (!std::equal(normalized.begin(), normalized.end(), input.begin() + axis)) {
    return std::nullopt;
  }
  for (const c10::IValue* v : {&weight, &bias}) {
    if (v->isTensor() && v->toTensor().defined() && v->toTensor().sizes().vec() != normalized) {
      return std::nullopt;
    }
  }
  Sizes stats(input.begin(), input.begin() + static_cast<ptrdiff_t>(axis));
  stats.resize(input.size(), 1);
  return stats;
}

std::optional<ShapeList> layerNorm(const Stack& a) {
  const Sizes input = sizesOf(a[0]);
  auto stats = layerNormStats(input, a[1].toIntVector(), a[2], a[3]);
  if (!stats) return std::nullopt;
  return ShapeList{input, *stats, *stats};
}

bool defined(const c10::IValue& v) { return v.isTensor() && v.toTensor().defined(); }

std::optional<ShapeList> layerNormBackward(const Stack& a) {
  const Sizes input = sizesOf(a[1]);
  auto stats = layerNormStats(input, a[2].toIntVector(), a[5], a[6]);
  if (!stats || sizesOf(a[0]) != input || sizesOf(a[3]) != *stats || sizesOf(a[4]) != *stats) {
    return std::nullopt;
  }
  const std::vector<bool> mask = a[7].toBoolList().vec();
  ShapeList out;
  if (mask[0]) out.push_back(input);
  for (size_t k = 1; k < 3; ++k) {
    if (!mask[k]) continue;
    if (!defined(a[4 + k])) return std::nullopt;
    out.push_back(sizesOf(a[4 + k]));
  }
  return out;
}

std::optional<ShapeList> selectScatter(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const auto part = selectSizes(self, a[2], a[3].toInt());
  if (!part || *part != sizesOf(a[1])) return std::nullopt;
  return one(self);
}

std::optional<ShapeList> sliceScatter(const Stack& a) {
  const Sizes self = sizesOf(a[0]);
  const auto part = sliceSizes(self, a[2], a[3], a[4], a[5]);
  if (!part || *part != sizesOf(a[1])) return std::nullopt;
  return one(self);
}

}  // namespace

SliceBounds sliceBounds(int64_t size, const c10::IValue& start, const c10::IValue& end,
                        int64_t step) {
  int64_t first = start.isNone() ? 0 : start.toInt();
  int64_t last = end.isNone() ? std::numeric_limits<int64_t>::max() : end.toInt();
  if (first < 0) first += size;
  if (last < 0) last += size;
  first = std::clamp<int64_t>(first, 0, size);
  last = std::clamp<int64_t>(last, first, size);
  // 1 + (n - 1) / step: no overflow for a step near INT64_MAX.
  return {first, last == first ? 0 : 1 + (last - first - 1) / step};
}

std::vector<int64_t> splitLengths(int64_t size, int64_t split_size) {
  std::vector<int64_t> lengths;
  for (int64_t at = 0; at < size; at += split_size) {
    lengths.push_back(std::min(split_size, size - at));
  }
  if (lengths.empty()) lengths.push_back(0);
  return lengths;
}

ShapeFunction shapeFunctionOf(const std::string& op_name) {
  static const std::unordered_map<std::string, ShapeFunction> functions = {
      {"aten::view_copy", view},
      {"aten::_unsafe_view", view},
      {"aten::expand_copy", expand},
      {"aten::alias_copy", same},
      {"aten::detach_copy", same},
      {"aten::t_copy", t},
      {"aten::transpose_copy.int", transpose},
      {"aten::permute_copy", permute},
      {"aten::select_copy.int", select},
      {"aten::slice_copy.Tensor", slice},
      {"aten::narrow_copy", narrow},
      {"aten::split_copy.Tensor", split},
      {"aten::split_with_sizes_copy", splitWithSizes},
      {"aten::unbind_copy.int", unbind},
      {"aten::unsqueeze_copy", unsqueeze},
      {"aten::squeeze_copy", squeeze},
      {"aten::squeeze_copy.dim", squeezeDim},
      {"aten::squeeze_copy.dims", squeezeDimList},
      {"aten::cat", cat},
      {"aten::stack", stack},
      {"aten::copy", copy},
      {"aten::native_layer_norm", layerNorm},
      {"aten::native_layer_norm_backward", layerNormBackward},
      {"aten::select_scatter", selectScatter},
      {"aten::slice_scatter", sliceScatter},
  };
  auto it = functions.find(op_name);
  return it == functions.end() ? nullptr : it->second;
}

}  // namespace lazyfuse
