#include "backend/meta_layout.h"

#include <ATen/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <exception>
#include <set>
#include <string>

namespace lazyfuse {

// Note [Meta layout corrections]
// A lazy op's results take their sizes, dtypes and strides from its meta kernel. For most ops
// those are eager's, but some meta kernels in torch 2.11 are Python references that lay results
// out otherwise than eager's C++ kernels. The recorder corrects their Meta results where it takes
// them (CallRecorder::inferOnMeta for the trace, inferResultGeometry for the geometry a result
// reports when an input reports another), so the trace holds eager's layout and nothing is
// checked per recorded op beyond the op's traits:
// - kIterator: heaviside, logaddexp(2) and logical_and/or/xor are TensorIterator binary ops in
//   eager (a permuted input gives a permuted result); their Meta kernels return contiguous
//   results. The result is laid out by TensorIterator over the Meta arguments. Found by the
//   differential fuzzer (seed 70000): logical_or of a [1, 1] amin and a permuted comparison.
// - kContiguous: pow.Scalar (a number raised to a tensor: `2 ** t`; float_power calls it) is a
//   structured kernel whose meta function sets its output without strides, so eager's results
//   are contiguous whatever the exponent's layout; its Meta kernel follows the exponent's.
// - kLdexp: ldexp(x, y) is x * pow(2, y) in eager, so its result is laid out as TensorIterator
//   lays out x and a contiguous y, where its Meta kernel follows y. Found by the fuzzer: ldexp of
//   a transposed [4, 1] and a transposed [4, 3].
// - kAlpha: add.Tensor and sub.Tensor lay out their results as TensorIterator does in eager,
//   whatever `alpha` is. On Meta an alpha other than the integer 1 takes a Python reference that
//   scales `other` first, and the scaled copy's strides of size-1 dims decide the layout where
//   eager's TensorIterator ties: `t.add(u.unsqueeze(1), alpha=2)` of permuted operands came out
//   with dims 0 and 1 swapped. The meta cache keys alpha by kind only, so the first call decided
//   for every alpha. Such a call runs on Meta as it is (eager's errors and dtypes) and again with
//   alpha 1 for the outputs (layoutChangingAlpha). Found by the fuzzer (seeds 123337, 124005).
// - kConvolution: Note [Convolution layout]; the trace keeps Meta's layout there, and only the
//   reported geometry follows the backend eager would pick.
// Pinned by test_view_metadata.py::test_result_strides_like_eager.

MetaLayout metaLayoutOf(const c10::OperatorHandle& op) {
  static const std::set<std::string> iterator = {"aten::heaviside",  "aten::logaddexp",
                                                 "aten::logaddexp2", "aten::logical_and",
                                                 "aten::logical_or", "aten::logical_xor"};
  const c10::OperatorName& name = op.operator_name();
  const std::string& overload = name.overload_name;
  if (overload.empty() && iterator.count(name.name) > 0) return MetaLayout::kIterator;
  if (name.name == "aten::pow" && overload == "Scalar") return MetaLayout::kContiguous;
  if (name.name == "aten::ldexp" && overload == "Tensor") return MetaLayout::kLdexp;
  if ((name.name == "aten::add" || name.name == "aten::sub") && overload == "Tensor") {
    return MetaLayout::kAlpha;
  }
  if (overload.empty() &&
      (name.name == "aten::convolution" || name.name == "aten::convolution_backward")) {
    return MetaLayout::kConvolution;
  }
  return MetaLayout::kAsMeta;
}

std::optional<size_t> layoutChangingAlpha(MetaLayout layout, const torch::jit::Stack& args) {
  if (layout != MetaLayout::kAlpha || args.size() < 3 || !args[2].isScalar()) return std::nullopt;
  const c10::Scalar alpha = args[2].toScalar();
  if (alpha.isIntegral(/*includeBool=*/false) && alpha.toLong() == 1) return std::nullopt;
  return 2;
}

namespace {

/// The result TensorIterator makes of the tensors in `meta_args`, the second one taken
/// contiguous when `contiguous_second`.
at::Tensor iteratorResult(const torch::jit::Stack& meta_args, bool contiguous_second) {
  at::TensorIteratorConfig config;
  at::Tensor result;
  config.add_output(result).allow_cpu_scalars(true).promote_inputs_to_common_dtype(true);
  std::vector<at::Tensor> inputs;  // the iterator borrows them
  for (const c10::IValue& v : meta_args) {
    if (!v.isTensor()) continue;
    at::Tensor t = v.toTensor();
    if (contiguous_second && inputs.size() == 1) t = at::empty(t.sizes(), t.options());
    inputs.push_back(std::move(t));
  }
  for (const at::Tensor& t : inputs) config.add_const_input(t);
  at::TensorIterator iter = config.build();
  return iter.output();
}

}  // namespace

void correctMetaLayout(MetaLayout layout, const torch::jit::Stack& meta_args,
                       std::vector<at::Tensor>& results) {
  if (results.size() != 1 || !results[0].defined()) return;
  at::Tensor& result = results[0];
  if (layout == MetaLayout::kContiguous) {
    result = at::empty(result.sizes(), result.options());
    return;
  }
  if (layout != MetaLayout::kIterator && layout != MetaLayout::kLdexp) return;
  try {
    const at::Tensor laid_out = iteratorResult(meta_args, layout == MetaLayout::kLdexp);
    if (laid_out.sizes() != result.sizes()) return;
    result = at::empty_strided(result.sizes(), laid_out.strides(), result.options());
  } catch (const std::exception&) {
    // TensorIterator refused what the meta kernel accepted: Meta's layout is all we know.
  }
}

}  // namespace lazyfuse
