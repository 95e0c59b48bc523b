#include "backend/plan_compiler.h"

#include "backend/device.h"
#include "backend/logging.h"
#include "kernels/cuda_codegen.h"
#include "kernels/cuda_compiler.h"
#include "kernels/cuda_kernel_families.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"
#include "lowering/pipeline.h"
#include "lowering/print_plan.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>

namespace lazyfuse {
namespace {

// Note [When graphs are fused]
// Fused kernels run on the hardware device: the CPU through the system C++ compiler, a CUDA GPU
// through NVRTC and the driver. Without those a graph runs node by node (one warning). The
// LAZYFUSE_FUSION variable picks when:
//   auto (default)  graphs whose kernels would touch at least kFuseMinElements elements; a
//                   smaller graph runs node by node, since compiling it (~0.1-0.5 s) costs more
//                   than fusion can save on a graph that small (its region writes, Note
//                   [Region writes], still run as one step each: they compile nothing).
//                   A graph whose fused plan has no kernel at all (extern calls, views and
//                   region writes only) keeps that plan: it compiles nothing either, and takes
//                   views where node by node copies them (`x @ w.t()` of two inputs copied
//                   the weight, transposed, at every run: 1.7 ms for 1024x1024 floats)
//   always          every graph (the fusion tests run this way)
//   0               never
// It is read at each new graph, so a test can switch it; cached plans keep their decision,
// except that a small graph that recurs is fused after all (Note [Fusing recurring small
// graphs] in backend/graph_cache.cpp).
// LAZYFUSE_NVRTC_CHECK=<arch> (e.g. 90) makes every CPU-fused graph also render its kernels as
// CUDA and compile them with NVRTC for that architecture, counting CudaCheckFailures: how the
// test suite proves, without a GPU, that every kernel it generates compiles for the GPU.
// LAZYFUSE_CUDA_EMULATION=1 runs the CUDA rendering of CPU-fused graphs, instead of the C++
// one, under the emulation of Note [CUDA emulation]: how the tests check, without a GPU, that
// the CUDA kernels compute eager's numbers.
constexpr int64_t kFuseMinElements = 1 << 15;

/// Whether `target` can compile here; warns once per target when it cannot. A target that could
/// not is asked again at each graph: loading an ahead-of-time package makes the CPU target run
/// its kernels without a compiler (Note [Kernels in a package]).
bool targetAvailable(const Target& target) {
  static std::mutex mutex;
  static std::map<std::string, bool> known;  // true: available; false: warned that it is not
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, added] = known.emplace(target.name(), false);
  if (!added && it->second) return true;
  std::string why;
  if (target.available(&why)) return it->second = true;
  if (added) {
    LF_LOG_WARN("fused kernels for the ", target.name(), " target are not available (", why,
                "): graphs run node by node");
  }
  return false;
}

/// LAZYFUSE_FUSION, or off where the target cannot compile (asked only when fusion is on).
config::Fusion fusionMode(const Target& target) {
  const config::Fusion mode = config::fusion();
  return mode == config::Fusion::kOff || !targetAvailable(target) ? config::Fusion::kOff : mode;
}

/// Elements the plan's kernels visit, reductions counted in full.
int64_t kernelWork(const ExecutionPlan& plan) {
  int64_t work = 0;
  for (const FusedKernel& k : plan.kernels) work += domainNumel(k.kernel) * workPerPoint(k.kernel);
  return work;
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
  const ExecutionPlan batched =
      lowerGraph(graph, /*fuse=*/true, /*batch=*/true, KernelTarget::kCuda);
  const CudaPlanKernels inputs = cudaPlanKernels(batched);
  // With the CUDA target's choice of shape-generic functions (Note [Shape-generic kernels]),
  // made by families of the check's own: the generic functions compile for the GPU too.
  static KernelFamilies* const families = new KernelFamilies();
  CudaCompileResult result;
  compileWithFamilies(
      renderCuda(inputs.kernels, inputs.batches),
      [&](const CudaFamilySource& chosen) {
        result = compileCuda(chosen.source.source, arch);
        return result.binary != nullptr;
      },
      *families);
  if (result.binary) {
    metrics::cuda_kernels_checked.add(static_cast<int64_t>(plan.kernels.size()));
    return;
  }
  metrics::cuda_check_failures.add();
  LF_LOG_WARN("kernels of graph 0x", std::hex, graph.hash(), std::dec,
              " do not compile for CUDA sm_", arch, ": ", result.error);
}

/// Compiles the plan's kernels through its target; the error text, or "" on success.
std::string compileKernels(const Graph& graph, CompiledPlan& compiled) {
  SourceDump dump;
  const char* dialect =
      compiled.target->capabilities().lowering == KernelTarget::kCuda ? "cuda" : "cpp";
  if (dumpRequested(dialect)) {
    dump = [&graph](const char* ext, const std::string& source) {
      writeDump(graph, "kernels", ext, source);
    };
  }
  CompileOutcome outcome = compiled.target->compile(compiled.plan, hardwareDevice(), dump);
  if (!outcome.kernels) return outcome.error;
  metrics::kernels_compiled.add(outcome.compiled);
  metrics::kernel_disk_hits.add(outcome.disk);
  metrics::kernels_reused.add(outcome.reused);
  metrics::dynamic_kernel_hits.add(outcome.dynamic);
  metrics::kernels_generalized.add(outcome.generalized);
  if (config::logRecompiles()) {
    for (const std::string& why : outcome.recompiles) {
      // Logged whatever LAZYFUSE_LOG_LEVEL says: the switch asks for these lines.
      logMessage(LogLevel::kWarn, detail::concat("recompile in graph 0x", std::hex, graph.hash(),
                                                 std::dec, ": ", why));
    }
  }
  compiled.kernels = std::move(outcome.kernels);
  // The NVRTC check proves, on a machine without a GPU, that what it fused compiles for one.
  if (!hardwareDevice().is_cuda()) checkCudaCompiles(graph, compiled.plan);
  return "";
}

/// `graph` lowered for `target`: fused with its batches, or node by node.
ExecutionPlan lowerFor(const Graph& graph, const Target& target, bool fuse,
                       bool region_writes = false) {
  const TargetCapabilities c = target.capabilities();
  return lowerGraph(graph, fuse, fuse && c.kernel_batches, c.lowering, region_writes);
}

}  // namespace

const Target& chooseTarget() {
  const char* name = hardwareDevice().is_cuda() ? "cuda"
                     : config::cudaEmulation()  ? "cuda-emulated"
                                                : "cpu";
  const Target* target = findTarget(name);
  LF_CHECK(target != nullptr, "LAZYFUSE_CUDA_EMULATION asks for the ", name,
           " target, which this build of lazyfuse lacks (configure it with "
           "-DLAZYFUSE_TEST_TARGETS=ON)");
  return *target;
}

ExecutionPlan lowerForTarget(const Graph& graph, const Target& target, bool recurring,
                             bool* fuse_when_recurring) {
  const config::Fusion mode = fusionMode(target);
  ExecutionPlan plan = lowerFor(graph, target, mode != config::Fusion::kOff);
  if (mode == config::Fusion::kAuto && !recurring && !plan.kernels.empty() &&
      kernelWork(plan) < kFuseMinElements) {
    if (fuse_when_recurring != nullptr) *fuse_when_recurring = true;
    // Node by node, but a write into a slice of a tensor still writes the slice alone.
    plan = lowerFor(graph, target, /*fuse=*/false, /*region_writes=*/true);
  }
  return plan;
}

namespace {

/// True when the graph reads a value marked by lazyfuse.mark_dynamic.
bool markedDynamic(const Graph& graph) {
  for (const NodePtr& node : graph.nodes()) {
    if (node->markedDynamic()) return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<const CompiledPlan> compilePlan(const Graph& graph, bool recurring) {
  // A graph reading a tensor marked dynamic compiles generic kernels from the first, unless
  // LAZYFUSE_DYNAMIC forces a policy (Note [Shape-generic kernels]).
  std::optional<config::ScopedDynamicShapes> marked;
  if (config::dynamicShapes() == config::DynamicShapes::kAuto && markedDynamic(graph)) {
    marked.emplace(config::DynamicShapes::kDynamic);
  }
  const Target& target = chooseTarget();
  auto compiled = std::make_shared<CompiledPlan>();
  compiled->target = &target;
  compiled->plan = lowerForTarget(graph, target, recurring, &compiled->fuse_when_recurring);
  if (dumpRequested("plan")) writeDump(graph, "plan", ".txt", printPlan(graph, compiled->plan));
  if (compiled->plan.kernels.empty()) return compiled;
  std::string error = compileKernels(graph, *compiled);
  if (error.empty()) return compiled;
  if (!compiled->plan.batches.empty()) {
    // The kernels without batching, before giving up fusion for the graph.
    LF_LOG_WARN("batched kernels of graph 0x", std::hex, graph.hash(), std::dec,
                " failed to compile; compiling them one by one: ", error);
    auto unbatched = std::make_shared<CompiledPlan>();
    unbatched->target = &target;
    unbatched->plan =
        lowerGraph(graph, /*fuse=*/true, /*batch=*/false, target.capabilities().lowering);
    error = compileKernels(graph, *unbatched);
    if (error.empty()) return unbatched;
  }
  // Never a wrong result: the graph runs node by node instead. See Note [When graphs are fused].
  LF_LOG_WARN("fused kernels of graph 0x", std::hex, graph.hash(), std::dec,
              " failed to compile; running it node by node: ", error);
  metrics::fusion_fallbacks.add();
  auto fallback = std::make_shared<CompiledPlan>();
  fallback->target = &target;
  fallback->plan = lowerFor(graph, target, /*fuse=*/false);
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
