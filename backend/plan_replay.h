#pragma once

// CUDA graph replay of cached plans: a plan that keeps running with its inputs where they were
// is captured once as a CUDA graph and then replayed, one graph launch per run. See Note [CUDA
// graph replay] in backend/plan_replay.cpp.

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/plan_compiler.h"
#include "kernels/fused_runner.h"
#include "lazy_ir/graph.h"

namespace lazyfuse {

struct CapturedRun;

/// The replay state of one cached plan.
class PlanReplay {
 public:
  PlanReplay();
  ~PlanReplay();
  PlanReplay(const PlanReplay&) = delete;
  PlanReplay& operator=(const PlanReplay&) = delete;

  /// The outputs of a run of `plan` over `graph` made by replaying its captured graph, or by the
  /// run that captures it; nullopt when the caller runs the plan as usual. `free_data` computes
  /// DonationState::free_data for the run; `donation` counts the buffers donated.
  std::optional<std::vector<at::Tensor>> run(const CompiledPlan& plan, const Graph& graph,
                                             const std::function<std::vector<uint8_t>()>& free_data,
                                             DonationState& donation);

 private:
  struct Attempt {
    std::optional<std::vector<at::Tensor>> outputs;
    bool moved = false;  // an input the graph reads in place is elsewhere now
  };
  Attempt replay(const CompiledPlan& plan, const Graph& graph,
                 const std::vector<const void*>& addresses,
                 const std::function<std::vector<uint8_t>()>& free_data, DonationState& donation);
  std::optional<std::vector<at::Tensor>> capture(
      const CompiledPlan& plan, const Graph& graph,
      const std::function<std::vector<uint8_t>()>& free_data, DonationState& donation);
  /// Gives up replay of this plan: `why` is logged once.
  void disable(const std::string& why);

  std::mutex mutex_;
  const CompiledPlan* plan_ = nullptr;  // the plan the state below is about
  int eligible_ = -1;                   // -1: not decided yet
  bool disabled_ = false;
  int64_t runs_ = 0;
  int captures_ = 0;
  std::vector<const void*> last_addresses_;  // of each device data, by dataPositions() index
  // The storage of each device data the run before: a new tensor that the allocator happened
  // to place where the last one was is no input that stays in place.
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> last_storages_;
  std::vector<uint8_t> moving_;  // device data seen at another address, or in another storage
  std::unique_ptr<CapturedRun> captured_;
};

/// False when LAZYFUSE_CUDA_GRAPHS is "0" or "off".
bool cudaGraphsEnabled();

}  // namespace lazyfuse
