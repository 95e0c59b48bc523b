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

// Note [Kernels in a package]
// An ahead-of-time package (Note [Ahead-of-time packages] in backend/aot_package.cpp) carries
// the shared objects its plan's kernel functions were compiled into, so that a machine without
// a compiler runs the same fused kernels. A function's name is the hash of its text (Note
// [Shape-generic kernels]): the plan lowered from the package's graph on a machine with the
// same CPU, lazyfuse version and static kernels (both the package's compile and its runs choose
// specialized functions) asks for the same names. addPackagedCpuModules records each name's
// module; a plan that needs one of them loads its module from the bytes (once, from memory:
// memfd) instead of compiling, and the function counts as a disk hit. A name no package has, or
// whose module does not load (a warning says why), is compiled as usual.

/// The CPU target's families, and the compiled functions by name.
struct CpuFamilies {
  KernelFamilies choices;
  std::mutex mutex;
  std::map<std::string, std::pair<CpuKernelFn, std::shared_ptr<const CpuModule>>> functions;
  /// Functions of ahead-of-time packages not loaded yet, by name: the module that holds them.
  std::map<std::string, std::shared_ptr<const PackagedCpuModule>> packaged;
  bool any_packaged = false;
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
  bool from_package = false;  // loaded from a package for this plan (a disk hit, not reused)
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

/// Loads the packaged modules that hold chosen functions not compiled yet (Note [Kernels in a
/// package]); a module that does not load is dropped (logged once), and its functions are
/// compiled as usual.
void loadPackaged(std::vector<Need>& needs, CpuPlanFunctions& out) {
  CpuFamilies& all = cpuFamilies();
  for (Need& need : needs) {
    if (need.choice.compiled) continue;
    std::shared_ptr<const PackagedCpuModule> module;
    {
      std::lock_guard<std::mutex> lock(all.mutex);
      auto found = all.packaged.find(need.choice.name);
      if (all.functions.count(need.choice.name) == 0 && found != all.packaged.end()) {
        module = found->second;
      }
    }
    if (module) {
      CpuCompileResult result = loadCpuModuleBytes(module->bytes, module->names);
      std::lock_guard<std::mutex> lock(all.mutex);
      for (size_t i = 0; i < module->names.size(); ++i) {
        all.packaged.erase(module->names[i]);
        if (result.module) {
          all.functions[module->names[i]] = {result.module->functions.at(i), result.module};
        }
      }
      if (!result.module) {
        TORCH_WARN("a packaged kernel library did not load (", result.error,
                   "): its kernels are compiled instead");
        continue;
      }
      out.disk += static_cast<int64_t>(planKernels(*need.function));
      need.from_package = true;
    } else {
      std::lock_guard<std::mutex> lock(all.mutex);
      if (all.functions.count(need.choice.name) == 0) continue;  // compiled below
    }
    all.choices.compiled(need.choice);  // a function of a module loaded for this plan
    need.choice.compiled = true;
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
  loadPackaged(needs, out);
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
    if (need.choice.compiled && !need.from_package) {
      out.reused += kernels;
      if (need.choice.dynamic) out.dynamic += kernels;
    }
    out.functions.push_back(fn);
    out.modules.push_back(module);
    out.names.push_back(need.choice.name);
    out.arguments.push_back(need.choice.arguments());
    if (need.function->epilogue) {
      out.functions.push_back(nullptr);
      out.modules.push_back(nullptr);
      out.names.emplace_back();
      out.arguments.emplace_back();
    }
  }
  return out;
}

std::vector<PackagedCpuModule> packageCpuModules(const CpuPlanFunctions& functions) {
  std::vector<PackagedCpuModule> packaged;
  std::map<const CpuModule*, size_t> index;
  for (size_t i = 0; i < functions.names.size(); ++i) {
    const CpuModule* module = functions.modules[i].get();
    if (module == nullptr) continue;
    auto [it, added] = index.emplace(module, packaged.size());
    if (added) {
      PackagedCpuModule entry;
      std::string bytes = cpuModuleBytes(*module);
      LF_CHECK(!bytes.empty(), "cannot read the compiled kernels at ", module->path,
               " to put them into a package");
      entry.bytes = std::make_shared<const std::string>(std::move(bytes));
      packaged.push_back(std::move(entry));
    }
    std::vector<std::string>& names = packaged[it->second].names;
    if (std::find(names.begin(), names.end(), functions.names[i]) == names.end()) {
      names.push_back(functions.names[i]);
    }
  }
  return packaged;
}

void addPackagedCpuModules(const std::vector<PackagedCpuModule>& modules) {
  CpuFamilies& all = cpuFamilies();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.any_packaged = all.any_packaged || !modules.empty();
  for (const PackagedCpuModule& module : modules) {
    auto shared = std::make_shared<const PackagedCpuModule>(module);
    for (const std::string& name : module.names) {
      if (!all.functions.count(name)) all.packaged[name] = shared;
    }
  }
}

bool hasPackagedCpuModules() {
  CpuFamilies& all = cpuFamilies();
  std::lock_guard<std::mutex> lock(all.mutex);
  return all.any_packaged;
}

}  // namespace lazyfuse
