// The public C++ API (include/lazyfuse/lazyfuse.h). Compiled into liblazyfuse.so itself so its
// symbols stay visible (the static folder libraries are linked with --exclude-libs).
#include <lazyfuse/lazyfuse.h>

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

}  // namespace lazyfuse
