#include "backend/write_functionalization.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/op_traits.h"
#include "lazy_ir/check.h"
#include "lowering/lowerings.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/polygamma.h>
#include <ATen/ops/polygamma_ops.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace lazyfuse {
namespace {

namespace F = at::functionalization::impl;

bool isOutVariant(const c10::OperatorHandle& op) {
  const OpTraits& traits = traitsOf(op);
  bool any = false;
  for (size_t i = 0; i < traits.written.size(); ++i) {
    if (!traits.written[i]) continue;
    if (!op.schema().arguments()[i].is_out()) return false;
    any = true;
  }
  return any;
}

/// The tensors of `v` (a tensor, a Tensor[] or a Tensor?[]) appended to `out`, in order.
void appendTensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) out.push_back(v.toTensor());
  if (!v.isList()) return;
  for (const c10::IValue& e : v.toListRef()) {
    if (e.isTensor()) out.push_back(e.toTensor());
  }
}

bool sharesStorage(const at::Tensor& a, const at::Tensor& b) {
  return a.has_storage() && b.has_storage() && a.is_alias_of(b);
}

}  // namespace

// Note [Composite out= kernels under functionalization]
// Some CompositeImplicitAutograd out= kernels do not write their `out` when it is a functional
// tensor: linalg_matrix_rank.out takes PyTorch's path for tensor subclasses
// (isTensorSubclassLike counts the Functionalize key) and rebinds its `Tensor& out` to a new
// result, `result = at::sum(S > tol, -1)`. Called through the dispatcher the caller's tensor is
// then left as resize_output left it (uninitialized), and a boxed caller gets the new tensor back
// instead of `out`. So where such a kernel runs on lazy tensors (AutogradLazy outside
// InferenceMode, Functionalize inside it: Note [Decomposing on Functionalize]) it runs under
// decomposeKernel, which finds each returned tensor that is neither the out= argument its schema
// returns nor shares its storage (a view of it, written in place), resizes the argument to it as
// resize_output would, copies it in (functionalized, as any copy_), and returns the argument, as
// an unboxed caller of the op always gets. Pinned by test_out_variants.py::
// test_composite_out_writes_out_like_eager.
void decomposeKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpTraits& traits = traitsOf(op);
  const bool returns_written = std::any_of(traits.returns_arg.begin(), traits.returns_arg.end(),
                                           [](int arg) { return arg >= 0; });
  if (!returns_written) {
    return op.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, *stack);
  }
  const size_t num_args = traits.written.size();
  std::vector<c10::IValue> args(stack->end() - num_args, stack->end());
  op.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, *stack);
  const size_t num_returns = op.schema().returns().size();
  for (size_t r = 0; r < num_returns && r < traits.returns_arg.size(); ++r) {
    const int arg = traits.returns_arg[r];
    c10::IValue& returned = (*stack)[stack->size() - num_returns + r];
    if (arg < 0 || !returned.isTensor() || !args[arg].isTensor()) continue;
    const at::Tensor& result = returned.toTensor();
    const at::Tensor& out = args[arg].toTensor();
    if (!out.defined() || !result.defined() || result.is_same(out) || sharesStorage(result, out)) {
      continue;
    }
    if (out.sizes() != result.sizes()) out.resize_(result.sizes());
    out.copy_(result);
    returned = out;
  }
}

bool registerOutDecomposition(const c10::OperatorHandle& op, torch::Library& autograd_lib) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::Autograd) ||
      op.hasKernelForDispatchKey(c10::DispatchKey::AutogradLazy) || !isOutVariant(op)) {
    return false;
  }
  autograd_lib.impl(implName(op.operator_name()).c_str(),
                    torch::CppFunction::makeFromBoxedFunction<&decomposeKernel>());
  return true;
}

namespace {

// Note [Out= ops that write other arguments too]
// PyTorch's generated functionalization kernel of an out= op that also writes arguments that are
// not out= (_native_batch_norm_legit.out writes running_mean and running_var, rrelu_with_noise.out
// its noise, _fused_adam.out its state) hands the results of the functional op to the written
// arguments in argument order, but the functional op returns the out= results first and the new
// values of the other written arguments after them: running_mean got the normalized input,
// `out` the new running_var. So for lazy tensors those ops get this kernel on Functionalize, which
// calls the same functional op (`<name>_functional`, or `<name>` with the same overload) and hands
// out= arguments the first results and the other written arguments the rest, in order. Other
// callers keep PyTorch's kernel. Pinned by
// test_out_variants.py::test_out_and_written_stats_like_eager.
/// The functional op of each out= op, by schema of the out= op; filled at load, read-only after.
using OutFunctionals = std::unordered_map<const c10::FunctionSchema*, c10::OperatorHandle>;

OutFunctionals& outFunctionals() {
  static OutFunctionals* instance = new OutFunctionals();
  return *instance;
}

bool writesOtherArguments(const c10::OperatorHandle& op) {
  const OpTraits& traits = traitsOf(op);
  bool out = false;
  bool other = false;
  for (size_t i = 0; i < traits.written.size(); ++i) {
    if (!traits.written[i]) continue;
    (op.schema().arguments()[i].is_out() ? out : other) = true;
  }
  return out && other;
}

// Note [Fused optimizer steps]
// torch.optim's `fused=True` steps call in-place ops that write lists of tensors:
// `_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, `_fused_adagrad_` (and their `tensor_lr`
// overloads). PyTorch's generated functionalization of those fails whenever a written list is
// empty, as Adam's max_exp_avg_sqs is without amsgrad ("mutating a non-functional tensor with a
// functional tensor is not allowed": an empty list counts as not functional; torch.func's own
// functionalize fails the same way on CPU tensors). For lazy tensors they take the kernel of Note
// [Out= ops that write other arguments too], which has no such check: it calls the functional
// op of the same name without the trailing underscore (`_fused_adam`, which returns the new
// value of every written list, in argument order) and hands each written tensor its result.
// The functional op is recorded as one node (`_fused_sgd` and `_fused_adagrad` have no Meta
// kernel: their outputs mirror their list arguments, backend/call_recorder.cpp); Adam's, AdamW's
// and SGD's are lowered to fused kernels (lowering/lower_optimizers.cpp), the others (Adagrad, a
// step with grad_scale or a tensor lr) run ATen's kernel. torch.optim accepts lazy parameters
// for `fused=True` through Note [Optimizers default to foreach on lazy]. Pinned by
// test_fused_optimizers.py.

/// Whether `op` is a fused optimizer step (Note [Fused optimizer steps]).
bool isFusedOptimizerStep(const c10::OperatorHandle& op) {
  const std::string& name = op.schema().name();
  return isFusedOptimizerOp(name) && name.back() == '_';
}

/// The functional op whose arguments are `op`'s arguments but the out= ones, which writes
/// nothing, and returns one value per written argument of `op`.
std::optional<c10::OperatorHandle> findFunctional(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  std::string overload = schema.overload_name();
  const std::string suffix = "_out";
  if (overload == "out") {
    overload.clear();
  } else if (overload.size() > suffix.size() &&
             overload.compare(overload.size() - suffix.size(), suffix.size(), suffix) == 0) {
    overload.resize(overload.size() - suffix.size());
  }
  std::vector<const c10::Argument*> inputs;
  size_t num_written = 0;
  for (const c10::Argument& arg : schema.arguments()) {
    if (!arg.is_out()) inputs.push_back(&arg);
    if (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) ++num_written;
  }
  std::vector<std::string> names{schema.name() + "_functional", schema.name()};
  if (isFusedOptimizerStep(op)) names = {schema.name().substr(0, schema.name().size() - 1)};
  for (const std::string& name : names) {
    auto functional = c10::Dispatcher::singleton().findOp({name, overload});
    if (!functional) continue;
    const c10::FunctionSchema& f = functional->schema();
    bool same = f.arguments().size() == inputs.size() && f.returns().size() == num_written;
    for (size_t i = 0; same && i < inputs.size(); ++i) {
      const c10::AliasInfo* alias = f.arguments()[i].alias_info();
      same =
          f.arguments()[i].name() == inputs[i]->name() && (alias == nullptr || !alias->isWrite());
    }
    if (same) return functional;
  }
  return std::nullopt;
}

/// `v` with its functional tensors brought up to date and unwrapped.
c10::IValue unwrapped(const c10::IValue& v) {
  auto unwrap = [](const at::Tensor& t) {
    if (!t.defined() || !F::isFunctionalTensor(t)) return t;
    F::sync(t);
    return F::from_functional_tensor(t);
  };
  if (v.isTensor()) return unwrap(v.toTensor());
  if (!v.isTensorList()) return v;
  const c10::List<at::Tensor> tensors = v.toTensorList();
  c10::List<at::Tensor> list;
  list.reserve(tensors.size());
  for (const at::Tensor& t : tensors) list.push_back(unwrap(t));
  return list;
}

/// See Note [Out= ops that write other arguments too].
void functionalizeOutKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            torch::jit::Stack* stack) {
  const c10::OperatorHandle& functional_op = outFunctionals().at(&op.schema());
  const OpTraits& traits = traitsOf(op);
  const std::vector<c10::Argument>& schema_args = op.schema().arguments();
  const size_t num_args = schema_args.size();
  torch::jit::Stack args(stack->end() - num_args, stack->end());
  std::vector<at::Tensor> written;  // as the functional op returns them: out= ones first
  for (bool out : {true, false}) {
    for (size_t i = 0; i < num_args; ++i) {
      if (traits.written[i] && schema_args[i].is_out() == out) appendTensors(args[i], written);
    }
  }
  bool lazy = false;
  bool functional = true;
  for (const at::Tensor& t : written) {
    lazy = lazy || isLazy(t);
    functional = functional && F::isFunctionalTensor(t);
  }
  if (!lazy || !functional) return pytorchFunctionalizeKernel(op).callBoxed(op, keys, stack);
  torch::jit::Stack call;
  for (size_t i = 0; i < num_args; ++i) {
    if (!schema_args[i].is_out()) call.push_back(unwrapped(args[i]));
  }
  {
    at::AutoDispatchSkipFunctionalize skip;
    functional_op.callBoxed(&call);
  }
  std::vector<at::Tensor> results;
  for (const c10::IValue& v : call) appendTensors(v, results);
  LF_INTERNAL_ASSERT(results.size() == written.size(), functional_op.operator_name(), " returned ",
                     results.size(), " tensors for ", written.size());
  // A fused optimizer step writes its gradients only to unscale them: without grad_scale they
  // keep their values, and are not handed the copies (Note [Fused optimizer steps]).
  size_t keep_from = 0, keep_to = 0;
  const std::optional<size_t> scale = op.schema().argumentIndexWithName("grad_scale");
  const std::optional<size_t> grads = op.schema().argumentIndexWithName("grads");
  if (isFusedOptimizerStep(op) && scale && grads && args.at(*scale).isNone() &&
      args.at(*grads).isTensorList()) {
    for (size_t i = 0; i < *grads; ++i) {
      if (!traits.written[i]) continue;
      keep_from += args[i].isTensorList() ? args[i].toTensorList().size() : 1;
    }
    keep_to = keep_from + args[*grads].toTensorList().size();
  }
  for (size_t k = 0; k < written.size(); ++k) {
    if (k >= keep_from && k < keep_to) continue;
    F::replace_(written[k], results[k]);
    F::commit_update(written[k]);
    F::sync(written[k]);
  }
  torch::jit::drop(*stack, num_args);
  for (int arg : traits.returns_arg) stack->push_back(args.at(arg));
}

}  // namespace

bool registerOutFunctionalization(const c10::OperatorHandle& op,
                                  torch::Library& functionalize_lib) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize) ||
      !(writesOtherArguments(op) || isFusedOptimizerStep(op))) {
    return false;
  }
  std::optional<c10::OperatorHandle> functional = findFunctional(op);
  if (!functional) return false;
  outFunctionals().emplace(&op.schema(), *functional);
  implLazyOnFunctionalize(functionalize_lib, op,
                          c10::KernelFunction::makeFromBoxedFunction<&functionalizeOutKernel>());
  return true;
}

// Note [Functionalizing polygamma_]
// PyTorch generates no functionalization kernel for polygamma_: its functional op takes `n` first,
// polygamma(int n, Tensor self), so the code generator finds no group for it, and the
// Functionalize fallback refuses the in-place op ("Found a custom (non-ATen) operator whose output
// has alias annotations"). This kernel is the one the generator would write: run polygamma_ on
// Meta for eager's errors, record polygamma below functionalization and make it self's new value;
// a self that is not a functional tensor gets polygamma_ itself below functionalization. Only
// calls on lazy tensors get it (Note [Lazy-only kernels on Functionalize]).
// Pinned by test_out_variants.py::test_polygamma_inplace_like_eager.
at::Tensor& functionalizePolygamma(at::Tensor& self, int64_t n) {
  if (!F::isFunctionalTensor(self)) {
    at::AutoDispatchSkipFunctionalize skip;
    at::_ops::polygamma_::call(self, n);
    return self;
  }
  {
    // The keys PyTorch's generated kernels leave out of their Meta run: under
    // torch.func.functionalize the Meta tensor must not become a functional one either.
    const c10::DispatchKeySet meta_excluded =
        c10::functorch_transforms_ks | c10::autograd_dispatch_keyset_with_ADInplaceOrView |
        c10::DispatchKeySet({c10::DispatchKey::Functionalize,
                             c10::DispatchKey::FuncTorchDynamicLayerBackMode,
                             c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
                             c10::DispatchKey::Python, c10::DispatchKey::PreDispatch});
    c10::impl::ExcludeDispatchKeyGuard on_meta_only(meta_excluded);
    at::Tensor self_meta =
        at::empty_strided(self.sizes(), self.strides(), self.options().device(c10::kMeta));
    at::_ops::polygamma_::call(self_meta, n);
  }
  F::sync(self);
  at::Tensor result;
  {
    at::AutoDispatchSkipFunctionalize skip;
    result = at::_ops::polygamma::call(n, F::from_functional_tensor(self));
  }
  F::replace_(self, result);
  F::commit_update(self);
  F::sync(self);
  return self;
}

namespace {

/// TensorImpl keeps its dispatch key set protected and offers no setter; a pointer to that member
/// can be named through a class derived from TensorImpl.
struct KeySetAccess : c10::TensorImpl {
  static c10::DispatchKeySet c10::TensorImpl::*member() { return &KeySetAccess::key_set_; }
};

}  // namespace

// Note [set_data across InferenceMode]
// Eager lets `x.data = t` give a normal tensor an inference tensor's data (t made in
// InferenceMode) and the other way round: set_data's check, _has_compatible_shallow_copy_type,
// finds dense tensors of one backend compatible whatever their autograd keys, and x then takes
// t's metadata, key set included (a normal x becomes an inference tensor). Lazy tensors are
// FunctionalTensorWrappers, which the check finds compatible only when their key sets are equal,
// and FunctionalTensorWrapper::shallow_copy_from asserts the same: a normal and an inference
// tensor differ in their autograd keys, and `x.data = t` raised "incompatible tensor type". So
// this kernel of the check, for two lazy functional tensors whose key sets differ only in
// autograd keys, gives `self` the key set of `from` before it answers yes, which is the key set
// eager's set_data leaves it with, and set_data's shallow_copy_from then passes its assert and
// copies the rest as it does for any two lazy tensors. (nn.Module._apply asks the same question
// before `param.data = applied`; with torch.__future__'s overwrite_module_params_on_conversion
// it replaces the parameter instead, whose key set we then changed for nothing.) Pinned by
// test_out_variants.py::test_set_data_across_inference_mode_like_eager.
bool hasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  const c10::DispatchKeySet autograd_keys = c10::autograd_dispatch_keyset_with_ADInplaceOrView;
  const bool differ_in_autograd_keys_only =
      isLazy(self) && isLazy(from) && F::isFunctionalTensor(self) && F::isFunctionalTensor(from) &&
      self.key_set() != from.key_set() &&
      (self.key_set() - autograd_keys) == (from.key_set() - autograd_keys);
  if (differ_in_autograd_keys_only) impl->*KeySetAccess::member() = from.key_set();
  return impl->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace lazyfuse
