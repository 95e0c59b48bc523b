#pragma once

// lazyfuse's C++ API. Linking liblazyfuse.so registers the Lazy device's kernels; tensors made
// on c10::DeviceType::Lazy then record instead of running. The same calls are reachable as
// torch.ops.lazyfuse.* through the dispatcher.

#include <string>

namespace lazyfuse {

/// Syncs every live lazy tensor and starts a new trace.
void markStep();
/// Waits for work queued on the hardware device.
void wait();
/// Counters and timers as a readable table.
std::string metricsReport();

}  // namespace lazyfuse
