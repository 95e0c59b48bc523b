// The public C++ API (include/lazyfuse/lazyfuse.h). Compiled into liblazyfuse.so itself so its
// symbols stay visible (the static folder libraries are linked with --exclude-libs).
#include <lazyfuse/lazyfuse.h>

#include "backend/aot_package.h"
#include "backend/api.h"
#include "backend/graph_executor.h"
#include "lazy_ir/metrics.h"

#include <iomanip>
#include <sstream>

namespace lazyfuse {

void markStep() { runMarkStep(); }

void wait() { waitDevice(); }

std::string metricsReport() {
  std::ostringstream out;
  for (const auto& [name, value] : metricsSnapshot()) {
    out << std::left << std::setw(32) << name << value << "\n";
  }
  return out.str();
}

AotModel::AotModel(const std::string& path) : program_(AotProgram::load(path)) {}

std::vector<at::Tensor> AotModel::run(const std::vector<at::Tensor>& inputs) const {
  return program_->run(inputs);
}

const std::string& AotModel::metadata() const { return program_->metadata(); }

}  // namespace lazyfuse
