// Families of CPU kernel functions (Note [Shape-generic kernels] in kernels/kernel_constants.h).
#include "kernels/cpu_kernel_families.h"

#include "kernels/kernel_constants.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/hash.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

namespace lazyfuse {
namespace {

/// A compiled function of a family: the constants it was compiled with, of which those marked
/// `runtime` are arguments (the rest must match).
struct Variant {
  std::vector<int64_t> constants;
  std::vector<bool> runtime;
  size_t num_runtime = 0;
  CpuKernelFn fn = nullptr;
  std::shared_ptr<const CpuModule> module;
};

struct Family {
  std::vector<int64_t> first;  // the constants it was first seen with
  std::vector<bool> varied;    // the constants seen with another value since
  std::vector<Variant> variants;
  bool specialize_only = false;  // a generic function of it failed to compile
};

struct Families {
  std::mutex mutex;
  std::unordered_map<std::string, Family> by_shape;
};

Families& families() {
  static Families* all = new Families();
  return *all;
}

bool fits(const Variant& v, const std::vector<int64_t>& constants) {
  for (size_t i = 0; i < constants.size(); ++i) {
    if (!v.runtime[i] && v.constants[i] != constants[i]) return false;
  }
  return true;
}

/// The most specialized compiled function of `family` that runs `constants`, if any; only a
/// specialized one under `static_only` (LAZYFUSE_DYNAMIC=static).
std::optional<Variant> bestFit(const Family& family, const std::vector<int64_t>& constants,
                               bool static_only) {
  const Variant* best = nullptr;
  for (const Variant& v : family.variants) {
    if (static_only && v.num_runtime > 0) continue;
    if (fits(v, constants) && (!best || v.num_runtime < best->num_runtime)) best = &v;
  }
  if (!best) return std::nullopt;
  return *best;
}

/// One function of the plan and what it needs.
struct Need {
  const CpuFunction* function = nullptr;
  KernelText text;
  std::string family;  // the key of its family: shape and parameter count
  size_t params = 0;   // iparams the function takes before its constant arguments
  std::vector<bool> runtime;
  std::string name;              // of the function to compile; "" when a compiled one runs it
  std::optional<Variant> found;  // a compiled function that runs it
  std::string reason;            // why a generic function is compiled
};

size_t planKernels(const CpuFunction& f) { return f.epilogue ? 2 : 1; }

std::string hexName(HashValue h) {
  char text[24];
  std::snprintf(text, sizeof(text), "lf_f%016llx", static_cast<unsigned long long>(h));
  return text;
}

/// Which constants of `need` become arguments, by the policy of LAZYFUSE_DYNAMIC; fills `reason`
/// for a generic function of a family seen before. Called with the families locked.
std::vector<bool> chooseRuntime(Need& need, Family& family, bool known,
                                config::DynamicShapes mode) {
  const std::vector<int64_t>& c = need.text.constants;
  std::vector<bool> runtime(c.size(), false);
  if (mode == config::DynamicShapes::kStatic || family.specialize_only) return runtime;
  if (mode == config::DynamicShapes::kDynamic) {
    for (size_t i = 0; i < c.size(); ++i) runtime[i] = c[i] != 0 && c[i] != 1;
    return runtime;
  }
  if (!known) return runtime;
  std::string changed;
  size_t count = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i] != family.first[i]) {
      if (!family.varied[i] && count < 6) {
        changed += (changed.empty() ? "" : ", ") + std::to_string(family.first[i]) + " -> " +
                   std::to_string(c[i]);
      }
      count += family.varied[i] ? 0 : 1;
      family.varied[i] = true;
    }
    runtime[i] = family.varied[i];
  }
  if (std::find(runtime.begin(), runtime.end(), true) == runtime.end()) return runtime;
  need.reason = "kernel " + need.function->name + " (family " + hexName(hashString(need.family)) +
                "): " + std::to_string(count) + " more constant(s) changed (" + changed +
                (count > 6 ? ", ..." : "") + "): compiling it with them as arguments";
  return runtime;
}

std::string variantName(const Need& need) {
  HashValue h = hashString(need.family);
  for (size_t i = 0; i < need.runtime.size(); ++i) {
    h = hashCombine(h, need.runtime[i] ? 0x9e37u : static_cast<HashValue>(need.text.constants[i]));
  }
  return hexName(h);
}

/// The text `need` compiles as: named, its argument constants read from iparams after its own
/// parameters into locals at the top of the function.
std::string variantText(const Need& need) {
  std::vector<size_t> slot(need.runtime.size(), 0);
  size_t next = 0;
  std::string declarations;
  for (size_t i = 0; i < need.runtime.size(); ++i) {
    if (!need.runtime[i]) continue;
    slot[i] = next;
    declarations += "  const lf_i64 lf_a" + std::to_string(next) + " = iparams[" +
                    std::to_string(need.params + next) + "];\n";
    ++next;
  }
  std::string text = joinConstants(need.text, need.text.constants, need.runtime, need.name,
                                   [&slot](size_t k) { return "lf_a" + std::to_string(slot[k]); });
  if (declarations.empty()) return text;
  const size_t body = text.find("{\n");
  LF_INTERNAL_ASSERT(body != std::string::npos, "kernel function without a body");
  return text.insert(body + 2, declarations);
}

std::vector<int64_t> argumentsOf(const std::vector<int64_t>& constants,
                                 const std::vector<bool>& runtime) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < constants.size(); ++i) {
    if (runtime[i]) out.push_back(constants[i]);
  }
  return out;
}

/// Compiles the functions of `needs` that have a name, in one source; "" or the error.
std::string compileNeeds(std::vector<Need>& needs, std::map<std::string, Variant>& made,
                         CpuPlanFunctions& out) {
  std::string source = renderCppHeader();
  std::vector<std::string> names;
  for (const Need& need : needs) {
    if (need.name.empty() || made.count(need.name) ||
        std::find(names.begin(), names.end(), need.name) != names.end()) {
      continue;
    }
    source += "\n" + variantText(need);
    names.push_back(need.name);
  }
  if (names.empty()) return "";
  CpuCompileResult result = compileCpp(source, names);
  if (!result.module) return result.error;
  out.modules.push_back(result.module);
  for (size_t i = 0; i < names.size(); ++i) {
    Variant v;
    v.fn = result.module->functions.at(i);
    v.module = result.module;
    made[names[i]] = v;
  }
  for (const Need& need : needs) {
    if (need.name.empty()) continue;
    (result.disk_hit ? out.disk : out.compiled) +=
        static_cast<int64_t>(planKernels(*need.function));
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
    need.family = need.text.shape + '\0' + std::to_string(need.params);
  }
  Families& all = families();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    for (Need& need : needs) {
      auto [it, added] = all.by_shape.try_emplace(need.family);
      Family& family = it->second;
      if (added) {
        family.first = need.text.constants;
        family.varied.assign(need.text.constants.size(), false);
      }
      if (!added) {
        need.found = bestFit(family, need.text.constants, mode == config::DynamicShapes::kStatic);
      }
      if (need.found) continue;
      need.runtime = chooseRuntime(need, family, !added, mode);
      need.name = variantName(need);
    }
  }
  std::map<std::string, Variant> made;
  std::string error = compileNeeds(needs, made, out);
  if (!error.empty()) {
    // A generic function that does not compile (a constant the language needs at compile time
    // became an argument): its family is specialized from now on.
    bool retry = false;
    std::lock_guard<std::mutex> lock(all.mutex);
    for (Need& need : needs) {
      if (need.name.empty() ||
          std::find(need.runtime.begin(), need.runtime.end(), true) == need.runtime.end()) {
        continue;
      }
      all.by_shape[need.family].specialize_only = true;
      need.runtime.assign(need.runtime.size(), false);
      need.name = variantName(need);
      need.reason.clear();
      retry = true;
    }
    if (!retry) {
      out.error = error;
      return out;
    }
  }
  if (!error.empty()) {
    out.compiled = out.disk = 0;
    out.modules.clear();
    made.clear();
    error = compileNeeds(needs, made, out);
    if (!error.empty()) {
      out.error = error;
      return out;
    }
  }
  std::lock_guard<std::mutex> lock(all.mutex);
  std::set<std::string> registered;
  for (Need& need : needs) {
    const size_t kernels = planKernels(*need.function);
    CpuKernelFn fn = nullptr;
    std::vector<bool> runtime;
    if (need.found) {
      fn = need.found->fn;
      runtime = need.found->runtime;
      out.modules.push_back(need.found->module);
      out.reused += static_cast<int64_t>(kernels);
      if (need.found->num_runtime > 0 && need.found->constants != need.text.constants) {
        out.dynamic += static_cast<int64_t>(kernels);
      }
    } else {
      const Variant& compiled = made.at(need.name);
      fn = compiled.fn;
      runtime = need.runtime;
      if (registered.insert(need.name).second) {
        Variant v = compiled;
        v.constants = need.text.constants;
        v.runtime = need.runtime;
        v.num_runtime = static_cast<size_t>(std::count(runtime.begin(), runtime.end(), true));
        all.by_shape[need.family].variants.push_back(std::move(v));
        if (!need.reason.empty()) {
          out.generalized += static_cast<int64_t>(kernels);
          out.recompiles.push_back(need.reason);
        }
      }
    }
    out.functions.push_back(fn);
    out.arguments.push_back(argumentsOf(need.text.constants, runtime));
    if (need.function->epilogue) {
      out.functions.push_back(nullptr);
      out.arguments.emplace_back();
    }
  }
  return out;
}

}  // namespace lazyfuse
