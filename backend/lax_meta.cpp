#include "backend/lax_meta.h"

#include "backend/detail/stand_ins.h"
#include "backend/device.h"
#include "backend/lazy_tensor.h"

#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdint>
#include <set>
#include <string>

namespace lazyfuse {
namespace {

// Note [Lax meta kernels]
// The recorder and the write checks find a user's mistake with the op's meta kernel, asking the
// CPU kernel only when the meta kernel raised, or for ops whose checks do not depend on sizes
// (Note [Eager's errors]). Some of PyTorch's meta kernels (Python ones, mostly) skip checks of
// sizes, dtypes and arguments that the CPU kernel makes, and these ops' checks depend on sizes
// (one-element stand-ins would raise errors of their own), so their mistakes surfaced at the sync,
// or with another message:
//   convolution        negative padding, non-positive stride or dilation; an input of another
//                      dtype than the weight (test_errors.py::test_dtype_error_at_op)
//   avg_pool3d         divisor_override=0
//   bucketize          boundaries of more than one dim
//   complex            real and imag of different dtypes; out= of another dtype
//   index_add          source of a shape other than self's outside dim
//   index_select       out= of another dtype than self
//   masked_scatter     a uint8 mask
//   as_strided_scatter a view beyond the input's storage
//   multinomial        its meta kernel's messages differ; out= of another dtype than int64
// For these ops (and their in-place and out= variants), on a meta-cache or write-check miss, the
// call runs on the CPU on stand-ins with the lazy tensors' sizes and dtypes, when they hold at
// most kMaxProbeElements in all: cheap, and the calls these errors come from are small. Larger
// calls are not checked there, and raise at the sync. Stand-in values are ones, or zeros for
// integer and bool tensors: a valid index and an empty mask, so that a valid call passes (ones
// make a valid multinomial distribution). A random op draws from a generator of its own.
// Value-dependent checks (an index out of range) still raise at the sync.
// Pinned by test_out_checks.py::test_lax_meta_*.
constexpr int64_t kMaxProbeElements = int64_t{1} << 16;

at::Tensor valueStandIn(const at::Tensor& t) {
  if (!isLazy(t)) return t;
  const auto options = at::TensorOptions().dtype(t.scalar_type());
  if (c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
    return at::zeros(t.sizes(), options);
  }
  return at::ones(t.sizes(), options);
}

int64_t lazyElements(const torch::jit::Stack& args) {
  int64_t n = 0;
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) { n += t.defined() && isLazy(t) ? t.numel() : 0; });
  }
  return n;
}

}  // namespace

bool isLaxMeta(const c10::OperatorHandle& op) {
  static const std::set<std::string> ops = {
      "aten::convolution",    "aten::avg_pool3d",         "aten::bucketize",
      "aten::complex",        "aten::index_add",          "aten::index_select",
      "aten::masked_scatter", "aten::as_strided_scatter", "aten::multinomial"};
  const std::string& name = op.schema().name();
  if (ops.count(name) > 0) return true;
  return name.back() == '_' && ops.count(name.substr(0, name.size() - 1)) > 0;
}

void checkLaxMetaOnCpu(const c10::OperatorHandle& op, const OpTraits& traits,
                       const torch::jit::Stack& args) {
  if (!isLaxMeta(op) || lazyElements(args) > kMaxProbeElements) return;
  torch::jit::Stack cpu;
  for (const c10::IValue& v : args) cpu.push_back(standInArg(v, c10::kCPU, valueStandIn));
  if (!givePrivateGenerators(op, traits, cpu)) return;
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard quiet(&drop);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  op.callBoxed(cpu);
}

}  // namespace lazyfuse
