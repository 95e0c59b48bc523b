// The CUDA emulation target: the CUDA rendering of a plan's kernels, compiled as host C++ and
// run on the CPU (Note [CUDA emulation]), with a replay that runs the captured steps again.
// It is for the tests (a machine without a GPU checks the CUDA kernels' numbers with it) and is
// linked into liblazyfuse.so only with LAZYFUSE_TEST_TARGETS (Note [Test targets]).
#include "test/targets/cuda_emulation.h"

#include "kernels/cuda_graph.h"
#include "kernels/cuda_kernel_families.h"
#include "kernels/target.h"
#include "lazy_ir/metrics.h"

namespace lazyfuse {
namespace {

class EmulatedKernels final : public CompiledKernels {
 public:
  EmulatedKernels(const Target& target, std::shared_ptr<const CudaEmulatedModule> module)
      : target_(target), module_(std::move(module)) {}
  const Target& target() const override { return target_; }
  void launch(const ExecutionPlan& plan, size_t index, const Graph& graph,
              PlanValues& values) const override {
    runEmulatedCudaKernel(plan.kernels[index], *module_, index, graph, values);
    metrics::cuda_emulated_launches.add();
  }
  bool launchBatch(const ExecutionPlan& plan, size_t index, const Graph& graph,
                   PlanValues& values) const override {
    metrics::cuda_emulated_launches.add(
        static_cast<int64_t>(runEmulatedCudaBatch(plan, index, *module_, graph, values)));
    metrics::kernel_batch_launches.add();
    return true;
  }

 private:
  const Target& target_;
  std::shared_ptr<const CudaEmulatedModule> module_;
};

/// A captured run kept as its steps: the capture itself ran them, a replay runs them again, and
/// each recorded launch reads its parameters when it runs.
class StepReplay final : public ReplayGraph {
 public:
  explicit StepReplay(const PlanCapture& capture) : capture_(capture) {}
  void end() override {}
  void abort() noexcept override {}
  bool ranWhileCapturing() const override { return true; }
  bool updateLaunch(const CapturedLaunch&) override { return true; }
  void replay() override { capture_.replaySteps(); }

 private:
  const PlanCapture& capture_;
};

class CudaEmulationTarget final : public Target {
 public:
  const char* name() const override { return "cuda-emulated"; }
  TargetCapabilities capabilities() const override {
    TargetCapabilities c;
    c.lowering = KernelTarget::kCuda;
    c.kernel_batches = true;
    c.graph_replay = true;
    c.vector_width = 4;
    return c;
  }
  /// It compiles with the CPU target's compiler.
  bool available(std::string* why) const override { return findTarget("cpu")->available(why); }
  CompileOutcome compile(const ExecutionPlan& plan, c10::Device,
                         const SourceDump& dump) const override {
    const CudaPlanKernels inputs = cudaPlanKernels(plan);
    const CudaSource rendered = renderCuda(inputs.kernels, inputs.batches);
    if (dump) dump(".cu", rendered.source);
    CompileOutcome outcome;
    // As the CUDA target: Note [Shape-generic kernels].
    std::shared_ptr<const CudaEmulatedModule> module;
    const CudaFamilySource source =
        compileWithFamilies(rendered, [&](const CudaFamilySource& chosen) {
          outcome.error.clear();
          module =
              compileCudaEmulation(inputs.kernels, chosen.source, outcome.error, outcome.disk_hit);
          return module != nullptr;
        });
    if (!module) return outcome;
    countFamilies(source, plan, outcome.disk_hit, outcome);
    outcome.kernels = std::make_shared<EmulatedKernels>(*this, std::move(module));
    return outcome;
  }
  /// Its memory is the CPU's, from the same pool.
  at::Tensor allocate(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                      c10::Device device) const override {
    static const Target* const cpu = findTarget("cpu");
    return cpu->allocate(sizes, strides, dtype, device);
  }
  std::unique_ptr<PlanCapture> newCapture() const override {
    return std::make_unique<PlanCapture>(/*records_steps=*/true);
  }
  std::unique_ptr<ReplayGraph> beginReplay(PlanCapture& capture, c10::Device) const override {
    return std::make_unique<StepReplay>(capture);
  }
};

}  // namespace

LF_REGISTER_TARGET(CudaEmulationTarget);

}  // namespace lazyfuse
