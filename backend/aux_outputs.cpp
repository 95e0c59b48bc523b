// See Note [Aux outputs on the CPU].
#include "backend/aux_outputs.h"

#include "lazy_ir/check.h"

#include <ATen/core/Reduction.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

namespace lazyfuse {
namespace {

// Where an op says whether batch norm trains: an argument index, or one of these.
constexpr int kAlwaysTrains = -1;
constexpr int kNeverTrains = -2;
constexpr int kKeepsShape = -3;  // layer norm: its statistics have their meta shape

struct NormStatsRule {
  const char* op;
  int training;
  /// The return holding the updated running_mean (running_var follows), or 0: the functional
  /// variants return them in the dtype of the running_mean/running_var arguments (3 and 4).
  size_t running_stats = 0;
};

// The functional ops functionalization records, and the mutating ones in case it is off.
constexpr NormStatsRule kNormStatsRules[] = {
    {"aten::native_batch_norm", 5},
    {"aten::_native_batch_norm_legit", 5},
    {"aten::_native_batch_norm_legit_functional", 5, /*running_stats=*/3},
    {"aten::_native_batch_norm_legit.no_stats", 3},
    {"aten::_native_batch_norm_legit_no_training", kNeverTrains},
    {"aten::_batch_norm_with_update", kAlwaysTrains},
    {"aten::_batch_norm_with_update_functional", kAlwaysTrains, /*running_stats=*/4},
    {"aten::_batch_norm_no_update", kNeverTrains},
    {"aten::native_layer_norm", kKeepsShape},
};

const NormStatsRule* normStatsRule(const std::string& op_name) {
  for (const NormStatsRule& rule : kNormStatsRules) {
    if (op_name == rule.op) return &rule;
  }
  return nullptr;
}

/// The CPU kernels keep statistics in float32 only for a bf16/f16 input with float32
/// parameters ("mixed type"); otherwise in the input's dtype.
at::ScalarType cpuStatsDtype(const torch::jit::Stack& args) {
  const at::ScalarType input = args[0].toTensor().scalar_type();
  if (input != at::kBFloat16 && input != at::kHalf) return input;
  for (size_t i = 1; i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (t.defined() && t.scalar_type() == at::kFloat) return at::kFloat;
  }
  return input;
}

bool trains(const NormStatsRule& rule, const torch::jit::Stack& args) {
  if (rule.training == kAlwaysTrains || rule.training == kKeepsShape) return true;
  if (rule.training == kNeverTrains) return false;
  return args[static_cast<size_t>(rule.training)].toBool();
}

void correctNormStats(const NormStatsRule& rule, const torch::jit::Stack& args,
                      torch::jit::Stack& returns) {
  LF_INTERNAL_ASSERT(returns.size() >= 3, rule.op, " has no statistics");
  const at::ScalarType dtype = cpuStatsDtype(args);
  const bool keep_shape = trains(rule, args);
  for (size_t r = 1; r <= 2; ++r) {
    const at::Tensor& stats = returns[r].toTensor();
    if (keep_shape) {
      returns[r] = at::empty_strided(stats.sizes(), stats.strides(), stats.options().dtype(dtype));
    } else {
      returns[r] = at::empty_strided({0}, {1}, stats.options().dtype(dtype));
    }
  }
  for (size_t k = 0; rule.running_stats != 0 && k < 2; ++k) {
    const at::Tensor& stats = returns[rule.running_stats + k].toTensor();
    const at::ScalarType running = args[3 + k].toTensor().scalar_type();
    returns[rule.running_stats + k] =
        at::empty_strided(stats.sizes(), stats.strides(), stats.options().dtype(running));
  }
}

// The batch norm backward meta kernels return grad_input even when output_mask leaves it out;
// the CPU and CUDA kernels return an undefined tensor for every output the mask leaves out.
constexpr size_t kBatchNormBackwardMaskArg = 9;

bool isBatchNormBackward(const std::string& op_name) {
  return op_name == "aten::native_batch_norm_backward" || op_name == "aten::batch_norm_backward";
}

void dropMaskedGrads(const torch::jit::Stack& args, torch::jit::Stack& returns) {
  const auto mask = args[kBatchNormBackwardMaskArg].toBoolList();
  for (size_t r = 0; r < returns.size() && r < mask.size(); ++r) {
    if (!mask[r]) returns[r] = at::Tensor();
  }
}

}  // namespace

AuxOutputs auxOutputsOf(const std::string& op_name) {
  if (normStatsRule(op_name) != nullptr) return AuxOutputs::kNormStats;
  if (isBatchNormBackward(op_name)) return AuxOutputs::kMaskedGrads;
  if (op_name == "aten::_embedding_bag" || op_name == "aten::_embedding_bag_forward_only") {
    return AuxOutputs::kEagerOnCpu;
  }
  if (op_name == "aten::log_sigmoid_forward") return AuxOutputs::kCpuOnlyBuffer;
  if (op_name == "aten::multilabel_margin_loss_forward") return AuxOutputs::kScalarLossOf1d;
  return AuxOutputs::kSameAsMeta;
}

void correctAuxOutputs(const OpTraits& traits, const torch::jit::Stack& args,
                       torch::jit::Stack& returns, const c10::Device& device) {
  if (traits.aux_outputs == AuxOutputs::kMaskedGrads) return dropMaskedGrads(args, returns);
  if (traits.aux_outputs == AuxOutputs::kCpuOnlyBuffer) {
    // log_sigmoid_forward(self) -> (output, buffer): the CUDA kernel leaves the buffer empty.
    if (device.is_cpu()) return;
    const at::Tensor& buffer = returns.at(1).toTensor();
    returns[1] = at::empty_strided({0}, {1}, buffer.options());
    return;
  }
  if (traits.aux_outputs == AuxOutputs::kScalarLossOf1d) {
    // multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target): with no
    // reduction, eager's kernels give a 1-D input a 0-dim loss, the meta kernel a [1] one.
    if (args.at(0).toTensor().dim() <= 1 && args.at(2).toInt() == at::Reduction::None) {
      returns[0] = at::empty({}, returns.at(0).toTensor().options());
    }
    return;
  }
  if (!device.is_cpu() || traits.aux_outputs != AuxOutputs::kNormStats) return;
  const NormStatsRule* rule = normStatsRule(traits.name);
  LF_INTERNAL_ASSERT(rule != nullptr, traits.name, " has no aux output correction");
  correctNormStats(*rule, args, returns);
}

}  // namespace lazyfuse
