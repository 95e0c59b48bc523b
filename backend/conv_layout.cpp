#include "backend/conv_layout.h"

#include "backend/device.h"

#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty.h>

#include <exception>
#include <optional>
#include <utility>

namespace lazyfuse {
namespace {

// Note [Convolution layout]
// Eager's convolution picks the layout of its result by the backend it runs on: the CPU's oneDNN
// kernel and cuDNN give a channels_last result for a channels_last input (cuDNN for a
// channels_last weight too), the slow kernels a contiguous one. The meta kernel of convolution
// always gives a contiguous result, so a conv2d of a channels_last lazy tensor reported contiguous
// strides, and so did every op after it. PyTorch's fake tensors (torch.compile) make the same
// correction in torch/_subclasses/fake_impls.py: ask the backend selection what eager would run
// and lay out the result (and convolution_backward's grad_input and grad_weight) in the memory
// format that backend uses, except for 1-d convolutions, left as Meta gives them. We do it with
// stand-ins on the hardware device that carry the arguments' reported sizes and strides over an
// empty storage: selecting the backend reads no data. The trace keeps Meta's strides; the result
// reports the backend's (see Note [View geometry]). Pinned by test_layouts.py::
// test_channels_last_strides_like_eager.

enum class ConvKind { kNone, kForward, kBackward };

ConvKind convKind(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  if (!name.overload_name.empty()) return ConvKind::kNone;
  if (name.name == "aten::convolution") return ConvKind::kForward;
  if (name.name == "aten::convolution_backward") return ConvKind::kBackward;
  return ConvKind::kNone;
}

/// A tensor on the hardware device with `meta`'s dtype, sizes and strides over an empty storage:
/// only its metadata may be read.
at::Tensor hardwareStandIn(const at::Tensor& meta) {
  at::Tensor t = at::empty({0}, meta.options().device(hardwareDevice()));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(meta.sizes(), meta.strides());
  return t;
}

/// The memory format of the backend eager would run the call with on the hardware device.
std::optional<c10::MemoryFormat> backendMemoryFormat(ConvKind kind, const torch::jit::Stack& a) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
  // convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
  //                      transposed, output_padding, groups, output_mask)
  const size_t first = kind == ConvKind::kForward ? 0 : 1;
  const at::Tensor input = hardwareStandIn(a[first].toTensor());
  const at::Tensor weight = hardwareStandIn(a[first + 1].toTensor());
  if (weight.dim() == 3) return std::nullopt;
  std::optional<at::Tensor> bias;
  std::optional<c10::SymIntArrayRef> bias_sizes;
  if (kind == ConvKind::kForward && a[2].isTensor() && a[2].toTensor().defined()) {
    bias = hardwareStandIn(a[2].toTensor());
  }
  std::vector<c10::SymInt> bias_sizes_storage;
  if (kind == ConvKind::kBackward && !a[3].isNone()) {
    bias_sizes_storage = a[3].toSymIntVector();
    bias_sizes = c10::SymIntArrayRef(bias_sizes_storage);
  }
  const size_t p = kind == ConvKind::kForward ? 3 : 4;  // stride
  const std::vector<c10::SymInt> stride = a[p].toSymIntVector();
  const std::vector<c10::SymInt> padding = a[p + 1].toSymIntVector();
  const std::vector<c10::SymInt> dilation = a[p + 2].toSymIntVector();
  const std::vector<c10::SymInt> output_padding = a[p + 4].toSymIntVector();
  at::native::ConvBackend backend = at::native::select_conv_backend(
      input, weight, bias, stride, padding, dilation, a[p + 3].toBool(), output_padding,
      a[p + 5].toSymInt(), bias_sizes);
  return at::native::_determine_backend_memory_format(input, weight, backend);
}

void relayout(at::Tensor& t, c10::MemoryFormat format) {
  if (t.defined()) t = at::empty(t.sizes(), t.options().memory_format(format));
}

}  // namespace

void applyConvolutionLayout(const c10::OperatorHandle& op, const torch::jit::Stack& meta_args,
                            std::vector<at::Tensor>& results) {
  const ConvKind kind = convKind(op);
  if (kind == ConvKind::kNone) return;
  std::vector<at::Tensor> laid_out = results;
  try {
    std::optional<c10::MemoryFormat> format = backendMemoryFormat(kind, meta_args);
    if (!format) return;
    // convolution_backward: (grad_input, grad_weight, grad_bias); grad_bias keeps Meta's layout.
    const size_t count = kind == ConvKind::kForward ? 1 : 2;
    for (size_t k = 0; k < count && k < laid_out.size(); ++k) relayout(laid_out[k], *format);
  } catch (const std::exception&) {
    return;  // the recorder's meta inference accepted the call: Meta's layout is all we know
  }
  results = std::move(laid_out);
}

}  // namespace lazyfuse
