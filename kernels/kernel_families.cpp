// The choice of compiled functions (Note [Shape-generic kernels] in kernels/kernel_constants.h).
#include "kernels/kernel_families.h"

#include "lazy_ir/check.h"
#include "lazy_ir/hash.h"

#include <algorithm>
#include <cstdio>

namespace lazyfuse {
namespace {

std::string hexName(HashValue h) {
  char text[24];
  std::snprintf(text, sizeof(text), "lf_f%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::string variantName(const std::string& family, const std::vector<int64_t>& constants,
                        const std::vector<bool>& runtime) {
  HashValue h = hashString(family);
  for (size_t i = 0; i < runtime.size(); ++i) {
    h = hashCombine(h, runtime[i] ? 0x9e37u : static_cast<HashValue>(constants[i]));
  }
  return hexName(h);
}

}  // namespace

std::vector<int64_t> FamilyChoice::arguments() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < constants.size(); ++i) {
    if (runtime[i]) out.push_back(constants[i]);
  }
  return out;
}

FamilyChoice KernelFamilies::choose(const KernelText& text, const std::string& family,
                                    const std::string& label, config::DynamicShapes mode) {
  FamilyChoice choice;
  choice.family = family;
  choice.constants = text.constants;
  const std::vector<int64_t>& c = text.constants;
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, added] = families_.try_emplace(family);
  Family& f = it->second;
  if (added) {
    f.first = c;
    f.varied.assign(c.size(), false);
  }
  // The most specialized compiled function that runs these constants (under static: only a
  // specialized one).
  const Variant* best = nullptr;
  for (const Variant& v : f.variants) {
    if (mode == config::DynamicShapes::kStatic && v.num_runtime > 0) continue;
    bool fits = true;
    for (size_t i = 0; i < c.size() && fits; ++i) fits = v.runtime[i] || v.constants[i] == c[i];
    if (fits && (!best || v.num_runtime < best->num_runtime)) best = &v;
  }
  if (best) {
    choice.runtime = best->runtime;
    choice.name = best->name;
    choice.compiled = true;
    choice.dynamic = best->num_runtime > 0 && best->constants != c;
    return choice;
  }
  choice.runtime.assign(c.size(), false);
  if (mode == config::DynamicShapes::kDynamic && !f.specialize_only) {
    for (size_t i = 0; i < c.size(); ++i) choice.runtime[i] = c[i] != 0 && c[i] != 1;
  } else if (mode == config::DynamicShapes::kAuto && !added && !f.specialize_only) {
    std::string changed;  // the first six changes, for the log
    size_t count = 0;     // constants that become arguments now
    size_t changes = 0;   // of which changed
    // Duck sizing, as PyTorch's symbolic shapes do: a constant that started out equal to one that
    // changed is taken for the same size, so it is an argument too (a later size that changes it
    // needs no third compile). 0 and 1 stay specialized.
    std::vector<int64_t> moved;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i] != f.first[i] && f.first[i] != 0 && f.first[i] != 1) moved.push_back(f.first[i]);
    }
    for (size_t i = 0; i < c.size(); ++i) {
      const bool duck = c[i] != 0 && c[i] != 1 &&
                        std::find(moved.begin(), moved.end(), f.first[i]) != moved.end();
      if ((c[i] != f.first[i] || duck) && !f.varied[i]) {
        if (c[i] != f.first[i] && changes++ < 6) {
          changed += (changed.empty() ? "" : ", ") + std::to_string(f.first[i]) + " -> " +
                     std::to_string(c[i]);
        }
        ++count;
        f.varied[i] = true;
      }
      choice.runtime[i] = f.varied[i];
    }
    if (count > 0) {
      choice.reason = "kernel " + label + " (family " + hexName(hashString(family)) +
                      "): " + std::to_string(changes) + " more constant(s) changed (" + changed +
                      (changes > 6 ? ", ..." : "") + ")" +
                      (count > changes ? ", " + std::to_string(count - changes) +
                                             " equal to a changed one at first"
                                       : "") +
                      ": compiling it with them as arguments";
    }
  }
  choice.name = variantName(family, c, choice.runtime);
  return choice;
}

void KernelFamilies::compiled(const FamilyChoice& choice) {
  std::lock_guard<std::mutex> lock(mutex_);
  Family& f = families_[choice.family];
  for (const Variant& v : f.variants) {
    if (v.name == choice.name) return;
  }
  Variant v;
  v.constants = choice.constants;
  v.runtime = choice.runtime;
  v.num_runtime = static_cast<size_t>(std::count(v.runtime.begin(), v.runtime.end(), true));
  v.name = choice.name;
  f.variants.push_back(std::move(v));
}

void KernelFamilies::specializeOnly(const std::string& family) {
  std::lock_guard<std::mutex> lock(mutex_);
  families_[family].specialize_only = true;
}

std::string variantText(const KernelText& text, const FamilyChoice& choice,
                        const std::function<std::string(size_t)>& argument) {
  std::vector<size_t> slot(choice.runtime.size(), 0);
  size_t next = 0;
  for (size_t i = 0; i < choice.runtime.size(); ++i) {
    if (choice.runtime[i]) slot[i] = next++;
  }
  return joinConstants(text, text.constants, choice.runtime, choice.name,
                       [&](size_t k) { return argument(slot[k]); });
}

}  // namespace lazyfuse
