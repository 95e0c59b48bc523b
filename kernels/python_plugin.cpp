#include "kernels/python_plugin.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

namespace lazyfuse {

// Note [Seeds queued before CUDA starts]
// torch.manual_seed(s) seeds CUDA's generators through torch.cuda.manual_seed_all, which, while
// torch's Python side has not initialized CUDA (torch.cuda._initialized), only queues the call
// for torch.cuda._lazy_init to run. lazyfuse uses CUDA from C++, which initializes the device
// for C++ but not for torch's Python side: a program that seeds and then works on lazy tensors
// only drew from the unseeded generator (Note [Random ops draw when recorded]), and the queued
// seed would run whenever Python first touched CUDA, resetting the generator in the middle of
// the program. So before lazyfuse first reads a non-CPU device's default generator, it has
// torch's Python side initialize that device, which runs the queued calls, as eager's first
// CUDA op does. Nothing happens outside Python or for the CPU.

void* pythonPluginFunction(const char* name) {
  static void* const handle = []() -> void* {
    auto initialized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    if (initialized == nullptr || initialized() == 0) return nullptr;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&pythonPluginFunction), &info) || !info.dli_fname) {
      return nullptr;
    }
    std::string path = info.dli_fname;
    path = path.substr(0, path.find_last_of('/') + 1) + "liblazyfuse_python.so";
    return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }();
  return handle == nullptr ? nullptr : dlsym(handle, name);
}

void initPythonDevice(c10::DeviceType type) {
  if (type == c10::DeviceType::CPU) return;
  // No lock around the call into Python: torch.cuda._lazy_init has its own, and runs once.
  static std::atomic<bool> done[static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)];
  std::atomic<bool>& is_done = done[static_cast<int>(type)];
  if (is_done.load(std::memory_order_acquire)) return;
  using Init = void (*)(const char*);
  auto init = reinterpret_cast<Init>(pythonPluginFunction("lazyfuse_python_device_init"));
  if (init != nullptr) init(c10::DeviceTypeName(type, /*lower_case=*/true).c_str());
  is_done.store(true, std::memory_order_release);  // not when init threw: the next read asks again
}

}  // namespace lazyfuse
