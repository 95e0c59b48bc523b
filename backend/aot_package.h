#pragma once

// Ahead-of-time packages: a recorded graph, its weights and its compiled kernels in one file
// that a program without Python runs. See Note [Ahead-of-time packages] in aot_package.cpp.

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

/// Writes the package of the graph that computes the lazy tensors `outputs` from the lazy
/// tensors `inputs` (every other tensor it reads becomes a weight of the package) to `path`,
/// after compiling its plan; `metadata` is stored as given (aot_load's Python side keeps the
/// input and output structure there).
void saveAotPackage(const std::string& path, const std::vector<at::Tensor>& inputs,
                    const std::vector<at::Tensor>& outputs, const std::string& metadata);

/// A package loaded and checked, ready to run.
class AotProgram {
 public:
  /// Reads and checks `path`; raises a clear error for a file that is not a package, is damaged,
  /// or was written by another lazyfuse or torch version or for another architecture.
  static std::shared_ptr<const AotProgram> load(const std::string& path);

  /// The outputs for `inputs` (tensors with the dtypes and sizes the package was built for, on
  /// the CPU or the hardware device), on the hardware device.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  const std::string& metadata() const { return metadata_; }

  struct Record;  // one node of the graph, as the package holds it

 private:
  AotProgram() = default;
  static std::shared_ptr<const AotProgram> decodePackage(const std::vector<c10::IValue>& fields,
                                                         const std::string& path, bool kernels_fit);

  std::vector<Record> records_;
  std::vector<at::Tensor> constants_;    // the weights the records hold (outputs never alias them)
  std::vector<at::Tensor> input_specs_;  // meta tensors: dtype, sizes and strides of each input
  std::vector<std::pair<uint32_t, uint32_t>> outputs_;  // node position, output index
  std::string metadata_;
  std::string path_;
};

}  // namespace lazyfuse
