// The lazyfuse operator library: the API reachable as torch.ops.lazyfuse.* from Python and C++.
#include "backend/api.h"

#include "backend/device.h"
#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "backend/transfers.h"
#include "kernels/buffer_pool.h"
#include "kernels/plan_runner.h"
#include "kernels/python_plugin.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/record_function.h>
#include <torch/library.h>

#include <mutex>
#include <tuple>

namespace lazyfuse {

void syncAllLive() {
  checkBackend();
  syncLiveTensors();
}

void runMarkStep() {
  RECORD_USER_SCOPE("lazyfuse::mark_step");
  syncAllLive();
  metrics::mark_steps.add();
}

void manualSeed(int64_t seed) {
  initPythonDevice(hardwareDevice().type());  // Note [Seeds queued before CUDA starts]
  at::Generator gen = at::globalContext().defaultGenerator(hardwareDevice());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(static_cast<uint64_t>(seed));
}

namespace {

void syncTensors(at::TensorList tensors) {
  checkBackend();
  std::vector<c10::intrusive_ptr<LazyData>> data;
  for (const at::Tensor& t : tensors) {
    data.push_back(lazyImplOrRaise(t, "sync: expected lazy tensors").dataPtr());
  }
  syncData(data);
}

std::tuple<std::vector<std::string>, std::vector<int64_t>> metricsOp() {
  std::vector<std::string> names;
  std::vector<int64_t> values;
  for (auto& [name, value] : metricsSnapshot()) {
    names.push_back(name);
    values.push_back(value);
  }
  names.push_back("GraphCacheSize");
  values.push_back(static_cast<int64_t>(graphCacheSize()));
  return {names, values};
}

std::string dumpIr(at::TensorList tensors, c10::string_view format) {
  return dumpGraph(tensors.vec(), std::string(format));
}

std::string hardwareDeviceName() { return hardwareDevice().str(); }

int64_t tensorId(const at::Tensor& tensor) {
  return lazyImplOrRaise(tensor, "tensor_id: expected a lazy tensor").data().id();
}

/// lazyfuse.mark_dynamic: the graphs that read the tensor's current value compile generic
/// kernels from their first compile (Note [Shape-generic kernels]).
void markDynamic(const at::Tensor& tensor, int64_t dim) {
  LazyTensorImpl& impl = lazyImplOrRaise(tensor, "mark_dynamic: expected a lazy tensor");
  const int64_t rank = tensor.dim();
  TORCH_CHECK_INDEX(dim >= -std::max<int64_t>(rank, 1) && dim < std::max<int64_t>(rank, 1),
                    "Dimension out of range (expected to be in range of [",
                    -std::max<int64_t>(rank, 1), ", ", std::max<int64_t>(rank, 1) - 1,
                    "], but got ", dim, ")");
  impl.data().asInput().node->markDynamic();
}

/// See Note [Plan steps in the profiler].
std::tuple<std::vector<std::string>, std::vector<int64_t>> lastPlanProfileOp() {
  PlanProfile profile = lastPlanProfile();
  if (!profile.labels) return {};
  return {*profile.labels, std::move(profile.step_ns)};
}

std::vector<int64_t> bufferPoolStatsOp() {
  const BufferPoolStats s = bufferPoolStats();
  return {static_cast<int64_t>(s.cached_bytes), static_cast<int64_t>(s.limit_bytes),
          static_cast<int64_t>(s.hits), static_cast<int64_t>(s.misses)};
}

/// Every setting of Note [Configuration]: names, accepted values, defaults, when each is read,
/// effects, and the current values ("" when unset).
using ConfigTable =
    std::tuple<std::vector<std::string>, std::vector<std::string>, std::vector<std::string>,
               std::vector<std::string>, std::vector<std::string>, std::vector<std::string>>;
ConfigTable configOp() {
  ConfigTable table;
  for (const config::Setting& s : config::settings()) {
    std::get<0>(table).push_back(s.name);
    std::get<1>(table).push_back(s.values);
    std::get<2>(table).push_back(s.fallback);
    std::get<3>(table).push_back(config::readAtName(s.read_at));
    std::get<4>(table).push_back(s.effect);
    std::get<5>(table).push_back(config::rawValue(s.name));
  }
  return table;
}

}  // namespace

TORCH_LIBRARY(lazyfuse, m) {
  m.def("mark_step() -> ()", &runMarkStep);
  m.def("wait() -> ()", &waitDevice);
  m.def("sync(Tensor[] tensors) -> ()", &syncTensors);
  m.def("metrics() -> (str[], int[])", &metricsOp);
  m.def("reset_metrics() -> ()", &resetMetrics);
  m.def("dump_ir(Tensor[] tensors, str format) -> str", &dumpIr);
  m.def("hardware_device() -> str", &hardwareDeviceName);
  m.def("manual_seed(int seed) -> ()", &manualSeed);
  m.def("check_backend() -> ()", &checkBackend);
  m.def("clear_graph_cache() -> ()", &clearGraphCache);
  m.def("tensor_id(Tensor tensor) -> int", &tensorId);
  m.def("mark_dynamic(Tensor tensor, int dim) -> ()", &markDynamic);
  m.def("empty_cache() -> ()", &releaseCachedBuffers);
  m.def("buffer_pool_stats() -> int[]", &bufferPoolStatsOp);
  m.def("last_plan_profile() -> (str[], int[])", &lastPlanProfileOp);
  m.def("config() -> (str[], str[], str[], str[], str[], str[])", &configOp);
  m.def("share_into_lazy(Tensor tensor) -> Tensor", &shareIntoLazy);
  m.def("share_out_of_lazy(Tensor tensor) -> Tensor", &shareOutOfLazy);
}

}  // namespace lazyfuse
