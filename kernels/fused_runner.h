#pragma once

// Runs one fused-kernel step of a plan on the CPU: allocates its outputs as the plan laid them
// out, gathers buffer addresses and parameters, and splits its points across torch's threads.

#include "kernels/cpu_compiler.h"
#include "lowering/execution_plan.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <vector>

namespace lazyfuse {

class Target;

/// What a plan run may donate (Note [Donated buffers]), and what it did.
struct DonationState {
  /// Per node position: for device data, whether nothing outside the graph and its sync targets
  /// reaches its node (other values need no such check).
  std::vector<uint8_t> free_data;
  int64_t donated = 0;       // outputs written into donated memory
  int64_t donated_data = 0;  // of those, into device data's memory
  /// With `record_taken`, the donations taken, in order (a captured run's, for replay).
  bool record_taken = false;
  std::vector<std::pair<const FusedKernel*, const Donation*>> taken;
  /// With `record_taken`, the region writes that wrote into device data in place.
  std::vector<const RegionWrite*> regions_taken;
  /// The tensors of device data that a region write wrote into in place (Note [Region writes]).
  std::vector<const c10::TensorImpl*> written_data;

  /// Whether `tensor` is one of written_data: its memory is a program's tensor's.
  bool wroteInto(const at::Tensor& tensor) const {
    return std::find(written_data.begin(), written_data.end(), tensor.unsafeGetTensorImpl()) !=
           written_data.end();
  }
};

/// Graph values by node position and output index, and the plan's temporaries.
struct PlanValues {
  std::vector<std::vector<at::Tensor>> nodes;
  std::vector<at::Tensor> temps;
  DonationState* donation = nullptr;  // null: nothing is donated
  const Target* target = nullptr;     // allocates kernel outputs (Note [Targets])
};

/// Whether `tensor`, a plan value that is not device data, may be overwritten as `meta` in place:
/// donation is on, only the plan's slot holds it (and, when `donation` says a region write wrote
/// it into device data's memory, that device data's node), only it its storage, and it has
/// `meta`'s layout (the run-time check of Note [Donated buffers]).
bool writableInPlace(const at::Tensor& tensor, const TensorMeta& meta,
                     const DonationState& donation);

/// Whether the device data at node `position` may be overwritten as `meta` in place: the run
/// donates (`values.donation`), nothing outside the graph reaches its node, only the plan holds
/// its tensor, and its storage is held by it alone or by it and the device data of `sharers`,
/// each held by the plan alone (the run-time check of Note [Donated buffers]).
bool dataWritableInPlace(uint32_t position, const TensorMeta& meta,
                         const std::vector<uint32_t>& sharers, const Graph& graph,
                         const PlanValues& values);

/// The slot of `b`'s value (or temporary) in `values`.
at::Tensor& bindingSlot(const BufferBinding& b, const Graph& graph, PlanValues& values);

/// Memory for output buffer `buffer` of `fused`: the first donor it may take (Note [Donated
/// buffers]) when nothing but the plan holds that donor's memory, else a new tensor on `device`
/// (on the CPU, from the buffer pool: Note [Buffer pool]).
at::Tensor outputBuffer(const FusedKernel& fused, size_t buffer, const Graph& graph,
                        PlanValues& values, c10::Device device);

/// True when donation `d` of `fused` may be taken now: nothing but the plan holds the input
/// (Note [Donated buffers]).
bool mayDonate(const FusedKernel& fused, const Donation& d, const Graph& graph, PlanValues& values,
               c10::Device device);

/// Runs `fn` over `fused`'s domain, split across torch's threads; `arguments` (the constants a
/// generic function takes: Note [Shape-generic kernels]) follow the kernel's own parameters.
void runFusedKernel(const FusedKernel& fused, CpuKernelFn fn, const Graph& graph,
                    PlanValues& values, c10::ArrayRef<int64_t> arguments = {});

/// Runs a row group's function `fn` (Note [CPU row groups]): the buffers and then the parameters
/// of `stats` and of `epilogue`, one after the other, the rows split across torch's threads.
void runFusedRowGroup(const FusedKernel& stats, const FusedKernel& epilogue, CpuKernelFn fn,
                      const Graph& graph, PlanValues& values,
                      c10::ArrayRef<int64_t> arguments = {});

}  // namespace lazyfuse
