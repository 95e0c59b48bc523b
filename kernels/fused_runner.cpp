#include "kernels/fused_runner.h"

#include "kernels/buffer_pool.h"
#include "kernels/target.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace lazyfuse {
namespace {

/// Allocates `fused`'s outputs as the plan laid them out (or takes donated memory, when
/// `donate`) and appends the addresses of its buffers to `pointers`, its parameters to
/// `iparams` and `fparams`.
void gatherArguments(const FusedKernel& fused, const Graph& graph, PlanValues& values, bool donate,
                     std::vector<void*>& pointers, std::vector<int64_t>& iparams,
                     std::vector<double>& fparams) {
  DonationState* const donation = values.donation;
  if (!donate) values.donation = nullptr;
  for (size_t i = 0; i < fused.buffers.size(); ++i) {
    const BufferBinding& b = fused.buffers[i];
    at::Tensor& slot = bindingSlot(b, graph, values);
    if (fused.kernel.buffers[i].output) {
      slot = outputBuffer(fused, i, graph, values, c10::kCPU);
    }
    LF_INTERNAL_ASSERT(slot.defined(), "kernel ", fused.kernel.name, " reads a missing buffer");
    pointers.push_back(slot.data_ptr());
  }
  values.donation = donation;
  for (const ParamBinding& p : fused.params) {
    const c10::Scalar s = paramValue(graph, p);
    iparams.push_back(p.floating ? 0 : s.toLong());
    fparams.push_back(p.floating ? s.toDouble() : 0);
  }
}

/// True when only the plan's values (and, for device data, its node) hold `tensor`.
bool heldByPlanOnly(const at::Tensor& tensor, bool device_data) {
  return tensor.defined() && static_cast<size_t>(tensor.use_count()) == (device_data ? 2u : 1u);
}

/// True when the value at `position`, `tensor`, can be written as `meta` in its place: only the
/// plan holds it, and its storage is held by it alone or, for device data, by it and the
/// tensors of the device data sharing that storage, which the plan alone holds and which no
/// later step reads (Note [Donated buffers]).
/// Whether `tensor` is on `device` with `meta`'s dtype, sizes and strides.
bool hasLayout(const at::Tensor& tensor, const TensorMeta& meta, c10::Device device) {
  return tensor.device() == device && tensor.scalar_type() == meta.dtype &&
         tensor.sizes() == c10::IntArrayRef(meta.sizes) &&
         tensor.strides() == c10::IntArrayRef(meta.strides);
}

bool donatable(const at::Tensor& tensor, const TensorMeta& meta, c10::Device device,
               const std::vector<uint32_t>& sharers, uint32_t position, const Graph& graph,
               const PlanValues& values) {
  const bool device_data = graph.nodes()[position]->kind() == OpKind::kDeviceData;
  if (!heldByPlanOnly(tensor, device_data) || !hasLayout(tensor, meta, device)) return false;
  const size_t storage_holders = tensor.storage().use_count();
  if (storage_holders == 1) return true;
  if (!device_data) return false;
  if (storage_holders != 1 + sharers.size()) return false;
  for (uint32_t other : sharers) {
    const at::Tensor& shared = values.nodes.at(other).at(0);
    if (!values.donation->free_data.at(other) || !heldByPlanOnly(shared, true) ||
        shared.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) {
      return false;
    }
  }
  return true;
}

bool donationEnabled() { return config::donation(); }

}  // namespace

bool writableInPlace(const at::Tensor& tensor, const TensorMeta& meta,
                     const DonationState& donation) {
  // A value that an earlier step wrote into device data's memory is held by that node too.
  return donationEnabled() && heldByPlanOnly(tensor, donation.wroteInto(tensor)) &&
         hasLayout(tensor, meta, tensor.device()) && tensor.storage().use_count() == 1;
}

bool dataWritableInPlace(uint32_t position, const TensorMeta& meta,
                         const std::vector<uint32_t>& sharers, const Graph& graph,
                         const PlanValues& values) {
  if (!donationEnabled() || values.donation == nullptr ||
      !values.donation->free_data.at(position)) {
    return false;
  }
  const at::Tensor& tensor = values.nodes.at(position).at(0);
  return donatable(tensor, meta, tensor.device(), sharers, position, graph, values);
}

at::Tensor& bindingSlot(const BufferBinding& b, const Graph& graph, PlanValues& values) {
  if (b.temp) return values.temps.at(b.slot);
  auto& outputs = values.nodes.at(b.value.position);
  outputs.resize(std::max<size_t>(outputs.size(), graph.nodes()[b.value.position]->numOutputs()));
  return outputs.at(b.value.index);
}

bool mayDonate(const FusedKernel& fused, const Donation& d, const Graph& graph, PlanValues& values,
               c10::Device device) {
  const BufferBinding& in = donorOf(fused, d);
  const bool device_data = graph.nodes()[in.value.position]->kind() == OpKind::kDeviceData;
  if (device_data && !values.donation->free_data.at(in.value.position)) return false;
  return donatable(bindingSlot(in, graph, values), fused.buffers.at(d.output).meta, device,
                   d.sharers, in.value.position, graph, values);
}

at::Tensor outputBuffer(const FusedKernel& fused, size_t buffer, const Graph& graph,
                        PlanValues& values, c10::Device device) {
  const TensorMeta& meta = fused.buffers.at(buffer).meta;
  if (values.donation && donationEnabled()) {
    // A kernel's donations are planned output by output (lowering/plan_donations.cpp), so they
    // are sorted by output: a kernel of many outputs finds its own without a scan of all.
    auto first = std::lower_bound(
        fused.donations.begin(), fused.donations.end(), buffer,
        [](const Donation& d, size_t b) { return static_cast<size_t>(d.output) < b; });
    for (auto it = first; it != fused.donations.end() && static_cast<size_t>(it->output) == buffer;
         ++it) {
      const Donation& d = *it;
      if (!mayDonate(fused, d, graph, values, device)) continue;
      const BufferBinding& in = donorOf(fused, d);
      ++values.donation->donated;
      if (graph.nodes()[in.value.position]->kind() == OpKind::kDeviceData) {
        ++values.donation->donated_data;
      }
      if (values.donation->record_taken) values.donation->taken.emplace_back(&fused, &d);
      return bindingSlot(in, graph, values);
    }
  }
  // See Note [Buffer pool].
  LF_INTERNAL_ASSERT(values.target != nullptr, "a kernel output allocated outside a plan run");
  return values.target->allocate(meta.sizes, meta.strides, meta.dtype, device);
}

void runFusedKernel(const FusedKernel& fused, CpuKernelFn fn, const Graph& graph,
                    PlanValues& values, c10::ArrayRef<int64_t> arguments) {
  std::vector<void*> pointers;
  std::vector<int64_t> iparams;
  std::vector<double> fparams;
  gatherArguments(fused, graph, values, /*donate=*/true, pointers, iparams, fparams);
  iparams.insert(iparams.end(), arguments.begin(), arguments.end());
  int64_t points = domainNumel(fused.kernel);
  // Runs on torch's threads only because this file is built with -fopenmp: see Note [Threads
  // of the CPU kernels] in kernels/CMakeLists.txt.
  at::parallel_for(0, points, fused.grain, [&](int64_t begin, int64_t end) {
    fn(begin, end, pointers.data(), iparams.data(), fparams.data());
  });
}

void runFusedRowGroup(const FusedKernel& stats, const FusedKernel& epilogue, CpuKernelFn fn,
                      const Graph& graph, PlanValues& values, c10::ArrayRef<int64_t> arguments) {
  std::vector<void*> pointers;
  std::vector<int64_t> iparams;
  std::vector<double> fparams;
  // A row group runs its two kernels row by row, and its statistics kernel may read other rows
  // than the one the epilogue writes: its outputs take no donated memory.
  gatherArguments(stats, graph, values, /*donate=*/false, pointers, iparams, fparams);
  gatherArguments(epilogue, graph, values, /*donate=*/false, pointers, iparams, fparams);
  iparams.insert(iparams.end(), arguments.begin(), arguments.end());
  const int64_t rows = domainNumel(stats.kernel);
  const int64_t row = epilogue.kernel.domain.back();
  const int64_t grain = std::max<int64_t>(1, std::min(stats.grain, epilogue.grain / row));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    fn(begin, end, pointers.data(), iparams.data(), fparams.data());
  });
}

}  // namespace lazyfuse
