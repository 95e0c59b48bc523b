// torch.distributed collectives on lazy tensors, recorded into the trace (Note [Collectives on
// lazy tensors]).
#include "backend/collectives.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "lazy_ir/check.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Collectives on lazy tensors]
// torch.distributed's collectives (dist.all_reduce, broadcast, all_gather, all_gather_into_tensor,
// reduce_scatter_tensor, the process group calls DistributedDataParallel makes, and the
// functional collectives of torch.distributed._functional_collectives that DTensor uses) reach
// the dispatcher as c10d::allreduce_ & co. or _c10d_functional::all_reduce & co. On lazy tensors
// each is recorded, not run: a lazyfuse op per tensor (lazyfuse::all_reduce, broadcast,
// all_gather, reduce_scatter), with the process group's registered name and the reduction as
// constants, whose result is copied into the tensors the collective writes, through
// functionalization like any in-place write, so views of them (DDP's bucket views) see it. The
// copy and the recording happen below autograd, as eager's collectives have no derivative. The
// op has no lowering, so the plan runs it as an extern call on the hardware device's tensors:
// its kernel finds the process group by name (c10d::resolve_process_group), runs the collective
// on the group's backend for that device and waits for it. A DDP backward's gradient all-reduces
// are therefore steps of the step's one plan, not syncs of their own.
//
// Ranks must run a group's collectives in the same order, and a graph runs only what its
// targets need, in an order of its own. So each group has an ordering token, a lazy scalar: every
// recorded collective takes the group's token as an input and returns the next one, which
// becomes the group's token. A graph that runs collective k therefore runs every earlier one of
// its group first, in the order the program called them, whatever a rank reads; the token is a
// live tensor, so mark_step() runs every recorded collective, also those whose results nobody
// keeps. A collective lazyfuse does not record (send, recv, gather, reduce, all_to_all, the
// coalesced forms) first runs every group's recorded ones (syncs the tokens), then takes
// PyTorch's path. The work handle a recorded collective returns is complete at once: its result
// is the lazy value, which every reader waits for anyway. Graphs with collectives never run as
// asynchronous steps or CUDA graph replays (hasCollectives): both would reorder or repeat them.
// Pinned by test_distributed.py.

/// The op registry name of the process group `v` (a c10d.ProcessGroup).
std::string groupNameOf(const c10::IValue& v) {
  return v.toCustomClass<c10d::ProcessGroup>()->getGroupName();
}

int64_t groupSizeOf(const c10::IValue& v) {
  return v.toCustomClass<c10d::ProcessGroup>()->getSize();
}

int64_t checkedReduceOp(c10d::ReduceOp::RedOpType op) {
  LF_CHECK(op != c10d::ReduceOp::PREMUL_SUM,
           "the PREMUL_SUM reduction is not supported on lazy tensors");
  return static_cast<int64_t>(op);
}

int64_t reduceOpOf(const c10::IValue& v) {
  return checkedReduceOp(v.toCustomClass<c10d::ReduceOp>()->op_);
}

/// A functional collective's reduction ("sum", "avg", ...) as a ReduceOp.
int64_t reduceOpNamed(c10::string_view name) {
  static const std::pair<const char*, c10d::ReduceOp::RedOpType> kOps[] = {
      {"sum", c10d::ReduceOp::SUM},         {"avg", c10d::ReduceOp::AVG},
      {"product", c10d::ReduceOp::PRODUCT}, {"min", c10d::ReduceOp::MIN},
      {"max", c10d::ReduceOp::MAX},         {"band", c10d::ReduceOp::BAND},
      {"bor", c10d::ReduceOp::BOR},         {"bxor", c10d::ReduceOp::BXOR}};
  for (const auto& [text, op] : kOps) {
    if (name == text) return checkedReduceOp(op);
  }
  LF_CHECK(false, "the reduction '", name, "' is not supported on lazy tensors");
  return 0;
}

c10d::ReduceOp reduceOp(int64_t op) {
  return c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(op));
}

c10::intrusive_ptr<c10d::ProcessGroup> group(c10::string_view name) {
  return c10d::resolve_process_group(std::string(name));
}

// ---- the recorded ops' kernels on the hardware device, and on Meta ------------------------------

/// The next ordering token (Note [Collectives on lazy tensors]).
at::Tensor nextToken(const at::Tensor& token) { return token + 1; }

std::tuple<at::Tensor, at::Tensor> deviceAllReduce(const at::Tensor& input, const at::Tensor& token,
                                                   c10::string_view name, int64_t op) {
  std::vector<at::Tensor> tensors{input.clone(at::MemoryFormat::Contiguous)};
  c10d::AllreduceOptions options;
  options.reduceOp = reduceOp(op);
  group(name)->allreduce(tensors, options)->wait();
  return {tensors[0], nextToken(token)};
}

std::tuple<at::Tensor, at::Tensor> deviceBroadcast(const at::Tensor& input, const at::Tensor& token,
                                                   c10::string_view name, int64_t root) {
  std::vector<at::Tensor> tensors{input.clone(at::MemoryFormat::Contiguous)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  group(name)->broadcast(tensors, options)->wait();
  return {tensors[0], nextToken(token)};
}

std::vector<int64_t> gatheredSizes(const at::Tensor& input, int64_t world) {
  std::vector<int64_t> sizes{world};
  sizes.insert(sizes.end(), input.sizes().begin(), input.sizes().end());
  return sizes;
}

/// [world, *input.sizes()]: every rank's input, in rank order.
std::tuple<at::Tensor, at::Tensor> deviceAllGather(const at::Tensor& input, const at::Tensor& token,
                                                   c10::string_view name, int64_t world) {
  at::Tensor flat_in = input.contiguous().view({-1});
  at::Tensor out = at::empty({world * input.numel()}, input.options());
  group(name)->_allgather_base(out, flat_in)->wait();
  return {out.view(gatheredSizes(input, world)), nextToken(token)};
}

void checkScatterInput(const at::Tensor& input, int64_t world) {
  LF_CHECK(input.dim() >= 1 && input.size(0) == world, "lazyfuse::reduce_scatter takes [", world,
           ", ...], got ", input.sizes());
}

/// input [world, *rest] -> [*rest]: the reduction over ranks of every rank's slice at this rank.
std::tuple<at::Tensor, at::Tensor> deviceReduceScatter(const at::Tensor& input,
                                                       const at::Tensor& token,
                                                       c10::string_view name, int64_t op,
                                                       int64_t world) {
  checkScatterInput(input, world);
  at::Tensor flat_in = input.contiguous().view({-1});
  at::Tensor out = at::empty({input.numel() / world}, input.options());
  c10d::ReduceScatterOptions options;
  options.reduceOp = reduceOp(op);
  group(name)->_reduce_scatter_base(out, flat_in, options)->wait();
  return {out.view(input.sizes().slice(1)), nextToken(token)};
}

std::tuple<at::Tensor, at::Tensor> sameMeta(const at::Tensor& input, const at::Tensor& token,
                                            c10::string_view, int64_t) {
  return {at::empty_like(input, at::MemoryFormat::Contiguous), at::empty_like(token)};
}

std::tuple<at::Tensor, at::Tensor> allGatherMeta(const at::Tensor& input, const at::Tensor& token,
                                                 c10::string_view, int64_t world) {
  return {at::empty(gatheredSizes(input, world), input.options()), at::empty_like(token)};
}

std::tuple<at::Tensor, at::Tensor> reduceScatterMeta(const at::Tensor& input,
                                                     const at::Tensor& token, c10::string_view,
                                                     int64_t, int64_t world) {
  checkScatterInput(input, world);
  return {at::empty(input.sizes().slice(1), input.options()), at::empty_like(token)};
}

// ---- ordering tokens ----------------------------------------------------------------------------

/// Each group's ordering token (a lazy int64 scalar), by group name. Never destroyed: the lazy
/// tensors would outlive the library's state at exit.
struct Tokens {
  std::mutex mutex;
  std::map<std::string, at::Tensor> by_group;
};

Tokens& tokens() {
  static Tokens* const all = new Tokens();
  return *all;
}

/// lazyfuse::<name>(input, token of `group_name`, extra...), recorded on the lazy tensor `input`;
/// the group's token becomes the call's new one. Returns the result.
template <typename... Extra>
at::Tensor record(const char* name, const at::Tensor& input, const std::string& group_name,
                  Extra... extra) {
  static_assert(sizeof...(Extra) >= 1 && sizeof...(Extra) <= 2);
  using Fn =
      std::conditional_t<sizeof...(Extra) == 1,
                         std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                            c10::string_view, int64_t),
                         std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                            c10::string_view, int64_t, int64_t)>;
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
  Tokens& all = tokens();
  std::lock_guard<std::mutex> lock(all.mutex);
  at::Tensor& token = all.by_group[group_name];
  if (!token.defined()) {
    token = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(lazyDevice()));
  }
  auto [result, next] = op.call(input, token, group_name, extra...);
  token = next;
  return result;
}

/// Runs every group's recorded collectives: before a collective lazyfuse does not record.
void flushTokens() {
  std::vector<at::Tensor> pending;
  {
    Tokens& all = tokens();
    std::lock_guard<std::mutex> lock(all.mutex);
    for (const auto& [name, token] : all.by_group) pending.push_back(token);
  }
  for (const at::Tensor& token : pending) materialize(token);
}

void requireLazy(const at::Tensor& t, const char* what) {
  LF_CHECK(isLazy(t), what, " mixes lazy tensors with tensors on ", t.device(),
           ": move them to the lazy device first");
}

void requireLike(const at::Tensor& t, const at::Tensor& like, const char* what) {
  requireLazy(t, what);
  LF_CHECK(t.scalar_type() == like.scalar_type(), what, ": a ", t.scalar_type(), " tensor for a ",
           like.scalar_type(), " input");
}

// ---- c10d's ops on lazy tensors ----------------------------------------------------------------

/// A work handle of a recorded collective: complete, its future holding the written tensors.
class RecordedWork final : public c10d::Work {
 public:
  explicit RecordedWork(c10::IValue result)
      : future_(c10::make_intrusive<c10::ivalue::Future>(result.type())) {
    future_->markCompleted(std::move(result));
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
  std::vector<at::Tensor> result() override {
    const c10::IValue& value = future_->constValue();
    if (value.isTensorList()) return value.toTensorVector();
    return value.isTensor() ? std::vector<at::Tensor>{value.toTensor()} : std::vector<at::Tensor>{};
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

c10::IValue workOf(c10::IValue result) {
  c10::intrusive_ptr<c10d::Work> work = c10::make_intrusive<RecordedWork>(std::move(result));
  return c10::IValue(std::move(work));
}

void c10dAllreduce(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* s) {
  auto args = torch::jit::pop(*s, op.schema().arguments().size());
  LF_CHECK(args[3].isNone(), "a sparse all_reduce is not supported on lazy tensors");
  std::vector<at::Tensor> tensors = args[0].toTensorVector();
  const std::string name = groupNameOf(args[1]);
  const int64_t reduce = reduceOpOf(args[2]);
  at::AutoDispatchBelowADInplaceOrView below_autograd;  // eager's collectives have no derivative
  for (at::Tensor& t : tensors) {
    requireLazy(t, "all_reduce");
    t.copy_(record("lazyfuse::all_reduce", t, name, reduce));
  }
  c10::IValue result(tensors);
  torch::jit::push(*s, result, workOf(result));
}

void c10dBroadcast(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* s) {
  auto args = torch::jit::pop(*s, op.schema().arguments().size());
  std::vector<at::Tensor> tensors = args[0].toTensorVector();
  const std::string name = groupNameOf(args[1]);
  LF_CHECK(args[3].toInt() == 0, "broadcast of lazy tensors takes one tensor per rank");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  for (at::Tensor& t : tensors) {
    requireLazy(t, "broadcast");
    t.copy_(record("lazyfuse::broadcast", t, name, args[2].toInt()));
  }
  c10::IValue result(tensors);
  torch::jit::push(*s, result, workOf(result));
}

void c10dAllgather(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* s) {
  auto args = torch::jit::pop(*s, op.schema().arguments().size());
  const c10::IValue outputs = args[0];
  const std::vector<at::Tensor> inputs = args[1].toTensorVector();
  const std::string name = groupNameOf(args[2]);
  const int64_t world = groupSizeOf(args[2]);
  const auto& lists = outputs.toListRef();
  LF_CHECK(lists.size() == inputs.size(), "all_gather: ", lists.size(), " output lists for ",
           inputs.size(), " inputs");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireLazy(inputs[i], "all_gather");
    const std::vector<at::Tensor> out = lists[i].toTensorVector();
    LF_CHECK(static_cast<int64_t>(out.size()) == world, "all_gather: ", out.size(),
             " outputs for a group of ", world);
    for (const at::Tensor& o : out) {
      requireLike(o, inputs[i], "all_gather");
      LF_CHECK(o.sizes() == inputs[i].sizes(), "all_gather: an output of ", o.sizes(),
               " for an input of ", inputs[i].sizes());
    }
    const at::Tensor gathered = record("lazyfuse::all_gather", inputs[i], name, world);
    for (int64_t k = 0; k < world; ++k) {
      at::Tensor o = out[static_cast<size_t>(k)];
      o.copy_(gathered.select(0, k));
    }
  }
  torch::jit::push(*s, outputs, workOf(outputs));
}

void c10dAllgatherBase(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* s) {
  auto args = torch::jit::pop(*s, op.schema().arguments().size());
  at::Tensor output = args[0].toTensor();
  const at::Tensor input = args[1].toTensor();
  requireLazy(input, "all_gather_into_tensor");
  requireLike(output, input, "all_gather_into_tensor");
  const int64_t world = groupSizeOf(args[2]);
  LF_CHECK(output.numel() == world * input.numel(), "all_gather_into_tensor: an output of ",
           output.numel(), " elements for ", world, " inputs of ", input.numel());
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const at::Tensor gathered = record("lazyfuse::all_gather", input, groupNameOf(args[2]), world);
  output.copy_(gathered.reshape(output.sizes()));
  torch::jit::push(*s, output, workOf(output));
}

void c10dReduceScatterBase(const c10::OperatorHandle& op, c10::DispatchKeySet,
                           torch::jit::Stack* s) {
  auto args = torch::jit::pop(*s, op.schema().arguments().size());
  at::Tensor output = args[0].toTensor();
  const at::Tensor input = args[1].toTensor();
  requireLazy(input, "reduce_scatter_tensor");
  requireLike(output, input, "reduce_scatter_tensor");
  const int64_t world = groupSizeOf(args[2]);
  LF_CHECK(input.numel() == world * output.numel(), "reduce_scatter_tensor: an input of ",
           input.numel(), " elements for ", world, " outputs of ", output.numel());
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const at::Tensor reduced =
      record("lazyfuse::reduce_scatter", input.reshape({world, output.numel()}),
             groupNameOf(args[2]), reduceOpOf(args[3]), world);
  output.copy_(reduced.reshape(output.sizes()));
  torch::jit::push(*s, output, workOf(output));
}

/// A c10d op lazyfuse does not record: the recorded collectives first, then PyTorch's path.
void c10dFlushFirst(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* s) {
  flushTokens();
  pytorchFunctionalizeKernel(op).callBoxed(op, keys, s);
}

/// A c10d op that takes lists of tensor lists, which the eager fallback cannot hand to the
/// process group: refused before anything is sent.
void c10dRefuse(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().name(),
                              " is not supported on lazy tensors: call it on CPU tensors "
                              "(tensor.cpu()) and move the results back");
}

// ---- _c10d_functional's ops on lazy tensors -----------------------------------------------------

at::Tensor functionalAllReduce(const at::Tensor& input, c10::string_view reduce_op,
                               c10::string_view group_name) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return record("lazyfuse::all_reduce", input, std::string(group_name), reduceOpNamed(reduce_op));
}

at::Tensor functionalAllGather(const at::Tensor& input, int64_t group_size,
                               c10::string_view group_name) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<int64_t> sizes = input.sizes().vec();
  LF_CHECK(!sizes.empty(), "all_gather_into_tensor of a 0-dim tensor");
  sizes[0] *= group_size;
  return record("lazyfuse::all_gather", input, std::string(group_name), group_size).reshape(sizes);
}

at::Tensor functionalReduceScatter(const at::Tensor& input, c10::string_view reduce_op,
                                   int64_t group_size, c10::string_view group_name) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  LF_CHECK(input.dim() >= 1 && input.size(0) % group_size == 0,
           "reduce_scatter_tensor: ", input.sizes(), " does not split into ", group_size);
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes[0] /= group_size;
  sizes.insert(sizes.begin(), group_size);
  return record("lazyfuse::reduce_scatter", input.reshape(sizes), std::string(group_name),
                reduceOpNamed(reduce_op), group_size);
}

at::Tensor functionalBroadcast(const at::Tensor& input, int64_t src, c10::string_view group_name) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return record("lazyfuse::broadcast", input, std::string(group_name), src);
}

/// A recorded collective's result is its value already.
at::Tensor functionalWait(const at::Tensor& tensor) { return tensor; }

}  // namespace

TORCH_LIBRARY_FRAGMENT(lazyfuse, m) {
  m.def("all_reduce(Tensor input, Tensor token, str group, int reduce_op) -> (Tensor, Tensor)");
  m.def("broadcast(Tensor input, Tensor token, str group, int root) -> (Tensor, Tensor)");
  m.def("all_gather(Tensor input, Tensor token, str group, int world_size) -> (Tensor, Tensor)");
  m.def(
      "reduce_scatter(Tensor input, Tensor token, str group, int reduce_op, int world_size) -> "
      "(Tensor, Tensor)");
}

// The hardware devices' kernels: the same code, the process group picks its backend by device.
#define LAZYFUSE_COLLECTIVE_KERNELS(m)             \
  m.impl("all_reduce", TORCH_FN(deviceAllReduce)); \
  m.impl("broadcast", TORCH_FN(deviceBroadcast));  \
  m.impl("all_gather", TORCH_FN(deviceAllGather)); \
  m.impl("reduce_scatter", TORCH_FN(deviceReduceScatter))

TORCH_LIBRARY_IMPL(lazyfuse, CPU, m) { LAZYFUSE_COLLECTIVE_KERNELS(m); }
TORCH_LIBRARY_IMPL(lazyfuse, CUDA, m) { LAZYFUSE_COLLECTIVE_KERNELS(m); }

TORCH_LIBRARY_IMPL(lazyfuse, Meta, m) {
  m.impl("all_reduce", TORCH_FN(sameMeta));
  m.impl("broadcast", TORCH_FN(sameMeta));
  m.impl("all_gather", TORCH_FN(allGatherMeta));
  m.impl("reduce_scatter", TORCH_FN(reduceScatterMeta));
}

bool hasCollectives(const Graph& graph) {
  for (const NodePtr& node : graph.nodes()) {
    if (node->kind() != OpKind::kAten) continue;
    const std::string& name = node->aten().name;
    if (name == "lazyfuse::all_reduce" || name == "lazyfuse::broadcast" ||
        name == "lazyfuse::all_gather" || name == "lazyfuse::reduce_scatter") {
      return true;
    }
  }
  return false;
}

namespace {

using C10dKernel = void(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack*);

template <C10dKernel* Kernel>
void implOnLazy(torch::Library& lib, const char* name) {
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!op) return;  // a torch built without distributed
  implLazyOnFunctionalize(lib, *op, c10::KernelFunction::makeFromBoxedFunction<Kernel>());
}

template <typename Fn>
void implFunctional(torch::Library& lib, const char* name, Fn* fn) {
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!op) return;
  implLazyOnFunctionalize(lib, *op, c10::KernelFunction::makeFromUnboxedRuntimeFunction(fn));
}

void registerCollectiveKernels() {
  static auto c10d_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "c10d", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  implOnLazy<&c10dAllreduce>(*c10d_lib, "c10d::allreduce_");
  implOnLazy<&c10dBroadcast>(*c10d_lib, "c10d::broadcast_");
  implOnLazy<&c10dAllgather>(*c10d_lib, "c10d::allgather_");
  implOnLazy<&c10dAllgatherBase>(*c10d_lib, "c10d::_allgather_base_");
  implOnLazy<&c10dReduceScatterBase>(*c10d_lib, "c10d::_reduce_scatter_base_");
  for (const char* name :
       {"c10d::send", "c10d::recv_", "c10d::recv_any_source_", "c10d::reduce_",
        "c10d::alltoall_base_", "c10d::allreduce_coalesced_", "c10d::allgather_coalesced_",
        "c10d::allgather_into_tensor_coalesced_", "c10d::reduce_scatter_tensor_coalesced_",
        "c10d::barrier", "c10d::monitored_barrier_"}) {
    implOnLazy<&c10dFlushFirst>(*c10d_lib, name);
  }
  for (const char* name :
       {"c10d::gather_", "c10d::scatter_", "c10d::reduce_scatter_", "c10d::alltoall_"}) {
    implOnLazy<&c10dRefuse>(*c10d_lib, name);
  }
  static auto functional_lib =
      std::make_unique<torch::Library>(torch::Library::IMPL, "_c10d_functional",
                                       c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  implFunctional(*functional_lib, "_c10d_functional::all_reduce", &functionalAllReduce);
  implFunctional(*functional_lib, "_c10d_functional::all_gather_into_tensor", &functionalAllGather);
  implFunctional(*functional_lib, "_c10d_functional::reduce_scatter_tensor",
                 &functionalReduceScatter);
  implFunctional(*functional_lib, "_c10d_functional::broadcast", &functionalBroadcast);
  implFunctional(*functional_lib, "_c10d_functional::wait_tensor", &functionalWait);
  registerFsdpKernels();
}

const bool registered = (registerCollectiveKernels(), true);

}  // namespace

}  // namespace lazyfuse
