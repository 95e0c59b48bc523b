// The one place lazyfuse reads its environment. See Note [Configuration].
#include "lazy_ir/config.h"

#include "lazy_ir/check.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace lazyfuse {
namespace config {
namespace {

/// The variable's value, "" when unset.
std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

/// Unset, "", "0" and "off" are off.
bool switchedOn(const char* name) {
  const std::string value = env(name);
  return !value.empty() && value != "0" && value != "off";
}

/// Unset or anything but "0" and "off" is on.
bool notSwitchedOff(const char* name) {
  const std::string value = env(name);
  return value != "0" && value != "off";
}

/// The variable as a whole number >= 0, `fallback` when unset; anything else raises
/// "<name> must be a whole number <unit>, not '<value>'".
int64_t wholeNumber(const char* name, int64_t fallback, const char* unit) {
  const std::string text = env(name);
  if (text.empty()) return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  LF_CHECK(end != nullptr && *end == '\0' && value >= 0, name, " must be a whole number ", unit,
           ", not '", text, "'");
  return value;
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {"LAZYFUSE_DEVICE", "cpu, cuda", "CUDA when usable, else the CPU", ReadAt::kOnce,
       "the hardware device lazy tensors execute on; anything else raises"},
      {"LAZYFUSE_LOG_LEVEL", "debug (or trace), info, warn, error, off", "warn", ReadAt::kOnce,
       "what the library logs to stderr"},
      {"LAZYFUSE_FUSION", "auto, always (or 1), 0 (or off)", "auto", ReadAt::kEachGraph,
       "when graphs are compiled into fused kernels (auto: graphs with enough work)"},
      {"LAZYFUSE_NVRTC_CHECK", "a compute capability: 90 or sm_90", "no check", ReadAt::kOnce,
       "also render every CPU-fused graph as CUDA and compile it with NVRTC, counting "
       "CudaCheckFailures; an invalid value warns and checks nothing"},
      {"LAZYFUSE_CUDA_EMULATION", "anything but empty, 0, off", "off", ReadAt::kEachGraph,
       "run the CUDA rendering of fused kernels on the CPU (tests without a GPU)"},
      {"LAZYFUSE_DUMP", "a text containing ir, plan, cpp, cuda", "no dumps", ReadAt::kOnce,
       "write the graph, the plan, the C++ or the CUDA source of each new graph to files"},
      {"LAZYFUSE_DUMP_DIR", "a folder (made if missing)", "the current folder", ReadAt::kEachUse,
       "where dumps go: lazyfuse-graph-<hash>.txt, lazyfuse-plan-<hash>.txt, "
       "lazyfuse-kernels-<hash>.cpp or .cu"},
      {"LAZYFUSE_DYNAMIC", "auto, static, dynamic", "auto", ReadAt::kEachGraph,
       "which integer constants of compiled kernels become run-time arguments (auto: those that "
       "changed when a kernel came back with other sizes, and those equal to one of them at "
       "first; static: none; dynamic: all but 0 and 1)"},
      {"LAZYFUSE_VERIFY_META", "anything but empty, 0, off", "off", ReadAt::kOnce,
       "also infer on Meta every call whose outputs a size-generic template or a shape function "
       "gave, and every view geometry computed without Meta, and fail on a difference (a check "
       "of lazyfuse itself)"},
      {"LAZYFUSE_LOG_RECOMPILES", "anything but empty, 0, off", "off", ReadAt::kEachGraph,
       "log each kernel compiled for a kernel already compiled with other constants, and why"},
      {"LAZYFUSE_DONATE", "0 or off", "on", ReadAt::kOnce,
       "let fused kernels write their outputs into the memory of inputs nothing else holds"},
      {"LAZYFUSE_CUDA_GRAPHS", "0 or off", "on", ReadAt::kEachRun,
       "replay recurring plans on a GPU as CUDA graphs"},
      {"LAZYFUSE_ASYNC", "anything but empty, 0, off", "off", ReadAt::kEachRun,
       "on the CPU, mark_step() hands the step's plan to a worker thread and returns; the next "
       "sync waits for it"},
      {"LAZYFUSE_BUFFER_POOL_MB", "a whole number of MiB, 0 turns the pool off", "1024",
       ReadAt::kOnce, "the most memory the CPU buffer pool keeps for reuse"},
      {"LAZYFUSE_TRACE_LIMIT", "a whole number of ops, 0 turns cuts off", "10000", ReadAt::kEachRun,
       "ops recorded since the last sync at which the trace is cut (every live tensor "
       "synced), and at a repeated step before it (Note [Automatic step boundaries]); read at each "
       "sync"},
      {"LAZYFUSE_CACHE_DIR", "a folder (created 0700)",
       "$XDG_CACHE_HOME/lazyfuse, else $HOME/.cache/lazyfuse", ReadAt::kEachUse,
       "the disk cache of compiled kernels"},
      {"XDG_CACHE_HOME", "a folder", "unset", ReadAt::kEachUse,
       "base of the disk cache without LAZYFUSE_CACHE_DIR"},
      {"HOME", "a folder", "the password entry's home, else /tmp", ReadAt::kEachUse,
       "base of the disk cache without LAZYFUSE_CACHE_DIR and XDG_CACHE_HOME"},
      {"TMPDIR", "a folder", "/tmp", ReadAt::kOnce,
       "base of the private temporary folder used when the cache folder is not private"},
      {"LAZYFUSE_CXX", "a compiler name or path", "unset", ReadAt::kOnce,
       "the C++ compiler of CPU kernels, tried first"},
      {"CXX", "a compiler name or path", "unset", ReadAt::kOnce,
       "the C++ compiler tried next, before c++ and g++"},
      {"PATH", "folders", "/usr/local/bin:/usr/bin:/bin", ReadAt::kOnce,
       "where a compiler name without '/' is looked up (when the compiler is first needed)"},
      {"LAZYFUSE_NVRTC", "a path to libnvrtc", "unset", ReadAt::kOnce,
       "the NVRTC library, tried before torch's wheels and the CUDA toolkit"},
      {"CUDA_HOME", "a folder", "unset", ReadAt::kOnce,
       "<dir>/lib64/libnvrtc.so is tried after torch's wheels"},
      {"CUDA_PATH", "a folder", "unset", ReadAt::kOnce, "as CUDA_HOME"},
  };
  return table;
}

const char* readAtName(ReadAt read_at) {
  switch (read_at) {
    case ReadAt::kOnce: return "once";
    case ReadAt::kEachGraph: return "each graph";
    case ReadAt::kEachRun: return "each run";
    case ReadAt::kEachUse: return "each use";
  }
  return "";
}

std::string rawValue(const char* name) {
  bool known = false;
  for (const Setting& s : settings()) known = known || std::strcmp(s.name, name) == 0;
  LF_INTERNAL_ASSERT(known, "no setting named ", name);
  return env(name);
}

std::string device() {
  static const std::string choice = env("LAZYFUSE_DEVICE");
  LF_CHECK(choice.empty() || choice == "cuda" || choice == "cpu",
           "LAZYFUSE_DEVICE must be cuda or cpu, got '", choice, "'");
  return choice;
}

LogLevel logLevel() {
  static const LogLevel level = [] {
    const std::string text = env("LAZYFUSE_LOG_LEVEL");
    if (text == "debug" || text == "trace") return LogLevel::kDebug;
    if (text == "info") return LogLevel::kInfo;
    if (text == "error") return LogLevel::kError;
    if (text == "off") return LogLevel::kOff;
    return LogLevel::kWarn;
  }();
  return level;
}

Fusion fusion() {
  const std::string mode = env("LAZYFUSE_FUSION");
  if (mode == "0" || mode == "off") return Fusion::kOff;
  return mode == "always" || mode == "1" ? Fusion::kAlways : Fusion::kAuto;
}

int nvrtcCheckArch(std::string* problem) {
  static const std::string text = env("LAZYFUSE_NVRTC_CHECK");
  std::string digits = text.rfind("sm_", 0) == 0 ? text.substr(3) : text;
  const int value = digits.empty() ? 0 : std::atoi(digits.c_str());
  if (!digits.empty() && value <= 0) {
    if (problem != nullptr) {
      *problem = "LAZYFUSE_NVRTC_CHECK must be a compute capability such as 90, got '" + digits +
                 "': no check";
    }
    return 0;
  }
  return value;
}

bool cudaEmulation() { return switchedOn("LAZYFUSE_CUDA_EMULATION"); }

bool dumpRequested(const char* what) {
  static const std::string dump = env("LAZYFUSE_DUMP");
  return dump.find(what) != std::string::npos;
}

std::string dumpDirectory() { return env("LAZYFUSE_DUMP_DIR"); }

namespace {
thread_local int dynamic_override = -1;  // a DynamicShapes, or -1: the environment decides
}  // namespace

ScopedDynamicShapes::ScopedDynamicShapes(DynamicShapes mode) : previous_(dynamic_override) {
  dynamic_override = static_cast<int>(mode);
}

ScopedDynamicShapes::~ScopedDynamicShapes() { dynamic_override = previous_; }

DynamicShapes dynamicShapes() {
  if (dynamic_override >= 0) return static_cast<DynamicShapes>(dynamic_override);
  const std::string text = env("LAZYFUSE_DYNAMIC");
  if (text.empty() || text == "auto") return DynamicShapes::kAuto;
  if (text == "static") return DynamicShapes::kStatic;
  LF_CHECK(text == "dynamic", "LAZYFUSE_DYNAMIC must be auto, static or dynamic, got '", text, "'");
  return DynamicShapes::kDynamic;
}

bool logRecompiles() { return switchedOn("LAZYFUSE_LOG_RECOMPILES"); }

bool verifyMeta() {
  static const bool enabled = switchedOn("LAZYFUSE_VERIFY_META");
  return enabled;
}

bool donation() {
  static const bool enabled = notSwitchedOff("LAZYFUSE_DONATE");
  return enabled;
}

bool cudaGraphs() { return notSwitchedOff("LAZYFUSE_CUDA_GRAPHS"); }

bool asyncSteps() { return switchedOn("LAZYFUSE_ASYNC"); }

size_t bufferPoolLimitBytes() {
  const int64_t mb = wholeNumber("LAZYFUSE_BUFFER_POOL_MB", 1024, "of MiB (0 turns the pool off)");
  return static_cast<size_t>(mb) << 20;
}

namespace {
thread_local int64_t trace_limit_override = -1;  // -1: the environment decides
}  // namespace

int64_t traceLimit() {
  if (trace_limit_override >= 0) return trace_limit_override;
  return wholeNumber("LAZYFUSE_TRACE_LIMIT", 10000, "of ops (0: no bound)");
}

int64_t overrideTraceLimit(int64_t limit) {
  const int64_t previous = trace_limit_override;
  trace_limit_override = limit < 0 ? -1 : limit;
  return previous;
}

std::string cacheDirectory() {
  if (std::string dir = env("LAZYFUSE_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/lazyfuse";
  std::string home = env("HOME");
  if (home.empty()) {
    const passwd* entry = getpwuid(geteuid());
    home = entry != nullptr && entry->pw_dir != nullptr ? entry->pw_dir : "/tmp";
  }
  return home + "/.cache/lazyfuse";
}

std::vector<std::string> compilerCandidates() {
  static const std::vector<std::string> candidates = [] {
    std::vector<std::string> names;
    for (const char* name : {"LAZYFUSE_CXX", "CXX"}) {
      if (std::string value = env(name); !value.empty()) names.push_back(value);
    }
    names.push_back("c++");
    names.push_back("g++");
    return names;
  }();
  return candidates;
}

std::string searchPath() {
  const char* path = std::getenv("PATH");
  return path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
}

std::string nvrtcLibrary() {
  static const std::string path = env("LAZYFUSE_NVRTC");
  return path;
}

std::vector<std::string> cudaToolkitNvrtc() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> found;
    for (const char* name : {"CUDA_HOME", "CUDA_PATH"}) {
      if (std::string home = env(name); !home.empty()) found.push_back(home + "/lib64/libnvrtc.so");
    }
    return found;
  }();
  return paths;
}

std::string tempDirectory() {
  static const std::string dir = [] {
    std::string tmp = env("TMPDIR");
    return tmp.empty() ? std::string("/tmp") : tmp;
  }();
  return dir;
}

}  // namespace config
}  // namespace lazyfuse
