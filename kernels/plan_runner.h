#pragma once

// Runs an ExecutionPlan on the hardware device, step by step: fused kernels and kernel batches
// through the target's compiled kernels (Note [Targets]), extern steps by calling the node's
// ATen kernel through the dispatcher with real tensors (so they run wherever those tensors live,
// CPU or CUDA), and strided views.

#include "kernels/cpu_compiler.h"
#include "kernels/fused_runner.h"
#include "kernels/target.h"
#include "lowering/execution_plan.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

/// Whether `op`'s CUDA kernel refuses a CPU scalar tensor where the lazy device, like eager's CPU,
/// takes one: clamp's Tensor bounds are device-checked, unlike TensorIterator operands.
bool refusesCpuScalars(const c10::OperatorHandle& op);

/// The CPU scalar tensors of `stack` as 0-dim tensors on the device of its first other tensor
/// (none on the CPU): a fill kernel, which a CUDA graph captures with the value (as it bakes a
/// host scalar's). For the calls refusesCpuScalars names, at run time and on stand-ins.
void moveCpuScalars(torch::jit::Stack& stack);

/// Whether region write `write` cannot raise once it has begun writing, with `index` its
/// index_copy_'s index: a copy_, or an index_copy_ whose every index lies within the region's
/// dimension (ATen checks them one by one as it writes). On a GPU an index out of range is a
/// device-side assert, which no rerun survives: nothing to check (Note [Region writes]).
bool writeCannotRaise(const RegionWrite& write, const at::Tensor& index);

/// Runs `plan` over the device-data buffers and parameters of `graph` (which must hash as the
/// plan's graph did), with `kernels[i]` the compiled plan.kernels[i], and returns the graph
/// outputs, each laid out as its recorded metadata says.
std::vector<at::Tensor> runPlan(const ExecutionPlan& plan, const Graph& graph,
                                const std::vector<CpuKernelFn>& kernels = {});

/// runPlan with the fused kernel steps and kernel batches run by `kernels` (which may be null
/// for a plan without fused kernels); a batch the target cannot launch as one runs member by
/// member. With `donation`, kernel outputs may be written into the memory of inputs it frees
/// (Note [Donated buffers]), and it counts them. With `data`, the tensors defined in it (by node
/// position) replace the buffers of those device data.
std::vector<at::Tensor> runPlan(const ExecutionPlan& plan, const Graph& graph,
                                const CompiledKernels* kernels, DonationState* donation = nullptr,
                                const std::vector<at::Tensor>* data = nullptr);

/// Runs fused kernel `index` of a plan.
using KernelLauncher = std::function<void(size_t index, const Graph& graph, PlanValues& values)>;
/// Runs kernel batch `index` of a plan as one launch (see Note [Kernel batches]).
using BatchLauncher = std::function<void(size_t index, const Graph& graph, PlanValues& values)>;

/// runPlan with the fused kernel steps run by `launch` and the batches by `launch_batch` (or
/// member by member when it is empty): for callers that bring their own CPU functions (kernel
/// outputs are allocated by the CPU target).
std::vector<at::Tensor> runPlan(const ExecutionPlan& plan, const Graph& graph,
                                const KernelLauncher& launch,
                                const BatchLauncher& launch_batch = {},
                                DonationState* donation = nullptr,
                                const std::vector<at::Tensor>* data = nullptr);

/// The steps of the last plan that ran to its end in this process, with the host time of each
/// (Note [Plan steps in the profiler]); no labels before any plan ran.
struct PlanProfile {
  std::shared_ptr<const std::vector<std::string>> labels;
  std::vector<int64_t> step_ns;
};
PlanProfile lastPlanProfile();

/// A tensor with exactly `meta`'s sizes and strides holding `tensor`'s values; `tensor` itself
/// when its layout already matches.
at::Tensor withLayout(const at::Tensor& tensor, const TensorMeta& meta);

}  // namespace lazyfuse
