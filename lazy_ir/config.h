#pragma once

// Note [Configuration]
// Every switch lazyfuse reads from the environment is read in lazy_ir/config.cpp and nowhere
// else: one accessor per setting, which parses and checks its value, and one table (`settings`)
// that names each variable, its values, its default, when it is read and what it does. The
// README's configuration table lists the same rows; test_config.py compares the two, and
// `lazyfuse.config()` shows the current value of each (a setting read once keeps the value it
// had then).
//
// When a setting is read matters, and is part of its contract:
//   kOnce       the first time it is needed; later changes have no effect in this process
//   kEachGraph  each time a new graph is lowered (cached plans keep their decision)
//   kEachRun    each time a plan runs
//   kEachUse    each time the value is needed (e.g. the folder a dump is written to)
// The file includes no torch header, so backend/logging.cpp (which must not: Note [Logging]) can
// use it.

#include <cstddef>
#include <string>
#include <vector>

namespace lazyfuse {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

namespace config {

enum class ReadAt { kOnce, kEachGraph, kEachRun, kEachUse };

struct Setting {
  const char* name;      // the environment variable
  const char* values;    // what it accepts
  const char* fallback;  // what holds when it is unset
  ReadAt read_at;
  const char* effect;
};

/// Every environment variable lazyfuse reads, the README's table in the same order.
const std::vector<Setting>& settings();
/// "once", "each graph", "each run", "each use".
const char* readAtName(ReadAt read_at);
/// The raw value of setting `name` (one of `settings()`), "" when unset; for lazyfuse.config().
std::string rawValue(const char* name);

/// LAZYFUSE_DEVICE: "" (unset: CUDA when usable), "cpu" or "cuda"; anything else raises. Once.
std::string device();
/// LAZYFUSE_LOG_LEVEL: debug (or trace), info, warn, error, off; unset or other: warn. Once.
LogLevel logLevel();

enum class Fusion { kOff, kAuto, kAlways };
/// LAZYFUSE_FUSION: auto (default), always or 1, 0 or off. Each graph.
/// See Note [When graphs are fused].
Fusion fusion();
/// LAZYFUSE_NVRTC_CHECK: the compute capability (90 or sm_90) every CPU-fused graph is also
/// compiled for with NVRTC; 0 when unset. An invalid value gives 0 and sets `problem`. Once.
int nvrtcCheckArch(std::string* problem);
/// LAZYFUSE_CUDA_EMULATION: anything but unset, "", 0 or off runs the CUDA rendering of fused
/// kernels on the CPU (Note [CUDA emulation]). Each graph.
bool cudaEmulation();
/// LAZYFUSE_DUMP: true when it contains `what` (ir, plan, cpp, cuda). Once.
bool dumpRequested(const char* what);
/// LAZYFUSE_DUMP_DIR: the dump folder; "" when unset (the current folder). Each use.
std::string dumpDirectory();
enum class DynamicShapes { kAuto, kStatic, kDynamic };
/// LAZYFUSE_DYNAMIC: auto (default), static or dynamic; anything else raises. Each graph. See
/// Note [Shape-generic kernels] in kernels/kernel_constants.h.
DynamicShapes dynamicShapes();
/// Makes dynamicShapes() return `mode` on this thread while it lives (a graph that reads a tensor
/// marked with lazyfuse.mark_dynamic compiles under kDynamic).
class ScopedDynamicShapes {
 public:
  explicit ScopedDynamicShapes(DynamicShapes mode);
  ~ScopedDynamicShapes();
  ScopedDynamicShapes(const ScopedDynamicShapes&) = delete;
  ScopedDynamicShapes& operator=(const ScopedDynamicShapes&) = delete;

 private:
  int previous_;
};
/// LAZYFUSE_LOG_RECOMPILES: anything but unset, "", 0 or off logs every recompile of a kernel
/// family with its reason. Each graph.
bool logRecompiles();
/// LAZYFUSE_VERIFY_META: check every meta template, shape function and computed view geometry on
/// Meta (Note [Size-generic meta], Note [Shape functions], Note [View geometry]).
bool verifyMeta();
/// LAZYFUSE_DONATE: 0 or off turns donation off (Note [Donated buffers]). Once.
bool donation();
/// LAZYFUSE_CUDA_GRAPHS: 0 or off turns CUDA graph replay off. Each run.
bool cudaGraphs();
/// LAZYFUSE_ASYNC: anything but unset, "", 0 or off runs mark_step()'s plans on a worker thread
/// on the CPU (Note [Asynchronous steps] in backend/graph_executor.cpp). Each mark_step.
bool asyncSteps();
/// LAZYFUSE_BUFFER_POOL_MB: the CPU buffer pool's limit in bytes (default 1 GiB; 0 turns it
/// off); a value that is not a whole number raises. Once.
size_t bufferPoolLimitBytes();
/// LAZYFUSE_TRACE_LIMIT: ops recorded since the last sync at which the trace is cut (default
/// 10,000; 0: no automatic cuts at all); a value that is not a whole number raises. Read at each
/// sync. See Note [Automatic step boundaries] in backend/step_boundaries.h.
int64_t traceLimit();
/// Makes traceLimit() return `limit` on this thread (-1: LAZYFUSE_TRACE_LIMIT again); returns the
/// override it replaces. aot_compile records with cuts off (Note [Ahead-of-time packages]).
int64_t overrideTraceLimit(int64_t limit);
/// LAZYFUSE_CACHE_DIR, else $XDG_CACHE_HOME/lazyfuse, else <home>/.cache/lazyfuse with home from
/// HOME, the password entry, or /tmp. Each use.
std::string cacheDirectory();
/// The C++ compilers to try, in order: $LAZYFUSE_CXX, $CXX (when set), c++, g++. Once.
std::vector<std::string> compilerCandidates();
/// PATH, or /usr/local/bin:/usr/bin:/bin when unset. Read when the compiler is first looked up.
std::string searchPath();
/// $LAZYFUSE_NVRTC, or "". Once.
std::string nvrtcLibrary();
/// <dir>/lib64/libnvrtc.so for CUDA_HOME and CUDA_PATH where set. Once.
std::vector<std::string> cudaToolkitNvrtc();
/// TMPDIR, or /tmp. Once.
std::string tempDirectory();

}  // namespace config
}  // namespace lazyfuse
