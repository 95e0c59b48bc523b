// lazyfuse registered with PyTorch's lazy tensor core, so that `torch._lazy` reaches it.
//
// Note [torch._lazy on lazyfuse]
// PyTorch's lazy tensor API (`torch._lazy.mark_step`, `add_step_closure`, `metrics`, ...) calls
// into torch/csrc/lazy through `torch._C._lazy`, which asks for a registered backend
// (BackendImplInterface: the default device) and graph executor (LazyGraphExecutor: mark_step).
// lazyfuse registers one of each when the library loads, unless another backend (torch's
// TorchScript one) already has, in which case checkBackend() refuses every sync:
//  * the backend answers the device questions (the lazy device runs on the hardware device:
//    "CPU" or "CUDA", ordinal 0, as torch's TorchScript backend names them) and seeds the
//    hardware generator; its lowering, compile and data-transfer entries belong to the
//    TorchScript backend's pipeline, which lazyfuse replaces, and raise if anything calls them;
//  * the executor's SyncLiveTensorsGraph syncs every live lazy tensor, as lazyfuse.mark_step()
//    does, and MarkStep counts the step;
//  * counters and timers live in torch's metrics arena (Note [One store for metrics]).
// What `torch._C._lazy` does with a tensor (`_sync_multi`, `_get_tensor_id`, the IR dumps) needs
// torch's own LazyTensor, which a lazyfuse tensor is not; python/lazyfuse/_torch_lazy.py routes
// those functions for lazyfuse tensors. Registering changes nothing for other tensors: torch
// consults these registries only from torch._lazy and its own lazy tensors.
#include "backend/api.h"
#include "backend/device.h"
#include "backend/graph_executor.h"
#include "lazy_ir/check.h"
#include "lazy_ir/metrics.h"

#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/lazy_graph_executor.h>

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

struct HardwareDeviceType final : torch::lazy::BackendDeviceType {
  explicit HardwareDeviceType(c10::DeviceType type)
      : BackendDeviceType(static_cast<int8_t>(type)) {}
  std::string toString() const override {
    return c10::DeviceTypeName(static_cast<c10::DeviceType>(type));
  }
};

[[noreturn]] void notLazyfuses(const char* entry) {
  LF_CHECK(false, "torch::lazy::BackendImplInterface::", entry,
           " belongs to the TorchScript lazy "
           "backend's pipeline; lazyfuse records, compiles and runs lazy tensors itself, and "
           "torch._lazy reaches it through mark_step, sync_multi, metrics and debug only");
  std::abort();  // unreachable: LF_CHECK(false) throws
}

class Backend final : public torch::lazy::BackendImplInterface {
 public:
  void PrepareToExit() const override {}

  void SetRngSeed(size_t seed) const override { manualSeed(static_cast<int64_t>(seed)); }

  std::shared_ptr<torch::lazy::BackendDeviceType> GetDefaultDeviceType() const override {
    return std::make_shared<HardwareDeviceType>(hardwareDevice().type());
  }
  void SetDefaultDeviceType(int8_t type) override {
    LF_CHECK(type == static_cast<int8_t>(hardwareDevice().type()), "lazy tensors run on ",
             hardwareDevice().str(),
             "; choose the hardware device with LAZYFUSE_DEVICE before "
             "the first lazy tensor is made");
  }
  int64_t GetDefaultDeviceOrdinal() const override { return 0; }
  void SetDefaultDeviceOrdinal(int64_t ordinal) override {
    LF_CHECK(ordinal == 0, "lazy has a single device, got ordinal ", ordinal);
  }
  at::DeviceType EagerFallbackDeviceType() const override { return hardwareDevice().type(); }
  std::vector<torch::lazy::BackendDevice> GetBackendDevices() const override {
    return {torch::lazy::BackendDevice(GetDefaultDeviceType(), 0)};
  }
  torch::lazy::BackendDevice GetBackendDevice(c10::Device device) const override {
    LF_CHECK(device.index() <= 0, "lazy has a single device, got ", device.str());
    return torch::lazy::BackendDevice(GetDefaultDeviceType(), 0);
  }

  const torch::lazy::IrBuilder* GetIrBuilder() const override { notLazyfuses("GetIrBuilder"); }
  torch::lazy::BackendDataPtr MakeComputationDataFromTensor(
      const at::Tensor&, const torch::lazy::Shape&,
      const torch::lazy::BackendDevice&) const override {
    notLazyfuses("MakeComputationDataFromTensor");
  }
  torch::lazy::BackendDataPtr MakeComputationDataFromScalar(
      const at::Scalar&, const torch::lazy::BackendDevice&) const override {
    notLazyfuses("MakeComputationDataFromScalar");
  }
  torch::lazy::BackendDataPtr CreateDataPlaceholder(const torch::lazy::BackendDevice&,
                                                    const torch::lazy::Shape&) const override {
    notLazyfuses("CreateDataPlaceholder");
  }
  torch::lazy::BackendDataPtr GetComputationDataFromNode(const torch::lazy::Node*) const override {
    notLazyfuses("GetComputationDataFromNode");
  }
  at::Tensor MakeTensorFromComputationData(const torch::lazy::BackendDataPtr,
                                           std::optional<at::ScalarType>) const override {
    notLazyfuses("MakeTensorFromComputationData");
  }
  std::unique_ptr<torch::lazy::LoweringContext> CreateLoweringContext(
      const std::string&, torch::lazy::BackendDevice, c10::ArrayRef<const torch::lazy::Node*>,
      torch::lazy::Util::EmissionMap) const override {
    notLazyfuses("CreateLoweringContext");
  }
  std::unique_ptr<torch::lazy::LoweringContext> CreateLoweringContext(
      const std::string&, torch::lazy::BackendDevice) const override {
    notLazyfuses("CreateLoweringContext");
  }
  std::vector<std::string> GetCompilationDevices(const std::string&,
                                                 c10::ArrayRef<std::string>) const override {
    notLazyfuses("GetCompilationDevices");
  }
  std::vector<torch::lazy::ComputationPtr> Compile(
      std::vector<torch::lazy::ComputationPtr>) const override {
    notLazyfuses("Compile");
  }
  std::vector<torch::lazy::BackendDataPtr> ExecuteComputation(
      torch::lazy::ComputationPtr, c10::ArrayRef<torch::lazy::BackendDataPtr>,
      const torch::lazy::BackendDevice&) const override {
    notLazyfuses("ExecuteComputation");
  }
  std::string GetComputationBackendText(const torch::lazy::ComputationPtr) const override {
    notLazyfuses("GetComputationBackendText");
  }
};

class Executor final : public torch::lazy::LazyGraphExecutor {
 public:
  void SyncLiveTensorsGraph(const torch::lazy::BackendDevice* device,
                            c10::ArrayRef<std::string> /*devices*/, bool /*wait*/) override {
    // A sync runs to its end on the host; `wait` (wait for that) holds either way.
    if (device != nullptr) {
      LF_CHECK(device->ordinal() == 0, "lazy has a single device, got ", device->toString());
    }
    syncAllLive();
  }
  // torch._lazy.mark_step calls SyncLiveTensorsGraph, then this: runMarkStep() in two halves.
  void MarkStep(const torch::lazy::BackendDevice& /*device*/) override {
    metrics::mark_steps.add();
  }
};

Backend* ourBackend = nullptr;

// Registers both at load, unless another backend got there first (see checkBackend()); then
// ourBackend stays null.
[[maybe_unused]] const bool registered = [] {
  if (torch::lazy::hasBackend()) return false;
  ourBackend = new Backend();  // never destroyed: torch keeps the pointers
  static torch::lazy::BackendRegistrar registrar(ourBackend);
  torch::lazy::LazyGraphExecutor::Register(new Executor());
  return true;
}();

}  // namespace

void checkBackend() {
  LF_CHECK(ourBackend != nullptr && torch::lazy::getBackend() == ourBackend,
           "torch._lazy.ts_backend.init() has been called: the TorchScript lazy backend has taken "
           "over the Lazy device, so lazyfuse cannot run; start a new process without calling it");
}

}  // namespace lazyfuse
