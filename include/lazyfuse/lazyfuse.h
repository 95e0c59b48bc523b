#pragma once

// lazyfuse's C++ API. Linking liblazyfuse.so registers the Lazy device's kernels; tensors made
// on c10::DeviceType::Lazy then record instead of running. The same calls are reachable as
// torch.ops.lazyfuse.* through the dispatcher.

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

class AotProgram;

/// Syncs every live lazy tensor and starts a new trace.
void markStep();
/// Waits for work queued on the hardware device.
void wait();
/// Counters and timers as a readable table.
std::string metricsReport();

/// A model exported ahead of time by `lazyfuse.aot_compile(exported_program, path)` in Python:
/// its graph, weights and compiled kernels, run with no Python (the README's "Ahead-of-time
/// packages"). Loading refuses a file that is damaged or was built by another lazyfuse or torch
/// version or for another architecture.
class AotModel {
 public:
  explicit AotModel(const std::string& path);
  /// The outputs for `inputs`, tensors of the dtypes and sizes the model was exported with, on
  /// the CPU (or the hardware device); the outputs are on the hardware device.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  /// What the exporting side stored with the model (lazyfuse's Python side: a JSON object).
  const std::string& metadata() const;

 private:
  std::shared_ptr<const AotProgram> program_;
};

}  // namespace lazyfuse
