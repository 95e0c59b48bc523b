#include "backend/plan_compiler.h"

#include "backend/device.h"
#include "backend/logging.h"
#include "backend/metrics.h"
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_row_groups.h"
#include "kernels/cuda_api.h"
#include "kernels/cuda_codegen.h"
#include "kernels/cuda_compiler.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lowering/pipeline.h"
#include "lowering/print_plan.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace lazyfuse {
namespace {

// Note [When graphs are fused]
// Fused kernels run on the hardware device: the CPU through the system C++ compiler, a CUDA GPU
// through NVRTC and the driver. Without those a graph runs node by node (one warning). The
// LAZYFUSE_FUSION variable picks when:
//   auto (default)  graphs whose kernels would touch at least kFuseMinElements elements; a
//                   smaller graph runs node by node, since compiling it (~0.1-0.5 s) costs more
//                   than fusion can save on a graph that small
//   always          every graph (the fusion tests run this way)
//   0               never
// It is read at each new graph, so a test can switch it; cached plans keep their decision,
// except that a small graph that recurs is fused after all (Note [Fusing recurring small
// graphs] in backend/graph_executor.cpp).
// LAZYFUSE_NVRTC_CHECK=<arch> (e.g. 90) makes every CPU-fused graph also render its kernels as
// CUDA and compile them with NVRTC for that architecture, counting CudaCheckFailures: how the
// test suite proves, without a GPU, that every kernel it generates compiles for the GPU.
// LAZYFUSE_CUDA_EMULATION=1 runs the CUDA rendering of CPU-fused graphs, instead of the C++
// one, under the emulation of Note [CUDA emulation]: how the tests check, without a GPU, that
// the CUDA kernels compute eager's numbers.
constexpr int64_t kFuseMinElements = 1 << 15;

bool targetAvailable(c10::Device device) {
  if (device.is_cpu()) {
    static const bool have_compiler = [] {
      if (cpuCompilerAvailable()) return true;
      LF_LOG_WARN("no C++ compiler found (set LAZYFUSE_CXX or CXX): graphs run node by node");
      return false;
    }();
    return have_compiler;
  }
  static const bool have_cuda = [] {
    std::string why;
    if (!nvrtc(&why) || !cudaDriver(&why)) {
      LF_LOG_WARN("fused CUDA kernels are not available (", why, "): graphs run node by node");
      return false;
    }
    return true;
  }();
  return device.is_cuda() && have_cuda;
}

config::Fusion fusionMode() {
  const config::Fusion mode = config::fusion();
  return targetAvailable(hardwareDevice()) ? mode : config::Fusion::kOff;
}

/// Elements the plan's kernels visit, reductions counted in full.
int64_t kernelWork(const ExecutionPlan& plan) {
  int64_t work = 0;
  for (const FusedKernel& k : plan.kernels) work += domainNumel(k.kernel) * workPerPoint(k.kernel);
  return work;
}

std::vector<const Kernel*> kernelsOf(const ExecutionPlan& plan) {
  std::vector<const Kernel*> kernels;
  for (const FusedKernel& k : plan.kernels) kernels.push_back(&k.kernel);
  return kernels;
}

/// What renderCuda takes for `plan`: its kernels, null for the members of a batch, and its
/// batches.
struct CudaInputs {
  std::vector<const Kernel*> kernels;
  std::vector<std::vector<const Kernel*>> batches;
};

CudaInputs cudaInputs(const ExecutionPlan& plan) {
  CudaInputs inputs;
  inputs.kernels = kernelsOf(plan);
  for (const KernelBatch& batch : plan.batches) {
    inputs.batches.emplace_back();
    for (int32_t k : batch.kernels) {
      inputs.batches.back().push_back(inputs.kernels.at(k));
      inputs.kernels.at(k) = nullptr;
    }
  }
  return inputs;
}

void countCompiled(bool disk_hit, size_t kernels) {
  (disk_hit ? metrics::kernel_disk_hits : metrics::kernels_compiled)
      .add(static_cast<int64_t>(kernels));
}

/// Compiles the plan's kernels as CUDA for LAZYFUSE_NVRTC_CHECK; see Note [When graphs are fused].
void checkCudaCompiles(const Graph& graph, const ExecutionPlan& plan) {
  static const int arch = [] {
    std::string problem;
    const int value = config::nvrtcCheckArch(&problem);
    if (!problem.empty()) LF_LOG_WARN(problem);
    return value;
  }();
  if (arch <= 0 || plan.kernels.empty()) return;
  // Rendered as a CUDA target would lower the graph: with its kernel batches, and fusing what
  // only the CPU leaves to ATen (Note [Ops left to ATen on a target]).
  const ExecutionPlan batched = lowerGraph(graph, /*fuse=*/true, /*batch=*/true, KernelTarget::kCuda);
  const CudaInputs inputs = cudaInputs(batched);
  CudaCompileResult result = compileCuda(renderCuda(inputs.kernels, inputs.batches).source, arch);
  if (result.binary) {
    metrics::cuda_kernels_checked.add(static_cast<int64_t>(plan.kernels.size()));
    return;
  }
  metrics::cuda_check_failures.add();
  LF_LOG_WARN("kernels of graph 0x", std::hex, graph.hash(), std::dec,
              " do not compile for CUDA sm_", arch, ": ", result.error);
}

bool emulationRequested() { return config::cudaEmulation(); }

/// Compiles the plan's kernels for `device`; the error text, or "" on success.
std::string compileKernels(const Graph& graph, CompiledPlan& compiled, c10::Device device) {
  std::vector<const Kernel*> kernels = kernelsOf(compiled.plan);
  const CudaInputs inputs = cudaInputs(compiled.plan);
  if (device.is_cpu() && emulationRequested()) {
    if (dumpRequested("cuda")) {
      writeDump(graph, "kernels", ".cu", renderCuda(inputs.kernels, inputs.batches).source);
    }
    std::string error;
    bool disk_hit = false;
    compiled.emulated = compileCudaEmulation(inputs.kernels, inputs.batches, error, disk_hit);
    if (!compiled.emulated) return error;
    countCompiled(disk_hit, kernels.size());
    checkCudaCompiles(graph, compiled.plan);
    return "";
  }
  if (device.is_cpu()) {
    const CpuProgram program = renderCppProgram(compiled.plan);
    if (dumpRequested("cpp")) writeDump(graph, "kernels", ".cpp", program.source);
    CpuCompileResult result = compileCppProgram(program);
    if (!result.module) return result.error;
    countCompiled(result.disk_hit, kernels.size());
    compiled.cpu = result.module;
    compiled.cpu_kernels = result.module->functions;
    checkCudaCompiles(graph, compiled.plan);
    return "";
  }
  std::string why;
  const CudaDriverApi* driver = cudaDriver(&why);
  const size_t table_bytes = driver && driver->version >= 12010 ? kCudaBatchTableBytes
                                                                : kCudaBatchTableBytesBefore12_1;
  CudaSource source = renderCuda(inputs.kernels, inputs.batches, table_bytes);
  if (dumpRequested("cuda")) writeDump(graph, "kernels", ".cu", source.source);
  try {
    CudaCompileResult result = compileCuda(source.source, cudaArch(device));
    if (!result.binary) return result.error;
    countCompiled(result.disk_hit, kernels.size());
    compiled.cuda = loadCudaModule(*result.binary, source, device);
  } catch (const c10::Error& e) {
    return std::string("cannot load the compiled kernels: ") + e.what_without_backtrace();
  }
  return "";
}

/// True when fused kernels of `device` run as CUDA (on a GPU, or emulated).
bool cudaTarget(c10::Device device) {
  return device.is_cuda() || (device.is_cpu() && emulationRequested());
}

}  // namespace

BatchLauncher CompiledPlan::batchLauncher() const {
  if (plan.batches.empty()) return {};
  if (cuda) {
    return [this](size_t index, const Graph& graph, PlanValues& values) {
      metrics::cuda_launches.add(
          static_cast<int64_t>(runCudaBatch(plan, index, *cuda, graph, values)));
      metrics::kernel_batch_launches.add();
    };
  }
  if (emulated) {
    return [this](size_t index, const Graph& graph, PlanValues& values) {
      metrics::cuda_emulated_launches.add(
          static_cast<int64_t>(runEmulatedCudaBatch(plan, index, *emulated, graph, values)));
      metrics::kernel_batch_launches.add();
    };
  }
  return {};
}

KernelLauncher CompiledPlan::launcher() const {
  if (plan.kernels.empty()) return {};
  if (cuda) {
    return [this](size_t index, const Graph& graph, PlanValues& values) {
      runCudaKernel(plan.kernels[index], *cuda, index, graph, values);
      metrics::cuda_launches.add();
    };
  }
  if (emulated) {
    return [this](size_t index, const Graph& graph, PlanValues& values) {
      runEmulatedCudaKernel(plan.kernels[index], *emulated, index, graph, values);
      metrics::cuda_emulated_launches.add();
    };
  }
  return [this](size_t index, const Graph& graph, PlanValues& values) {
    runCpuKernel(plan, index, cpu_kernels, graph, values);
  };
}

static std::shared_ptr<CompiledPlan> compileForTarget(const Graph& graph, bool recurring);

ExecutionPlan lowerForTarget(const Graph& graph, bool recurring, bool* fuse_when_recurring) {
  const config::Fusion mode = fusionMode();
  const bool batch = cudaTarget(hardwareDevice());
  ExecutionPlan plan = lowerGraph(graph, mode != config::Fusion::kOff, batch,
                                  batch ? KernelTarget::kCuda : KernelTarget::kCpu);
  if (mode == config::Fusion::kAuto && !recurring && kernelWork(plan) < kFuseMinElements) {
    if (fuse_when_recurring != nullptr) *fuse_when_recurring = !plan.kernels.empty();
    plan = lowerGraph(graph, /*fuse=*/false);
  }
  return plan;
}

std::shared_ptr<const CompiledPlan> compilePlan(const Graph& graph, bool recurring) {
  std::shared_ptr<CompiledPlan> compiled = compileForTarget(graph, recurring);
  compiled->cuda_target = cudaTarget(hardwareDevice());
  return compiled;
}

/// compilePlan, but for cuda_target.
static std::shared_ptr<CompiledPlan> compileForTarget(const Graph& graph, bool recurring) {
  auto compiled = std::make_shared<CompiledPlan>();
  compiled->plan = lowerForTarget(graph, recurring, &compiled->fuse_when_recurring);
  if (dumpRequested("plan")) writeDump(graph, "plan", ".txt", printPlan(graph, compiled->plan));
  if (compiled->plan.kernels.empty()) return compiled;
  std::string error = compileKernels(graph, *compiled, hardwareDevice());
  if (error.empty()) return compiled;
  if (!compiled->plan.batches.empty()) {
    // The kernels without batching, before giving up fusion for the graph.
    LF_LOG_WARN("batched kernels of graph 0x", std::hex, graph.hash(), std::dec,
                " failed to compile; compiling them one by one: ", error);
    auto unbatched = std::make_shared<CompiledPlan>();
    unbatched->plan = lowerGraph(graph, /*fuse=*/true, /*batch=*/false, KernelTarget::kCuda);
    error = compileKernels(graph, *unbatched, hardwareDevice());
    if (error.empty()) return unbatched;
  }
  // Never a wrong result: the graph runs node by node instead. See Note [When graphs are fused].
  LF_LOG_WARN("fused kernels of graph 0x", std::hex, graph.hash(), std::dec,
              " failed to compile; running it node by node: ", error);
  metrics::fusion_fallbacks.add();
  auto fallback = std::make_shared<CompiledPlan>();
  fallback->plan = lowerGraph(graph, /*fuse=*/false);
  return fallback;
}

bool dumpRequested(const char* what) { return config::dumpRequested(what); }

void writeDump(const Graph& graph, const char* what, const char* ext, const std::string& text) {
  const std::string dir = config::dumpDirectory();
  if (!dir.empty()) {
    std::error_code ignored;  // a failure shows as the warning below
    std::filesystem::create_directories(dir, ignored);
  }
  std::ostringstream path;
  path << (dir.empty() ? "." : dir) << "/lazyfuse-" << what << "-" << std::hex << std::setw(16)
       << std::setfill('0') << graph.hash() << ext;
  std::ofstream out(path.str());
  if (!out) {
    LF_LOG_WARN("cannot write the ", what, " dump ", path.str());
    return;
  }
  out << text;
  LF_LOG_DEBUG("wrote ", path.str());
}

}  // namespace lazyfuse
