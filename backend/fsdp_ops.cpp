// FSDP2's own ops on lazy tensors: see Note [FSDP2's copy ops on lazy tensors].
#include "backend/collectives.h"

#include "backend/view_kernels.h"
#include "lazy_ir/check.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_chunk_cat.h>
#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/split_with_sizes_copy.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <vector>

namespace lazyfuse {
namespace {

// Note [FSDP2's copy ops on lazy tensors]
// FSDP2 (torch.distributed.fsdp.fully_shard) copies parameters into and out of its all-gather
// buffers with three ops of its own library, defined in Python when FSDP2 is imported:
// fsdp::all_gather_copy_in, fsdp::split_with_sizes_copy and fsdp::chunk_cat. Each has kernels
// for the CPU, CUDA and a few more devices, each a short composition of ATen ops, but none that
// functionalization can take: two write into their `out` arguments (a Tensor(a!)[] list, which
// PyTorch's functionalization fallback refuses), the third writes through a view of its second
// argument. On lazy tensors they run here, on AutogradLazy (above functionalization: only
// tensors of the Lazy backend reach that key), as the same ATen ops, which functionalization and
// the recorder take like any others; so the all-gathers, the copies and the reduce-scatters of a
// step are recorded into its trace in order (Note [Collectives on lazy tensors]). The kernels are
// boxed and registered by name only: the ops need not exist when lazyfuse loads (FSDP2 defines
// them when imported), and no schema of ours could disagree with theirs. Under InferenceMode,
// which skips the autograd keys, the calls still reach functionalization and fail there.

/// A SymInt argument FSDP2 passes as a concrete int (view_kernels' intOf reads it).
int64_t concreteInt(const c10::IValue& value) {
  const std::optional<int64_t> v = intOf(value);
  TORCH_CHECK(v.has_value(), "FSDP2's copy ops on lazy tensors take concrete sizes");
  return *v;
}

std::vector<int64_t> concreteInts(const c10::IValue& value) {
  std::vector<int64_t> ints;
  for (const c10::IValue& element : value.toListRef()) ints.push_back(concreteInt(element));
  return ints;
}

/// all_gather_copy_in(Tensor[] inputs, Tensor output, SymInt[] split_sizes, SymInt numel,
/// SymInt rank) -> (Tensor, Tensor): copies the inputs, one after the other, into this rank's
/// slice of the all-gather output; returns that slice and the output.
void allGatherCopyIn(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 5);
  const std::vector<at::Tensor> inputs = args[0].toTensorVector();
  at::Tensor output = args[1].toTensor();
  const std::vector<int64_t> split_sizes = concreteInts(args[2]);
  const int64_t numel = concreteInt(args[3]);
  const int64_t rank = concreteInt(args[4]);
  torch::jit::drop(*stack, 5);
  at::Tensor input = output.narrow(0, numel * rank, numel);
  {
    c10::AutoGradMode no_grad(false);
    at::_foreach_copy_(input.split_with_sizes(split_sizes), inputs);
  }
  torch::jit::push(*stack, std::move(input), std::move(output));
}

/// split_with_sizes_copy(Tensor all_gather_output, SymInt[] split_sizes, int dim=0, *,
/// Tensor(a!)[] out) -> ()
void splitWithSizesCopy(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 4);
  const at::Tensor source = args[0].toTensor();
  const std::vector<int64_t> split_sizes = concreteInts(args[1]);
  const int64_t dim = args[2].toInt();
  const std::vector<at::Tensor> out = args[3].toTensorVector();
  torch::jit::drop(*stack, 4);
  at::split_with_sizes_copy_out(out, source, split_sizes, dim);
}

/// chunk_cat(Tensor[] tensors, int dim, int num_chunks, *, Tensor(a!) out) -> ()
void chunkCat(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 4);
  const std::vector<at::Tensor> tensors = args[0].toTensorVector();
  const int64_t dim = args[1].toInt();
  const int64_t num_chunks = args[2].toInt();
  at::Tensor out = args[3].toTensor();
  torch::jit::drop(*stack, 4);
  at::_chunk_cat_out(out, tensors, dim, num_chunks);
}

}  // namespace

void registerFsdpKernels() {
  static auto fsdp_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "fsdp", c10::DispatchKey::AutogradLazy, __FILE__, __LINE__);
  fsdp_lib->impl("all_gather_copy_in",
                 torch::CppFunction::makeFromBoxedFunction<&allGatherCopyIn>());
  fsdp_lib->impl("split_with_sizes_copy",
                 torch::CppFunction::makeFromBoxedFunction<&splitWithSizesCopy>());
  fsdp_lib->impl("chunk_cat", torch::CppFunction::makeFromBoxedFunction<&chunkCat>());
}

}  // namespace lazyfuse
