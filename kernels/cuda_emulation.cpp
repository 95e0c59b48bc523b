#include "kernels/cuda_emulation.h"

#include "kernels/cuda_runner.h"
#include "kernels/detail/cuda_dialect.h"
#include "lazy_ir/check.h"

#include <mutex>

namespace lazyfuse {
namespace {

// Note [CUDA emulation]
// The shim below turns CUDA C++ into host C++: __global__/__device__ vanish, threadIdx and
// blockIdx are thread-locals, __shared__ arrays become function statics (blocks run one after
// another, so a static is exactly one block's shared memory), __syncthreads is a barrier of the
// block's threads, and a warp shuffle writes each lane's value to a slot, waits for the warp,
// reads the source lane's slot, and waits again. Each block runs with one OS thread per CUDA
// thread, so the lock-step the kernels rely on (every lane of a group reaching the same shuffle)
// is real synchronization here. Grids are kept small (kEmulatedMaxBlocks) so the grid-stride
// loops are exercised. Launches are serialized: the shim's state is global.
constexpr int kEmulatedMaxBlocks = 3;

const char* const kShim = R"LF(// lazyfuse CUDA emulation shim
#include <math.h>
#include <pthread.h>
#include <string.h>
#define LF_CUDA_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
struct lf_emu_dim3 { unsigned x, y, z; };
static thread_local lf_emu_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};
static lf_emu_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
static pthread_barrier_t lf_emu_block_barrier, lf_emu_warp_barrier[32];
static unsigned long long lf_emu_slot[1024];
static inline void __syncthreads() { pthread_barrier_wait(&lf_emu_block_barrier); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int i; memcpy(&i, &f, 4); return i; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
static inline float lf_emu_h2f(unsigned short h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
static inline unsigned short lf_emu_f2h(float f) {
  _Float16 h = (_Float16)f;
  unsigned short bits;
  memcpy(&bits, &h, 2);
  return bits;
}
/// Lane `src` of the caller's warp (width-lane segments as CUDA's width argument).
template <class T> static T lf_emu_exchange(T v, int src) {
  const unsigned t = threadIdx.x, warp = t / 32;
  memcpy(&lf_emu_slot[t], &v, sizeof(T));
  pthread_barrier_wait(&lf_emu_warp_barrier[warp]);
  T r = v;
  if (src >= 0 && src < 32) memcpy(&r, &lf_emu_slot[warp * 32 + src], sizeof(T));
  pthread_barrier_wait(&lf_emu_warp_barrier[warp]);
  return r;
}
template <class T> static T __shfl_down_sync(unsigned, T v, int d) {
  const int lane = (int)(threadIdx.x % 32);
  return lf_emu_exchange(v, lane + d < 32 ? lane + d : lane);
}
template <class T> static T __shfl_sync(unsigned, T v, int src, int width) {
  const int lane = (int)(threadIdx.x % 32);
  return lf_emu_exchange(v, lane / width * width + src % width);
}
struct lf_emu_task { unsigned block, thread; void (*run)(void*); void* body; };
static void* lf_emu_thread(void* p) {
  lf_emu_task* task = (lf_emu_task*)p;
  blockIdx.x = task->block;
  threadIdx.x = task->thread;
  task->run(task->body);
  return 0;
}
template <class F> static void lf_emu_launch(unsigned grid, unsigned block, F body) {
  gridDim.x = grid;
  blockDim.x = block;
  pthread_barrier_init(&lf_emu_block_barrier, 0, block);
  for (unsigned w = 0; w < block / 32; ++w) pthread_barrier_init(&lf_emu_warp_barrier[w], 0, 32);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  static pthread_t threads[1024];
  static lf_emu_task tasks[1024];
  for (unsigned b = 0; b < grid; ++b) {
    for (unsigned t = 0; t < block; ++t) {
      tasks[t] = lf_emu_task{b, t, [](void* f) { (*(F*)f)(); }, &body};
      pthread_create(&threads[t], &attr, lf_emu_thread, &tasks[t]);
    }
    for (unsigned t = 0; t < block; ++t) pthread_join(threads[t], 0);
  }
  pthread_attr_destroy(&attr);
  pthread_barrier_destroy(&lf_emu_block_barrier);
  for (unsigned w = 0; w < block / 32; ++w) pthread_barrier_destroy(&lf_emu_warp_barrier[w]);
}
)LF";

/// `extern "C" void lf_emu_<name>(unsigned grid, void** args)` calling kernel `name` with the
/// launch arguments unpacked as cuLaunchKernel would.
std::string launcher(const Kernel& kernel, const std::string& name, int block) {
  std::string call = name + "(";
  size_t arg = 0;
  for (const KBuffer& buffer : kernel.buffers) {
    std::string type = std::string(buffer.output ? "" : "const ") +
                       detail::cudaStorageType(buffer.dtype) + "*";
    call += std::string(arg ? ", " : "") + "(" + type + ")*(void**)args[" + std::to_string(arg) + "]";
    ++arg;
  }
  for (const KParam& param : kernel.params) {
    call += std::string(arg ? ", " : "") + (param.floating ? "*(double*)" : "*(lf_i64*)") + "args[" +
            std::to_string(arg) + "]";
    ++arg;
  }
  return "extern \"C\" void lf_emu_" + name + "(unsigned grid, void** args) {\n  lf_emu_launch(grid, " +
         std::to_string(block) + ", [args] { " + call + "); });\n}\n";
}

std::mutex& launchMutex() {
  static std::mutex* const mutex = new std::mutex();
  return *mutex;
}

}  // namespace

std::shared_ptr<const CudaEmulatedModule> compileCudaEmulation(
    const std::vector<const Kernel*>& kernels, std::string& error, bool& disk_hit) {
  CudaSource rendered = renderCuda(kernels);
  std::string source = std::string(kShim) + rendered.source + "\n";
  std::vector<std::string> names;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const CudaLaunchShape& shape = rendered.kernels[i];
    source += launcher(*kernels[i], shape.name, shape.block);
    names.push_back("lf_emu_" + shape.name);
    if (shape.vector_name.empty()) continue;
    source += launcher(*kernels[i], shape.vector_name, shape.block);
    names.push_back("lf_emu_" + shape.vector_name);
  }
  CpuCompileResult compiled = compileCpp(source, names);
  disk_hit = compiled.disk_hit;
  if (!compiled.module) {
    error = compiled.error;
    return nullptr;
  }
  auto module = std::make_shared<CudaEmulatedModule>();
  module->module = compiled.module;
  size_t next = 0;
  for (const CudaLaunchShape& shape : rendered.kernels) {
    CudaEmulatedKernel k;
    k.shape = shape;
    k.function = reinterpret_cast<CudaEmulatedFn>(compiled.module->functions.at(next++));
    if (!shape.vector_name.empty()) {
      k.vector_function = reinterpret_cast<CudaEmulatedFn>(compiled.module->functions.at(next++));
    }
    module->kernels.push_back(k);
  }
  return module;
}

void runEmulatedCudaKernel(const FusedKernel& fused, const CudaEmulatedModule& module,
                           size_t index, const Graph& graph, PlanValues& values) {
  const CudaEmulatedKernel& k = module.kernels.at(index);
  CudaLaunchArgs launch;
  prepareCudaLaunch(fused, k.shape, k.vector_function != nullptr, graph, values,
                    c10::Device(c10::DeviceType::CPU), launch);
  if (launch.points == 0) return;
  std::lock_guard<std::mutex> guard(launchMutex());
  (launch.vector ? k.vector_function : k.function)(
      cudaGridFor(launch.points, k.shape, kEmulatedMaxBlocks), launch.args.data());
}

}  // namespace lazyfuse
