// Lowerings of native_layer_norm and its backward as reductions plus pointwise nodes: each element
// computed in the input's compute type (float for float, half and bfloat16), as eager's kernels
// compute, and the statistics accumulated in double.

#include "lowering/lower_ops.h"

namespace lazyfuse {
namespace {

using c10::ScalarType;
using V = KValue;
constexpr ScalarType kAcc = ScalarType::Double;

struct NormDims {
  std::vector<int64_t> inner;  // the normalized dimensions
  std::vector<int64_t> outer;  // the others
  double count = 1;            // elements normalized together
};

NormDims normDims(const std::vector<int64_t>& sizes, size_t normalized_rank) {
  NormDims dims;
  const size_t rank = sizes.size();
  for (size_t d = 0; d < rank; ++d) {
    if (d + normalized_rank >= rank) {
      dims.inner.push_back(d);
      dims.count *= static_cast<double>(sizes[d]);
    } else {
      dims.outer.push_back(d);
    }
  }
  return dims;
}

ReduceFn toAcc() {
  return [](LoopContext& c, V v) { return c.ops().cast(v, kAcc); };
}

ReduceFn divideBy(double n) {
  return [n](LoopContext& c, V s) { return c.ops().binary("div", s, c.ops().constant(n, kAcc)); };
}

LoopId castTo(LoweringCall& call, LoopId id, ScalarType dtype) {
  return call.combine({id}, call.loop(id).sizes, dtype,
                      [](KernelBuilder&, const std::vector<V>& v) { return v[0]; });
}

/// native_layer_norm(input, normalized_shape, weight, bias, eps): out, mean, rstd.
bool lowerLayerNorm(LoweringCall& call) {
  if (call.out(1).numel() == 0) return false;
  const LoopId x = *call.tensor("input");
  const std::vector<int64_t> sizes = call.loop(x).sizes;
  const NormDims dims = normDims(sizes, call.constant("normalized_shape").toIntVector().size());
  const double eps = call.constant("eps").toDouble();
  const ScalarType t = computeType(call.out(0).dtype);
  LoopId mean =
      call.reduce(x, dims.inner, true, ReduceKind::kSum, kAcc, kAcc, toAcc(), divideBy(dims.count));
  LoopId sq = call.combine({x, mean}, sizes, t, [t](KernelBuilder& o, const std::vector<V>& v) {
    V d = o.binary("sub", o.cast(v[0], t), o.cast(v[1], t));
    return o.binary("mul", d, d);
  });
  LoopId var = call.reduce(sq, dims.inner, true, ReduceKind::kSum, kAcc, kAcc, toAcc(),
                           divideBy(dims.count));
  LoopId rstd = call.combine(
      {var}, call.loop(var).sizes, kAcc, [eps](KernelBuilder& o, const std::vector<V>& v) {
        return o.unary("rsqrt", o.binary("add", v[0], o.constant(eps, kAcc)));
      });
  std::vector<LoopId> in = {x, mean, rstd};
  const auto weight = call.tensor("weight"), bias = call.tensor("bias");
  if (weight) in.push_back(*weight);
  if (bias) in.push_back(*bias);
  const bool has_w = weight.has_value(), has_b = bias.has_value();
  LoopId out =
      call.combine(in, sizes, call.out(0).dtype, [=](KernelBuilder& o, const std::vector<V>& v) {
        V y = o.binary("mul", o.binary("sub", o.cast(v[0], t), o.cast(v[1], t)), o.cast(v[2], t));
        size_t next = 3;
        if (has_w) y = o.binary("mul", y, o.cast(v[next++], t));
        if (has_b) y = o.binary("add", y, o.cast(v[next], t));
        return y;
      });
  call.outputs = {out, castTo(call, mean, call.out(1).dtype),
                  castTo(call, rstd, call.out(2).dtype)};
  return true;
}

/// native_layer_norm_backward: the gradients of input, weight and bias that output_mask asks for.
bool lowerLayerNormBackward(LoweringCall& call) {
  const LoopId dy = *call.tensor("grad_out"), x = *call.tensor("input");
  const LoopId mean = *call.tensor("mean"), rstd = *call.tensor("rstd");
  const auto weight = call.tensor("weight");
  const std::vector<int64_t> sizes = call.loop(x).sizes;
  const NormDims dims = normDims(sizes, call.constant("normalized_shape").toIntVector().size());
  // Per element in the input's compute type (float for float, half and bfloat16), as eager's
  // kernel computes; the sums accumulate in double.
  const ScalarType t = computeType(call.loop(x).dtype);
  LoopId xhat =
      call.combine({x, mean, rstd}, sizes, t, [t](KernelBuilder& o, const std::vector<V>& v) {
        return o.binary("mul", o.binary("sub", o.cast(v[0], t), o.cast(v[1], t)), o.cast(v[2], t));
      });
  std::vector<LoopId> g_in = {dy};
  if (weight) g_in.push_back(*weight);
  LoopId g = call.combine(g_in, sizes, t, [t](KernelBuilder& o, const std::vector<V>& v) {
    V r = o.cast(v[0], t);
    return v.size() > 1 ? o.binary("mul", r, o.cast(v[1], t)) : r;
  });
  std::vector<LoopId> outputs;
  size_t next_out = 0;
  const auto& returns = call.attrs().returns;
  auto wanted = [&](size_t r) { return returns.at(r).kind == ReturnKind::kTensor; };
  if (wanted(0)) {
    LoopId gx = call.combine({g, xhat}, sizes, t, [](KernelBuilder& o, const std::vector<V>& v) {
      return o.binary("mul", v[0], v[1]);
    });
    LoopId s1 = call.reduce(g, dims.inner, true, ReduceKind::kSum, kAcc, kAcc, toAcc(),
                            divideBy(dims.count));
    LoopId s2 = call.reduce(gx, dims.inner, true, ReduceKind::kSum, kAcc, kAcc, toAcc(),
                            divideBy(dims.count));
    outputs.push_back(call.combine({g, xhat, s1, s2, rstd}, sizes, call.out(next_out++).dtype,
                                   [t](KernelBuilder& o, const std::vector<V>& v) {
                                     V inner =
                                         o.binary("sub", o.binary("sub", v[0], o.cast(v[2], t)),
                                                  o.binary("mul", v[1], o.cast(v[3], t)));
                                     return o.binary("mul", o.cast(v[4], t), inner);
                                   }));
  }
  if (wanted(1)) {
    LoopId dyx = call.combine({dy, xhat}, sizes, t, [t](KernelBuilder& o, const std::vector<V>& v) {
      return o.binary("mul", o.cast(v[0], t), v[1]);
    });
    outputs.push_back(reduceMaybeSplit(call, dyx, dims.outer, false, ReduceKind::kSum, kAcc,
                                       call.out(next_out++).dtype, toAcc(), nullptr));
  }
  if (wanted(2)) {
    outputs.push_back(reduceMaybeSplit(call, dy, dims.outer, false, ReduceKind::kSum, kAcc,
                                       call.out(next_out++).dtype, toAcc(), nullptr));
  }
  call.outputs = outputs;
  return true;
}

}  // namespace

void registerNormalizationLowerings(LoweringRegistry& r) {
  r.add(OpClass::kReduction, {"aten::native_layer_norm"}, lowerLayerNorm);
  r.add(OpClass::kReduction, {"aten::native_layer_norm_backward"}, lowerLayerNormBackward);
}

}  // namespace lazyfuse
