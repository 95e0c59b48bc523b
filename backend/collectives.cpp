// torch.distributed collectives on lazy tensors, recorded into the trace (Note [Collectives on
// lazy tensors]).
#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/lazy_tensor.h"
#include "lazy_ir/check.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Collectives on lazy tensors]
// torch.distributed's collectives (dist.all_reduce, broadcast, all_gather, all_gather_into_tensor,
// reduce_scatter_tensor, and the process group calls DistributedDataParallel makes) reach the
// dispatcher as c10d::allreduce_ & co. On lazy tensors each is recorded, not run: a lazyfuse op
// per tensor (lazyfuse::all_reduce, broadcast, all_gather, reduce_scatter: functional, with the
// process group's registered name and the reduction as constants), whose result is copied into
// the tensors the collective writes, through functionalization like any in-place write, so views
// of them (DDP's bucket views) see it. The op has no lowering, so the plan runs it as an extern
// call on the hardware device's tensors, in the graph's order among the other steps: its kernel
// finds the process group by name (c10d::resolve_process_group), runs the collective on the
// group's backend for that device (gloo on the CPU, NCCL on a GPU) and waits for it. A gradient
// bucket's all-reduce is therefore one step of the backward's plan, not a sync of its own.
//
// The work handle the call returns is complete: the collective's result is the lazy value, which
// every reader waits for anyway. Ranks must sync the same graphs in the same order, as the same
// SPMD program does (a rank that alone reads a tensor waits for the other ranks' collectives);
// mark_step() on every rank after each step is the usual way. Collectives this file does not
// record (reduce, gather, scatter, all_to_all, the coalesced and list forms of reduce_scatter)
// run through the eager fallback, which syncs their inputs first.
// Pinned by test_distributed.py.

/// The op registry name of the process group `v` (a c10d.ProcessGroup).
std::string groupNameOf(const c10::IValue& v) {
  return v.toCustomClass<c10d::ProcessGroup>()->getGroupName();
}

int64_t groupSizeOf(const c10::IValue& v) {
  return v.toCustomClass<c10d::ProcessGroup>()->getSize();
}

int64_t reduceOpOf(const c10::IValue& v) {
  const c10d::ReduceOp::RedOpType op = v.toCustomClass<c10d::ReduceOp>()->op_;
  LF_CHECK(op != c10d::ReduceOp::PREMUL_SUM,
           "the PREMUL_SUM reduction is not supported on lazy tensors");
  return static_cast<int64_t>(op);
}

c10d::ReduceOp reduceOp(int64_t op) {
  return c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(op));
}

c10::intrusive_ptr<c10d::ProcessGroup> group(c10::string_view name) {
  return c10d::resolve_process_group(std::string(name));
}

// ---- the recorded ops' kernels on the hardware device, and on Meta ------------------------------

at::Tensor deviceAllReduce(const at::Tensor& input, c10::string_view name, int64_t op) {
  std::vector<at::Tensor> tensors{input.clone(at::MemoryFormat::Contiguous)};
  c10d::AllreduceOptions options;
  options.reduceOp = reduceOp(op);
  group(name)->allreduce(tensors, options)->wait();
  return tensors[0];
}

at::Tensor deviceBroadcast(const at::Tensor& input, c10::string_view name, int64_t root) {
  std::vector<at::Tensor> tensors{input.clone(at::MemoryFormat::Contiguous)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  group(name)->broadcast(tensors, options)->wait();
  return tensors[0];
}

std::vector<int64_t> gatheredSizes(const at::Tensor& input, int64_t world) {
  std::vector<int64_t> sizes{world};
  sizes.insert(sizes.end(), input.sizes().begin(), input.sizes().end());
  return sizes;
}

/// [world, *input.sizes()]: every rank's input, in rank order.
at::Tensor deviceAllGather(const at::Tensor& input, c10::string_view name, int64_t world) {
  at::Tensor flat_in = input.contiguous().view({-1});
  at::Tensor out = at::empty({world * input.numel()}, input.options());
  group(name)->_allgather_base(out, flat_in)->wait();
  return out.view(gatheredSizes(input, world));
}

/// input [world, *rest] -> [*rest]: the reduction over ranks of every rank's slice at this rank.
at::Tensor deviceReduceScatter(const at::Tensor& input, c10::string_view name, int64_t op,
                               int64_t world) {
  LF_CHECK(input.dim() >= 1 && input.size(0) == world, "lazyfuse::reduce_scatter takes [", world,
           ", ...], got ", input.sizes());
  at::Tensor flat_in = input.contiguous().view({-1});
  at::Tensor out = at::empty({input.numel() / world}, input.options());
  c10d::ReduceScatterOptions options;
  options.reduceOp = reduceOp(op);
  group(name)->_reduce_scatter_base(out, flat_in, options)->wait();
  return out.view(input.sizes().slice(1));
}

at::Tensor sameMeta(const at::Tensor& input, c10::string_view, int64_t) {
  return at::empty_like(input, at::MemoryFormat::Contiguous);
}

at::Tensor allGatherMeta(const at::Tensor& input, c10::string_view, int64_t world) {
  return at::empty(gatheredSizes(input, world), input.options());
}

at::Tensor reduceScatterMeta(const at::Tensor& input, c10::string_view, int64_t, int64_t world) {
  LF_CHECK(input.dim() >= 1 && input.size(0) == world, "lazyfuse::reduce_scatter takes [", world,
           ", ...], got ", input.sizes());
  return at::empty(input.sizes().slice(1), input.options());
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

/// lazyfuse::<name>(input, group, extra...), called on a lazy tensor: recorded.
template <typename... Extra>
at::Tensor record(const char* name, const at::Tensor& input, const std::string& group_name,
                  Extra... extra) {
  static_assert(sizeof...(Extra) >= 1 && sizeof...(Extra) <= 2);
  using Fn = std::conditional_t<sizeof...(Extra) == 1,
                                at::Tensor(const at::Tensor&, c10::string_view, int64_t),
                                at::Tensor(const at::Tensor&, c10::string_view, int64_t, int64_t)>;
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
  return op.call(input, group_name, extra...);
}

void requireLazy(const at::Tensor& t, const char* what) {
  LF_CHECK(isLazy(t), what, " mixes lazy tensors with tensors on ", t.device(),
           ": move them to the lazy device first");
}

void c10dAllreduce(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* s) {
  auto args = torch::jit::pop(*s, op.schema().arguments().size());
  LF_CHECK(args[3].isNone(), "a sparse all_reduce is not supported on lazy tensors");
  std::vector<at::Tensor> tensors = args[0].toTensorVector();
  const std::string name = groupNameOf(args[1]);
  const int64_t reduce = reduceOpOf(args[2]);
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
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireLazy(inputs[i], "all_gather");
    const std::vector<at::Tensor> out = lists[i].toTensorVector();
    LF_CHECK(static_cast<int64_t>(out.size()) == world, "all_gather: ", out.size(),
             " outputs for a group of ", world);
    const at::Tensor gathered = record("lazyfuse::all_gather", inputs[i], name, world);
    for (int64_t k = 0; k < world; ++k) {
      at::Tensor o = out[static_cast<size_t>(k)];
      requireLazy(o, "all_gather");
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
  requireLazy(output, "all_gather_into_tensor");
  const int64_t world = groupSizeOf(args[2]);
  LF_CHECK(output.numel() == world * input.numel(), "all_gather_into_tensor: an output of ",
           output.numel(), " elements for ", world, " inputs of ", input.numel());
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
  requireLazy(output, "reduce_scatter_tensor");
  const int64_t world = groupSizeOf(args[2]);
  LF_CHECK(input.numel() == world * output.numel(), "reduce_scatter_tensor: an input of ",
           input.numel(), " elements for ", world, " outputs of ", output.numel());
  const at::Tensor reduced =
      record("lazyfuse::reduce_scatter", input.reshape({world, output.numel()}),
             groupNameOf(args[2]), reduceOpOf(args[3]), world);
  output.copy_(reduced.reshape(output.sizes()));
  torch::jit::push(*s, output, workOf(output));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(lazyfuse, m) {
  m.def("all_reduce(Tensor input, str group, int reduce_op) -> Tensor");
  m.def("broadcast(Tensor input, str group, int root) -> Tensor");
  m.def("all_gather(Tensor input, str group, int world_size) -> Tensor");
  m.def("reduce_scatter(Tensor input, str group, int reduce_op, int world_size) -> Tensor");
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

namespace {

using C10dKernel = void(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack*);

template <C10dKernel* Kernel>
void implOnLazy(torch::Library& lib, const char* name) {
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!op) return;  // a torch built without distributed
  implLazyOnFunctionalize(lib, *op, c10::KernelFunction::makeFromBoxedFunction<Kernel>());
}

void registerCollectiveKernels() {
  static auto c10d_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "c10d", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  implOnLazy<&c10dAllreduce>(*c10d_lib, "c10d::allreduce_");
  implOnLazy<&c10dBroadcast>(*c10d_lib, "c10d::broadcast_");
  implOnLazy<&c10dAllgather>(*c10d_lib, "c10d::allgather_");
  implOnLazy<&c10dAllgatherBase>(*c10d_lib, "c10d::_allgather_base_");
  implOnLazy<&c10dReduceScatterBase>(*c10d_lib, "c10d::_reduce_scatter_base_");
}

const bool registered = (registerCollectiveKernels(), true);

}  // namespace

}  // namespace lazyfuse
