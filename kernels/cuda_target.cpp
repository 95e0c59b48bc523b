// The CUDA target: CUDA C++ compiled by NVRTC, launched through the driver, replayed as CUDA
// graphs (Note [Targets]).
#include "kernels/cuda_api.h"
#include "kernels/cuda_codegen.h"
#include "kernels/cuda_compiler.h"
#include "kernels/cuda_graph.h"
#include "kernels/cuda_kernel_families.h"
#include "kernels/cuda_runner.h"
#include "kernels/target.h"
#include "lazy_ir/metrics.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace lazyfuse {
namespace {

class CudaKernels final : public CompiledKernels {
 public:
  CudaKernels(const Target& target, std::shared_ptr<const CudaModule> module)
      : target_(target), module_(std::move(module)) {}
  const Target& target() const override { return target_; }
  void launch(const ExecutionPlan& plan, size_t index, const Graph& graph,
              PlanValues& values) const override {
    runCudaKernel(plan.kernels[index], *module_, index, graph, values);
    metrics::cuda_launches.add();
  }
  bool launchBatch(const ExecutionPlan& plan, size_t index, const Graph& graph,
                   PlanValues& values) const override {
    metrics::cuda_launches.add(
        static_cast<int64_t>(runCudaBatch(plan, index, *module_, graph, values)));
    metrics::kernel_batch_launches.add();
    return true;
  }

 private:
  const Target& target_;
  std::shared_ptr<const CudaModule> module_;
};

/// A run captured as a CUDA graph on the stream it was made from.
class CudaReplayGraph final : public ReplayGraph {
 public:
  CudaReplayGraph(std::unique_ptr<CudaGraph> graph, c10::Stream stream)
      : graph_(std::move(graph)), stream_(stream) {}
  void end() override { graph_->end(); }
  void abort() noexcept override { graph_->abort(); }
  bool ranWhileCapturing() const override { return false; }
  bool updateLaunch(const CapturedLaunch& launch) override { return graph_->updateLaunch(launch); }
  void replay() override { graph_->replay(); }
  std::optional<c10::Stream> stream() const override { return stream_; }

 private:
  std::unique_ptr<CudaGraph> graph_;
  c10::Stream stream_;
};

class CudaTarget final : public Target {
 public:
  const char* name() const override { return "cuda"; }
  TargetCapabilities capabilities() const override {
    TargetCapabilities c;
    c.lowering = KernelTarget::kCuda;
    c.kernel_batches = true;
    c.graph_replay = true;
    c.vector_width = 4;  // the 4-wide variant of Note [CUDA kernel structure]
    c.shared_memory_bytes = size_t{48} << 10;
    return c;
  }
  bool available(std::string* why) const override {
    std::string reason;
    const bool ok = nvrtc(&reason) != nullptr && cudaDriver(&reason) != nullptr;
    if (!ok && why != nullptr) *why = reason;
    return ok;
  }
  CompileOutcome compile(const ExecutionPlan& plan, c10::Device device,
                         const SourceDump& dump) const override {
    const CudaDriverApi* driver = cudaDriver(nullptr);
    const size_t table_bytes =
        driver && driver->version >= 12010 ? kCudaBatchTableBytes : kCudaBatchTableBytesBefore12_1;
    const CudaPlanKernels inputs = cudaPlanKernels(plan);
    const CudaSource rendered = renderCuda(inputs.kernels, inputs.batches, table_bytes);
    if (dump) dump(".cu", rendered.source);
    CompileOutcome outcome;
    try {
      // Each kernel runs the function of its family that fits it (Note [Shape-generic
      // kernels]): a plan of new sizes renders a source compiled before.
      CudaCompileResult result;
      const CudaFamilySource source =
          compileWithFamilies(rendered, [&](const CudaFamilySource& chosen) {
            result = compileCuda(chosen.source.source, cudaArch(device));
            return result.binary != nullptr;
          });
      outcome.disk_hit = result.disk_hit;
      if (!result.binary) {
        outcome.error = result.error;
        return outcome;
      }
      outcome.kernels = std::make_shared<CudaKernels>(
          *this, loadCudaModule(*result.binary, source.source, device));
      countFamilies(source, plan, result.disk_hit, outcome);
    } catch (const c10::Error& e) {
      outcome.error =
          std::string("cannot load the compiled kernels: ") + e.what_without_backtrace();
    }
    return outcome;
  }
  void synchronize(c10::Device device) const override {
    c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
  }
  std::unique_ptr<ReplayGraph> beginReplay(PlanCapture&, c10::Device device) const override {
    // The stream the run is on now: CudaGraph::begin makes a stream of torch's pool current.
    const c10::Stream stream = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
    return std::make_unique<CudaReplayGraph>(CudaGraph::begin(device), stream);
  }
};

}  // namespace

std::unique_ptr<Target> makeCudaTarget() { return std::make_unique<CudaTarget>(); }

}  // namespace lazyfuse
