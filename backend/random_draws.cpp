// Note [Random ops draw when recorded]
// A random op (dropout, randn, bernoulli_, ...) is an extern step. It used to draw from the
// hardware device's default generator when its graph ran, so what it drew depended on when the
// graph ran, not on when the op was called:
//   - torch.utils.checkpoint recomputes a segment in backward after restoring the generator
//     state the forward saw. That restore happened when the recomputation was recorded, while
//     both the forward's dropout and its recomputation drew later, one after the other: backward
//     used another mask than forward, and the gradients were wrong.
//   - Any code that saves and restores generator state around lazy random ops (or seeds, then
//     records) got values that ignored it.
// So the recorder gives each random op's node a generator of its own, seeded by a draw made
// when the op is recorded: from the generator the op was given, or from the hardware device's
// default one. On the CPU the draw is one 64-bit number of the generator's stream, from which
// the node's Mersenne Twister state is filled (all 64 bits: mt19937's own 32-bit seeding would
// give two nodes of a long run the same stream now and then); on another
// device (CUDA's Philox generators, whose stream lives on the device), the node's seed mixes the
// generator's seed with its offset, and the offset advances by 4, the step of a Philox offset.
// Each run of the node starts from a copy of its generator (kernels/plan_runner.cpp), so a node
// run twice draws the same values both times. native_dropout takes no generator (its kernels
// draw from the default one), so on lazy tensors it is recorded as what its CPU kernel computes:
// a bernoulli(1 - p) mask of the input's dtype, drawn as above, the output (input * mask) *
// 1 / (1 - p), and the mask as bool. The factories and *_like ops that take no generator
// (torch.rand(n) calls aten::rand, not aten::rand.generator) are recorded as their twin that
// does, with a None generator, which the recorder then draws for. Seeding the default generator, or
// setting its state, before ops are recorded thus reproduces them, as in eager; the values are not
// eager's own (eager draws its stream directly), which no test of ours relies on: random ops
// compare shapes and statistics against eager, and reproducibility against themselves. Pinned by
// test_factories_transfers.py::test_random_*_when_recorded and
// test_autograd_training.py::test_checkpoint_with_dropout_*.
#include "backend/random_draws.h"
#include "backend/functionalize_kernels.h"

#include "backend/detail/stand_ins.h"
#include "backend/device.h"
#include "backend/recorder.h"
#include "kernels/python_plugin.h"
#include "lazy_ir/check.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace lazyfuse {
namespace {

constexpr uint64_t kPhiloxOffsetStep = 4;

/// A 64-bit mix (splitmix64's finalizer): nearby inputs give unrelated seeds.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

c10::IValue recordedCall(const char* name, const char* overload, torch::jit::Stack stack) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  recordOp(op, &stack);
  LF_INTERNAL_ASSERT(stack.size() == 1, name, ": one result expected");
  return stack[0];
}

struct Twin {
  c10::OperatorHandle op;
  size_t generator_index;  // where the twin's schema has its Generator? argument
};

/// The overload of the same op that takes a generator, for each random overload that takes none.
const std::unordered_map<c10::OperatorName, Twin>& twins() {
  static const auto* table = [] {
    static const std::pair<const char*, std::pair<const char*, const char*>> kPairs[] = {
        {"rand", {"", "generator"}},
        {"rand", {"names", "generator_with_names"}},
        {"randn", {"", "generator"}},
        {"randn", {"names", "generator_with_names"}},
        {"randint", {"", "generator"}},
        {"randint", {"low", "low_generator"}},
        {"randperm", {"", "generator"}},
        {"rand_like", {"", "generator"}},
        {"randn_like", {"", "generator"}},
        {"randint_like", {"", "generator"}},
        {"randint_like", {"Tensor", "Tensor_generator"}},
        {"randint_like", {"low_dtype", "low_generator_dtype"}},
    };
    auto* map = new std::unordered_map<c10::OperatorName, Twin>();
    for (const auto& [name, overloads] : kPairs) {
      const std::string qualified = std::string("aten::") + name;
      auto plain = c10::Dispatcher::singleton().findSchema({qualified, overloads.first});
      auto twin = c10::Dispatcher::singleton().findSchema({qualified, overloads.second});
      if (!plain || !twin) continue;
      const auto& args = twin->schema().arguments();
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].name() == "generator") map->emplace(plain->operator_name(), Twin{*twin, i});
      }
    }
    return map;
  }();
  return *table;
}

/// Runs `op`'s meta kernel on meta stand-ins of the call on `stack`: the twins' meta kernels
/// skip some of the checks of eager's (randint.low_generator's low < high).
void checkOnMeta(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t num_args) {
  torch::jit::Stack meta;
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(num_args); it != stack.end(); ++it) {
    meta.push_back(standInArg(*it, c10::kMeta, metaStandIn));  // a CPU scalar tensor stays one
  }
  op.callBoxed(meta);
}

void twinKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Twin& twin = twins().at(op.operator_name());
  const size_t num_args = op.schema().arguments().size();
  checkOnMeta(op, *stack, num_args);
  stack->insert(stack->end() - static_cast<std::ptrdiff_t>(num_args - twin.generator_index),
                c10::IValue());
  recordOp(twin.op, stack);
}

}  // namespace

void registerRandomTwinKernels(torch::Library& lazy_lib) {
  for (const auto& [name, twin] : twins()) {
    const std::string impl = name.overload_name.empty()
                                 ? name.name.substr(6)
                                 : name.name.substr(6) + "." + name.overload_name;
    lazy_lib.impl(impl.c_str(), torch::CppFunction::makeFromBoxedFunction<&twinKernel>());
  }
}

void nativeDropoutKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (redispatchThroughFunctionalize(op, stack)) return;
  // native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)
  auto args = torch::jit::last(*stack, 3);
  const double p = args[1].toDouble();
  const bool train = args[2].isNone() || args[2].toBool();
  const at::Tensor input = args[0].toTensor();
  if (!train || !(p > 0.0 && p < 1.0) || !at::isFloatingType(input.scalar_type())) {
    return recordOp(op, stack);  // no draw: eval, p = 0 or 1, or eager's error
  }
  const c10::IValue mask = recordedCall("aten::bernoulli", "p", {args[0], 1.0 - p, c10::IValue()});
  const c10::IValue kept = recordedCall("aten::mul", "Tensor", {args[0], mask});
  c10::IValue out = recordedCall("aten::mul", "Scalar", {kept, c10::Scalar(1.0 / (1.0 - p))});
  c10::IValue bool_mask = recordedCall("aten::ne", "Scalar", {mask, c10::Scalar(0)});
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, std::move(out), std::move(bool_mask));
}

c10::IValue recordedGenerator(const c10::IValue& given) {
  at::Generator source;
  if (given.isGenerator()) source = given.toGenerator();
  if (!source.defined()) {
    // Seeds that torch.manual_seed queued for CUDA run first: Note [Seeds queued before CUDA
    // starts].
    initPythonDevice(hardwareDevice().type());
    source = at::globalContext().defaultGenerator(hardwareDevice());
  }
  std::lock_guard<std::mutex> lock(source.mutex());
  if (source.device().is_cpu()) {
    // A 32-bit seed would give two of a long run's million nodes the same stream: the node's
    // Mersenne Twister state is filled from all 64 bits of the draw instead.
    const uint64_t seed = source.get<at::CPUGeneratorImpl>()->random64();
    at::mt19937_data_pod pod{};
    pod.seed_ = seed;
    pod.left_ = 1;  // regenerate the state before the first number, as a seeded engine does
    pod.seeded_ = true;
    pod.next_ = 0;
    uint64_t x = seed;
    for (uint32_t& word : pod.state_) {
      x = mix(x);
      word = static_cast<uint32_t>(x >> 32);
    }
    at::mt19937 engine;
    engine.set_data(pod);
    at::Generator own = at::detail::createCPUGenerator();
    own.get<at::CPUGeneratorImpl>()->set_engine(engine);
    return c10::IValue(std::move(own));
  }
  const uint64_t offset = source.get_offset();
  const uint64_t seed = mix(source.current_seed() ^ mix(offset));
  source.set_offset(offset + kPhiloxOffsetStep);
  at::Generator own = source.clone();
  own.set_current_seed(seed);  // also starts its offset at 0
  return c10::IValue(std::move(own));
}

}  // namespace lazyfuse
