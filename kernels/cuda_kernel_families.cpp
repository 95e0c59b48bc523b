// Kernel families on the CUDA targets (Note [Shape-generic kernels]).
#include "kernels/cuda_kernel_families.h"

#include "lazy_ir/check.h"

#include <algorithm>
#include <map>
#include <set>

namespace lazyfuse {
namespace {

constexpr const char* kFunctionStart = "extern \"C\" __global__";

/// The rendered source cut into its prelude and its functions, by name.
struct CutSource {
  std::string prelude;
  std::map<std::string, std::string> functions;
  std::vector<std::string> order;
};

CutSource cut(const std::string& source) {
  CutSource out;
  std::vector<size_t> starts;
  for (size_t at = source.find(kFunctionStart); at != std::string::npos;
       at = source.find(kFunctionStart, at + 1)) {
    if (at == 0 || source[at - 1] == '\n') starts.push_back(at);
  }
  out.prelude = source.substr(0, starts.empty() ? source.size() : starts[0]);
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t end = i + 1 < starts.size() ? starts[i + 1] : source.size();
    std::string text = source.substr(starts[i], end - starts[i]);
    const size_t paren = text.find(") ", text.find("__launch_bounds__"));
    const size_t open = text.find('(', paren + 2);
    LF_INTERNAL_ASSERT(paren != std::string::npos && open != std::string::npos,
                       "a CUDA function without a signature");
    std::string name = text.substr(paren + 2, open - paren - 2);
    out.order.push_back(name);
    out.functions[name] = std::move(text);
  }
  return out;
}

/// `text` (function `name`) with `count` more `lf_i64` parameters lf_a0.. at the end of its
/// parameter list.
std::string withArguments(std::string text, const std::string& name, size_t count) {
  if (count == 0) return text;
  const size_t open = text.find(name + "(");
  LF_INTERNAL_ASSERT(open != std::string::npos, "no signature for ", name);
  size_t close = open + name.size();
  for (int depth = 0; close < text.size(); ++close) {
    if (text[close] == '(') ++depth;
    if (text[close] == ')' && --depth == 0) break;
  }
  std::string params;
  for (size_t k = 0; k < count; ++k) {
    params +=
        (k || text[close - 1] != '(' ? ", " : "") + std::string("lf_i64 lf_a") + std::to_string(k);
  }
  return text.insert(close, params);
}

}  // namespace

KernelFamilies& cudaKernelFamilies() {
  static KernelFamilies* families = new KernelFamilies();
  return *families;
}

CudaFamilySource cudaFamilySource(const CudaSource& rendered, config::DynamicShapes mode,
                                  KernelFamilies& families) {
  CudaFamilySource out;
  out.source.kernels = rendered.kernels;
  out.source.batches = rendered.batches;
  const CutSource parts = cut(rendered.source);
  out.source.source = parts.prelude;
  std::set<std::string> written;
  // Chooses the function that runs `name`; returns its name and fills its arguments.
  auto choose = [&](const std::string& name, std::vector<int64_t>& arguments, bool& reused,
                    bool& dynamic) {
    const std::string& text = parts.functions.at(name);
    const KernelText split = splitConstants(text, name, /*constant_brackets=*/true);
    FamilyChoice choice = families.choose(split, "cuda\n" + split.shape, name, mode);
    arguments = choice.arguments();
    reused = reused && choice.compiled;
    dynamic = dynamic || choice.dynamic;
    if (written.insert(choice.name).second) {
      out.source.source += withArguments(
          variantText(split, choice, [](size_t k) { return "lf_a" + std::to_string(k); }),
          choice.name, arguments.size());
    }
    if (!choice.reason.empty()) out.recompiles.push_back(choice.reason);
    const std::string chosen = choice.name;
    out.choices.push_back(std::move(choice));
    return chosen;
  };
  for (CudaLaunchShape& shape : out.source.kernels) {
    if (shape.name.empty()) continue;  // a batch member
    bool reused = true, dynamic = false;
    const size_t before = out.recompiles.size();
    shape.name = choose(shape.name, shape.arguments, reused, dynamic);
    if (!shape.vector_name.empty()) {
      shape.vector_name = choose(shape.vector_name, shape.vector_arguments, reused, dynamic);
    }
    out.reused += reused ? 1 : 0;
    out.dynamic += reused && dynamic ? 1 : 0;
    out.generalized += out.recompiles.size() > before ? 1 : 0;
  }
  for (const CudaBatchShape& batch : rendered.batches) {
    for (const std::string& name : {batch.name, batch.vector_name}) {
      if (!name.empty()) out.source.source += parts.functions.at(name);
    }
  }
  return out;
}

void cudaFamiliesCompiled(const CudaFamilySource& source, KernelFamilies& families) {
  for (const FamilyChoice& choice : source.choices) families.compiled(choice);
}

void countFamilies(const CudaFamilySource& source, const ExecutionPlan& plan, bool cached,
                   CompileOutcome& outcome) {
  // A kernel whose functions were compiled before counts as reused, as on the CPU, though the
  // plan's source is compiled as a whole when another of its kernels is new.
  (cached ? outcome.disk : outcome.compiled) =
      static_cast<int64_t>(plan.kernels.size()) - source.reused;
  outcome.reused = source.reused;
  outcome.dynamic = source.dynamic;
  outcome.generalized = source.generalized;
  outcome.recompiles = source.recompiles;
}

CudaFamilySource compileWithFamilies(const CudaSource& rendered,
                                     const std::function<bool(const CudaFamilySource&)>& compile,
                                     KernelFamilies& families) {
  const config::DynamicShapes mode = config::dynamicShapes();
  CudaFamilySource source = cudaFamilySource(rendered, mode, families);
  bool compiled = compile(source);
  if (!compiled) {
    // A generic function that does not compile: its family is specialized from now on.
    bool generic = false;
    for (const FamilyChoice& choice : source.choices) {
      const std::vector<bool>& r = choice.runtime;
      if (choice.compiled || std::find(r.begin(), r.end(), true) == r.end()) continue;
      families.specializeOnly(choice.family);
      generic = true;
    }
    if (!generic) return source;
    source = cudaFamilySource(rendered, mode, families);
    compiled = compile(source);
  }
  if (compiled) cudaFamiliesCompiled(source, families);
  return source;
}

}  // namespace lazyfuse
