#pragma once

// liblazyfuse_python.so, loaded on demand: see Note [Python signal plugin] (CMakeLists.txt).

#include <c10/core/DeviceType.h>

namespace lazyfuse {

/// A C function of liblazyfuse_python.so, or nullptr outside a Python process (or where the
/// plugin was not built). The plugin is loaded the first time any function is asked for.
void* pythonPluginFunction(const char* name);

/// Inside Python, makes torch's Python side initialize `type` (torch.cuda._lazy_init()) before
/// lazyfuse reads that device's default generator: see Note [Seeds queued before CUDA starts].
/// Once per process and device type; nothing outside Python or for the CPU. Throws what Python
/// raised when the initialization fails.
void initPythonDevice(c10::DeviceType type);

}  // namespace lazyfuse
