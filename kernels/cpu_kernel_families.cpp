// Families of CPU kernel functions (Note [Shape-generic kernels] in kernels/kernel_constants.h).
#include "kernels/cpu_kernel_families.h"

#include "kernels/kernel_families.h"
#include "lazy_ir/check.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

namespace lazyfuse {
namespace {

/// The CPU target's families, and the compiled functions by name.
struct CpuFamilies {
  KernelFamilies choices;
  std::mutex mutex;
  std::map<std::string, std::pair<CpuKernelFn, std::shared_ptr<const CpuModule>>> functions;
};

CpuFamilies& cpuFamilies() {
  static CpuFamilies* all = new CpuFamilies();
  return *all;
}

/// One function of the plan and what runs it.
struct Need {
  const CpuFunction* function = nullptr;
  KernelText text;
  std::string family;  // shape and the number of parameters before the arguments
  size_t params = 0;   // iparams the function takes before its constant arguments
  FamilyChoice choice;
};

size_t planKernels(const CpuFunction& f) { return f.epilogue ? 2 : 1; }

/// The text `need` compiles as: its argument constants read from iparams after its own
/// parameters into locals at the top of the function.
std::string cpuVariantText(const Need& need) {
  std::string declarations;
  const size_t count = need.choice.arguments().size();
  for (size_t k = 0; k < count; ++k) {
    declarations += "  const lf_i64 lf_a" + std::to_string(k) + " = iparams[" +
                    std::to_string(need.params + k) + "];\n";
  }
  std::string text =
      variantText(need.text, need.choice, [](size_t k) { return "lf_a" + std::to_string(k); });
  if (declarations.empty()) return text;
  const size_t body = text.find("{\n");
  LF_INTERNAL_ASSERT(body != std::string::npos, "kernel function without a body");
  return text.insert(body + 2, declarations);
}

void choose(std::vector<Need>& needs, config::DynamicShapes mode) {
  for (Need& need : needs) {
    need.choice = cpuFamilies().choices.choose(need.text, need.family, need.function->name, mode);
  }
}

/// Compiles the chosen functions not compiled yet, in one source; "" or the compiler's error.
std::string compileNeeds(const std::vector<Need>& needs, CpuPlanFunctions& out) {
  std::string source = renderCppHeader();
  std::vector<std::string> names;
  for (const Need& need : needs) {
    if (need.choice.compiled ||
        std::find(names.begin(), names.end(), need.choice.name) != names.end()) {
      continue;
    }
    source += "\n" + cpuVariantText(need);
    names.push_back(need.choice.name);
  }
  if (names.empty()) return "";
  CpuCompileResult result = compileCpp(source, names);
  if (!result.module) return result.error;
  CpuFamilies& all = cpuFamilies();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    for (size_t i = 0; i < names.size(); ++i) {
      all.functions[names[i]] = {result.module->functions.at(i), result.module};
    }
  }
  for (const Need& need : needs) {
    if (need.choice.compiled) continue;
    all.choices.compiled(need.choice);
    (result.disk_hit ? out.disk : out.compiled) +=
        static_cast<int64_t>(planKernels(*need.function));
    if (!need.choice.reason.empty()) {
      out.generalized += static_cast<int64_t>(planKernels(*need.function));
      out.recompiles.push_back(need.choice.reason);
    }
  }
  return "";
}

}  // namespace

CpuPlanFunctions compileCpuFunctions(const std::vector<CpuFunction>& functions) {
  CpuPlanFunctions out;
  const config::DynamicShapes mode = config::dynamicShapes();
  std::vector<Need> needs(functions.size());
  for (size_t i = 0; i < functions.size(); ++i) {
    Need& need = needs[i];
    need.function = &functions[i];
    need.text = splitConstants(renderCppFunction(functions[i]), functions[i].name);
    need.params = functions[i].kernel->params.size() +
                  (functions[i].epilogue ? functions[i].epilogue->params.size() : 0);
    need.family = "cpu\n" + need.text.shape + '\0' + std::to_string(need.params);
  }
  choose(needs, mode);
  std::string error = compileNeeds(needs, out);
  if (!error.empty()) {
    // A generic function that does not compile (a constant the language needs at compile time
    // became an argument): its family is specialized from now on, and the plan compiles again.
    bool generic = false;
    for (const Need& need : needs) {
      const std::vector<bool>& r = need.choice.runtime;
      if (need.choice.compiled || std::find(r.begin(), r.end(), true) == r.end()) continue;
      cpuFamilies().choices.specializeOnly(need.family);
      generic = true;
    }
    if (generic) {
      out = CpuPlanFunctions();
      choose(needs, mode);
      error = compileNeeds(needs, out);
    }
    if (!error.empty()) {
      out.error = error;
      return out;
    }
  }
  CpuFamilies& all = cpuFamilies();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const Need& need : needs) {
    const auto& [fn, module] = all.functions.at(need.choice.name);
    const int64_t kernels = static_cast<int64_t>(planKernels(*need.function));
    if (need.choice.compiled) {
      out.reused += kernels;
      if (need.choice.dynamic) out.dynamic += kernels;
    }
    out.functions.push_back(fn);
    out.modules.push_back(module);
    out.arguments.push_back(need.choice.arguments());
    if (need.function->epilogue) {
      out.functions.push_back(nullptr);
      out.arguments.emplace_back();
    }
  }
  return out;
}

}  // namespace lazyfuse
