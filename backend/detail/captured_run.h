#pragma once

// A plan run captured for replay, shared by the capture (backend/plan_capture.cpp) and the
// replay (backend/plan_replay.cpp). See Note [CUDA graph replay].

#include "backend/plan_replay.h"
#include "kernels/cuda_graph.h"
#include "kernels/target.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace detail {

/// Where an output of a captured run is.
enum class OutputKind : uint8_t {
  kInput,   // memory of a device data the graph reads in place
  kStatic,  // memory of the graph, handed out
  kClone,   // memory of the graph, copied out
};

struct OutputSource {
  OutputKind kind = OutputKind::kStatic;
  uint32_t position = 0;  // kInput: the device data
  bool same = false;      // kInput: the device data's tensor itself
  int32_t storage = -1;   // kStatic, kClone: index into CapturedRun::statics
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;  // storage offset; for kInput, from the input's
};

/// True when `a` and `b` hold the same values, NaN matching NaN.
bool sameValues(const at::Tensor& a, const at::Tensor& b);

/// The index of the first tensor of `result` whose values differ from those of `reference`'s at
/// that index, counted in CudaGraphMismatches; nullopt when every one agrees.
std::optional<size_t> firstMismatch(const std::vector<at::Tensor>& result,
                                    const std::vector<at::Tensor>& reference);

}  // namespace detail

struct CapturedRun {
  CapturedRun();
  ~CapturedRun();
  CapturedRun(const CapturedRun&) = delete;
  CapturedRun& operator=(const CapturedRun&) = delete;

  std::unique_ptr<ReplayGraph> graph;  // the target's capture of the run
  /// The stream the graph is replayed on: one replay follows another on it, so that a copy into
  /// the graph's inputs never overtakes the replay before (a GPU's only).
  std::optional<c10::Stream> stream;
  std::unique_ptr<PlanCapture> capture;
  std::vector<size_t> fixed;  // device data read in place, by dataPositions() index
  std::vector<const void*> fixed_addresses;
  std::vector<uint32_t> copied;  // device data copied in, by position, into copied_into
  std::vector<int32_t> copied_into;
  std::vector<at::Tensor> statics;  // memory of the graph, one tensor per storage
  std::vector<size_t> holders;      // use count of each static's storage with nothing outside
  std::vector<detail::OutputSource> outputs;
  std::vector<std::pair<uint32_t, std::vector<c10::IValue>>> extern_params;
  std::vector<std::pair<const FusedKernel*, const Donation*>> data_donations;
  /// Region writes that write into device data in place on every replay (Note [Region writes]).
  std::vector<const RegionWrite*> data_regions;
  int64_t donated = 0, donated_data = 0;
  bool verify_next = true;     // the first replay after the capture is checked
  bool verify_changed = true;  // so is the first that gives launches new scalars

  /// The outputs of the run that the graph's last replay (or its capture) made.
  std::vector<at::Tensor> handOut(const Graph& graph) const;
};

}  // namespace lazyfuse
