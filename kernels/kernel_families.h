#pragma once

// Which compiled function runs each rendered kernel function: the policy of Note [Shape-generic
// kernels] (kernels/kernel_constants.h), shared by the targets. A target splits each function it
// renders, asks `choose`, compiles the functions chosen that are not compiled yet, and reports
// them with `compiled`; it keeps its own handles by function name.

#include "kernels/kernel_constants.h"
#include "lazy_ir/config.h"

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace lazyfuse {

struct FamilyChoice {
  std::string family;              // the key of the function's family
  std::vector<int64_t> constants;  // the function's constants
  std::vector<bool> runtime;       // which of them are arguments of the function that runs it
  std::string name;                // the name of that function: lf_f<16 hex digits>
  bool compiled = false;           // it was compiled before
  bool dynamic = false;            // compiled before, and runs with other values of its arguments
  std::string reason;              // why, for a new generic function of a family seen before
  /// The constants passed as arguments, in order.
  std::vector<int64_t> arguments() const;
};

class KernelFamilies {
 public:
  /// The function that runs `text`, a function of the family `family` (its shape, and whatever
  /// else its code depends on that the shape does not show); `label` names it in `reason`.
  FamilyChoice choose(const KernelText& text, const std::string& family, const std::string& label,
                      config::DynamicShapes mode);
  /// The function `choice` names is compiled: later choices may take it.
  void compiled(const FamilyChoice& choice);
  /// A generic function of `family` failed to compile: the family is specialized from now on.
  void specializeOnly(const std::string& family);

 private:
  struct Variant {
    std::vector<int64_t> constants;
    std::vector<bool> runtime;
    size_t num_runtime = 0;
    std::string name;
  };
  struct Family {
    std::vector<int64_t> first;  // the constants it was first seen with
    std::vector<bool> varied;    // the constants seen with another value since
    std::vector<Variant> variants;
    bool specialize_only = false;
  };
  std::mutex mutex_;
  std::unordered_map<std::string, Family> families_;
};

/// `choice`'s function text: `text` named `choice.name`, argument k (the k-th runtime constant)
/// written as `argument(k)`.
std::string variantText(const KernelText& text, const FamilyChoice& choice,
                        const std::function<std::string(size_t)>& argument);

}  // namespace lazyfuse
