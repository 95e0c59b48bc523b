// The fusion partitioner: op classes, the lowering registry, and the kernel groups it picks for
// graphs recorded through the dispatcher (partition_graphs.h); what the compiled plans compute and
// golden dumps of them are in test_compiled_plans.cpp. See Note [Fusion partitioning] in
// lowering/partition.cpp.
#include "backend/graph_executor.h"
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_row_groups.h"
#include "lazy_ir/check.h"
#include "lowering/lowerings.h"
#include "lowering/pipeline.h"
#include "lowering/print_plan.h"
#include "test/cpp/partition_graphs.h"
#include "test/cpp/recorded_case.h"

#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

namespace lazyfuse {
namespace {

using namespace testing_case;

// --- op classes (no graph needed) ---

TEST(PartitionClassifyTest, ClassesByName) {
  EXPECT_EQ(classifyOp("aten::add.Tensor"), OpClass::kPointwise);
  EXPECT_EQ(classifyOp("aten::exp"), OpClass::kPointwise);
  EXPECT_EQ(classifyOp("aten::sum.dim_IntList"), OpClass::kReduction);
  EXPECT_EQ(classifyOp("aten::_softmax"), OpClass::kReduction);
  EXPECT_EQ(classifyOp("aten::native_layer_norm"), OpClass::kReduction);
  EXPECT_EQ(classifyOp("aten::view_copy"), OpClass::kView);
  EXPECT_EQ(classifyOp("aten::permute_copy"), OpClass::kView);
  EXPECT_EQ(classifyOp("aten::slice_scatter"), OpClass::kScatter);
  EXPECT_EQ(classifyOp("aten::select_scatter"), OpClass::kScatter);
  EXPECT_EQ(classifyOp("aten::bernoulli"), OpClass::kRandom);
  EXPECT_EQ(classifyOp("aten::bernoulli.p"), OpClass::kRandom);
  EXPECT_EQ(classifyOp("aten::native_dropout"), OpClass::kRandom);
  EXPECT_EQ(classifyOp("aten::feature_dropout"), OpClass::kRandom);
  EXPECT_EQ(classifyOp("prims::add"), OpClass::kExtern);
  EXPECT_EQ(classifyOp("mylib::sum"), OpClass::kExtern);
  EXPECT_EQ(classifyOp("sum"), OpClass::kExtern);
  EXPECT_STREQ(opClassName(OpClass::kScatter), "scatter");
}

TEST(PartitionClassifyTest, SplitsOverloads) {
  OpName add = splitOpName("aten::add.Tensor");
  EXPECT_EQ(add.op, "add");
  EXPECT_EQ(add.overload, "Tensor");
  OpName exp = splitOpName("aten::exp");
  EXPECT_EQ(exp.op, "exp");
  EXPECT_EQ(exp.overload, "");
}

TEST(PartitionClassifyTest, LoweringsAreFoundByOverloadThenByOp) {
  const LoweringRegistry& registry = loweringRegistry();
  EXPECT_NE(registry.find("aten::round"), nullptr);  // registered as aten::round.default
  EXPECT_EQ(registry.find("aten::round.decimals"), nullptr);
  EXPECT_NE(registry.find("aten::where.self"), nullptr);
  EXPECT_EQ(registry.find("aten::where.ScalarOther"), nullptr);
  EXPECT_NE(registry.find("aten::clamp.Tensor"), nullptr);  // every overload of aten::clamp
  EXPECT_NE(registry.find("aten::_foreach_add.List"), nullptr);
  EXPECT_EQ(registry.find("aten::_foreach_add.Tensor"), nullptr);
  EXPECT_EQ(registry.find("aten::matmul"), nullptr);
  EXPECT_EQ(registry.find("prims::add"), nullptr);
  EXPECT_EQ(classifyOp("aten::matmul"), OpClass::kExtern);
  EXPECT_TRUE(isRandomOp("aten::bernoulli.p"));
  EXPECT_FALSE(isRandomOp("aten::add.Tensor"));
}

TEST(PartitionClassifyTest, EveryLoweringIsRegisteredForAnAtenOp) {
  // A misspelt name would never be looked up: each is an overload or an op the dispatcher has.
  std::set<std::string> overloads, ops;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    ops.insert(name.name);
    overloads.insert(name.name + "." +
                     (name.overload_name.empty() ? "default" : name.overload_name));
  }
  const std::vector<std::string> names = loweringRegistry().names();
  EXPECT_GT(names.size(), 100u);
  for (const std::string& name : names) {
    const bool is_op = name.find('.') == std::string::npos;
    EXPECT_TRUE(is_op ? ops.count(name) > 0 : overloads.count(name) > 0) << name;
  }
}

TEST(PartitionClassifyTest, ArgumentsAreFoundByTheirSchemaNames) {
  Case c = record(chainInputs(), pointwiseChain);
  const Node* pow = nullptr;
  for (const NodePtr& node : c.graph.nodes()) {
    if (node->opName() == "aten::pow.Tensor_Scalar") pow = node.get();
  }
  ASSERT_NE(pow, nullptr) << printText(c.graph);
  LoopGraph loops;
  LoweringCall call(loops, *pow, 0, {0});
  EXPECT_EQ(call.index("self"), 0u);
  EXPECT_EQ(call.index("exponent"), 1u);
  EXPECT_TRUE(call.has("exponent"));
  EXPECT_FALSE(call.has("other"));
  try {
    call.index("other");
    ADD_FAILURE() << "an unknown argument name was found";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find(kInternalErrorPrefix), std::string::npos) << message;
    EXPECT_NE(message.find("aten::pow.Tensor_Scalar has no argument `other`"), std::string::npos)
        << message;
  }
}

// --- partitioning: which kernels, which buffers ---

TEST(PartitionTest, PointwiseChainIsOneKernelReadingTheInputWritingTheOutput) {
  Case c = record(chainInputs(), pointwiseChain);
  ASSERT_EQ(c.graph.nodes().size(), 11u) << printText(c.graph);
  ASSERT_EQ(c.plan.steps.size(), 1u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(c.plan.kernels.size(), 1u);
  const FusedKernel& k = c.plan.kernels[0];
  EXPECT_EQ(k.kernel.domain, (std::vector<int64_t>{35}));  // Note [Coalescing kernel domains]
  EXPECT_TRUE(k.kernel.reductions.empty());
  EXPECT_EQ(positions(buffers(k, /*output=*/false)), c.graph.dataPositions());
  EXPECT_EQ(buffers(k, /*output=*/true).size(), 1u);
  EXPECT_EQ(positions(buffers(k, /*output=*/true)), outputPositions(c.graph));
  EXPECT_EQ(c.plan.num_temps, 0);
}

TEST(PartitionTest, DiamondIsOneKernelAndItsSharedValueStaysInRegisters) {
  Case c = record(chainInputs(), diamond);
  const int64_t a = positionOf(c.graph, "aten::exp");
  ASSERT_GE(a, 0) << printText(c.graph);
  ASSERT_EQ(c.plan.kernels.size(), 1u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(c.plan.steps.size(), 1u);
  const FusedKernel& k = c.plan.kernels[0];
  EXPECT_EQ(positions(buffers(k, /*output=*/true)), outputPositions(c.graph));
  EXPECT_EQ(positions(buffers(k, /*output=*/false)), c.graph.dataPositions());
  EXPECT_EQ(c.plan.num_temps, 0);
  // exp(x) is computed once in the kernel, not once per user.
  int exps = 0;
  for (const KInstr& instr : k.kernel.instrs) exps += instr.fn == "exp";
  EXPECT_EQ(exps, 1);
}

TEST(PartitionTest, ViewsFeedingPointwiseAreIndexMathNotCopies) {
  for (const Program& program : {Program(transposedAdd), Program(reshapedAdd)}) {
    Case c = record(viewInputs(), program);
    const bool has_view =
        positionOf(c.graph, "aten::t_copy") >= 0 || positionOf(c.graph, "aten::view_copy") >= 0;
    EXPECT_TRUE(has_view) << printText(c.graph);
    ASSERT_EQ(c.plan.steps.size(), 1u) << printPlan(c.graph, c.plan);
    ASSERT_EQ(c.plan.kernels.size(), 1u);
    EXPECT_EQ(countExterns(c.plan), 0);
    EXPECT_EQ(c.plan.num_temps, 0);
    const FusedKernel& k = c.plan.kernels[0];
    EXPECT_EQ(positions(buffers(k, /*output=*/false)), c.graph.dataPositions());
    EXPECT_EQ(positions(buffers(k, /*output=*/true)), outputPositions(c.graph));
  }
}

TEST(PartitionTest, ReductionFusesItsPrologueAndEpilogue) {
  Case c = record({at::randn({6, 9})}, sumExp);
  ASSERT_EQ(c.plan.steps.size(), 1u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(c.plan.kernels.size(), 1u);
  const FusedKernel& k = c.plan.kernels[0];
  EXPECT_EQ(k.kernel.domain, (std::vector<int64_t>{6}));
  ASSERT_EQ(k.kernel.reductions.size(), 1u);
  EXPECT_EQ(k.kernel.reductions[0].sizes, (std::vector<int64_t>{9}));
  EXPECT_EQ(positions(buffers(k, /*output=*/false)), c.graph.dataPositions());
  // The epilogue (* 2) is in the kernel: it writes the graph output. The sum itself is also
  // written, since every reduction is realized (Note [Fusion partitioning], step 2).
  std::vector<uint32_t> written = positions(buffers(k, /*output=*/true));
  EXPECT_NE(std::find(written.begin(), written.end(), outputPositions(c.graph)[0]), written.end())
      << printPlan(c.graph, c.plan);
  const int64_t exp = positionOf(c.graph, "aten::exp");
  EXPECT_EQ(std::find(written.begin(), written.end(), exp), written.end());
  int exps_in_body = 0;
  for (const KInstr& instr : k.kernel.instrs) exps_in_body += instr.fn == "exp" && instr.scope == 0;
  EXPECT_EQ(exps_in_body, 1);
}

/// Whether any temporary of `plan` has `numel` elements or more.
bool hasTempOfSize(const ExecutionPlan& plan, int64_t numel) {
  for (const FusedKernel& k : plan.kernels) {
    for (const BufferBinding& b : k.buffers) {
      if (b.temp && b.meta.numel() >= numel) return true;
    }
  }
  return false;
}

TEST(PartitionTest, SoftmaxIsRowReductionsThenTheOutputWithNoFullSizeTemporary) {
  Case c = record(rowsInputs(), softmax);
  std::vector<const FusedKernel*> kernels = kernelSteps(c.plan);
  ASSERT_GE(kernels.size(), 2u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(countExterns(c.plan), 0);
  EXPECT_FALSE(hasTempOfSize(c.plan, 6 * 33)) << printPlan(c.graph, c.plan);
  for (size_t i = 0; i + 1 < kernels.size(); ++i) {
    EXPECT_EQ(kernels[i]->kernel.domain, (std::vector<int64_t>{6, 1})) << i;
    EXPECT_FALSE(kernels[i]->kernel.reductions.empty()) << i;
    EXPECT_TRUE(positions(buffers(*kernels[i], /*output=*/true)).empty()) << i;
  }
  const FusedKernel& last = *kernels.back();
  EXPECT_EQ(last.kernel.domain, (std::vector<int64_t>{6, 33}));
  EXPECT_TRUE(last.kernel.reductions.empty());
  EXPECT_EQ(positions(buffers(last, /*output=*/true)), outputPositions(c.graph));
}

// The max and the sum of exp(x - max) are both over rows and the sum reads the max only at its
// own row: they fit one kernel (an instruction of a reduction's scope may use earlier
// outer-scope values, Note [Kernel IR]; Note [Fusion partitioning], step 3).
TEST(PartitionTest, SoftmaxReductionsShareOneKernel) {
  Case c = record(rowsInputs(), softmax);
  ASSERT_EQ(c.plan.kernels.size(), 2u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(c.plan.kernels[0].kernel.reductions.size(), 2u);
}

// exp(x - max) feeds the sum and the output: recomputed in both kernels, never a temporary.
TEST(PartitionTest, ShortExpressionUsedByAReductionIsRecomputedNotStored) {
  Case c = record(rowsInputs(), softmaxComposite);
  ASSERT_EQ(c.plan.kernels.size(), 2u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(c.plan.kernels[0].kernel.reductions.size(), 2u);
  EXPECT_FALSE(hasTempOfSize(c.plan, 6 * 33)) << printPlan(c.graph, c.plan);
}

// Note [CPU row groups]: the output kernel reads exp(x - max) from the array the sum's loop
// filled, in one function running the two kernels row by row.
TEST(PartitionTest, CompositeSoftmaxIsARowGroupCachingItsExp) {
  Case c = record(rowsInputs(), softmaxComposite);
  std::vector<CpuFunction> functions = cpuFunctions(c.plan);
  ASSERT_EQ(functions.size(), 1u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(functions[0].epilogue, &c.plan.kernels[1].kernel);
  ASSERT_EQ(functions[0].caches.size(), 1u);
  const CpuRowCache& cache = functions[0].caches[0];
  EXPECT_EQ(c.plan.kernels[1].kernel.instrs.at(cache.epilogue_instr).fn, "exp");
  EXPECT_EQ(c.plan.kernels[0].kernel.instrs.at(cache.stats_instr).fn, "exp");
  EXPECT_EQ(renderCppProgram(c.plan).names,
            (std::vector<std::string>{c.plan.kernels[0].kernel.name + "_rows", ""}));
}

// Nothing expensive to share, but the epilogue still reads each row right after the statistics
// kernel did: one function, row by row, without caches (Note [CPU row groups]); with few rows
// the two kernels stay apart, so that the epilogue splits all its points across threads.
TEST(PartitionTest, LayerNormOverManyRowsIsARowGroupWithoutCaches) {
  Case c = layerNormCase(16, 20, 16);
  ASSERT_EQ(c.plan.kernels.size(), 2u) << printPlan(c.graph, c.plan);
  const std::vector<CpuFunction> functions = cpuFunctions(c.plan);
  ASSERT_EQ(functions.size(), 1u);
  EXPECT_EQ(functions[0].epilogue, &c.plan.kernels[1].kernel);
  EXPECT_TRUE(functions[0].caches.empty());
  EXPECT_EQ(cpuFunctions(layerNormCase(3, 5, 16).plan).size(), 2u);
}

// Every row divides by row 0's sum: run row by row across threads, a row would read a sum
// another thread may not have written yet.
TEST(PartitionTest, EpilogueReadingAnotherRowsStatisticsIsNoRowGroup) {
  Case c = record(rowsInputs(), softmaxOverFirstRowSum);
  ASSERT_EQ(c.plan.kernels.size(), 2u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(cpuFunctions(c.plan).size(), 2u);
}

TEST(PartitionTest, LayerNormStatisticsShareOneKernel) {
  Case c = layerNormCase();
  ASSERT_EQ(c.plan.kernels.size(), 2u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(c.plan.kernels[0].kernel.reductions.size(), 2u);
}

// Note [Split full reductions]: partials over the leading dimension, then their fold.
TEST(PartitionTest, LargeFullSumIsPartialsThenTheirFold) {
  Case c = record({at::randn({300, 300})}, sumAll);
  ASSERT_EQ(c.plan.kernels.size(), 2u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(c.plan.kernels[0].kernel.domain, (std::vector<int64_t>{300}));
  EXPECT_TRUE(c.plan.kernels[1].kernel.domain.empty());
  Case small = record({at::randn({30, 30})}, sumAll);
  EXPECT_EQ(small.plan.kernels.size(), 1u) << printPlan(small.graph, small.plan);
}

TEST(PartitionTest, ExternCallSplitsKernelsAndItsInputIsWritten) {
  Case c = record(linearInputs(), linearClamp);
  const int64_t mm = positionOf(c.graph, "aten::mm");
  const int64_t h = positionOf(c.graph, "aten::mul.Scalar");
  ASSERT_GE(mm, 0) << printText(c.graph);
  ASSERT_GE(h, 0) << printText(c.graph);
  ASSERT_EQ(c.plan.steps.size(), 3u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(c.plan.steps[0].kind, StepKind::kFusedKernel);
  ASSERT_EQ(c.plan.steps[1].kind, StepKind::kExternCall);
  ASSERT_EQ(c.plan.steps[2].kind, StepKind::kFusedKernel);
  EXPECT_EQ(c.plan.steps[1].position, static_cast<uint32_t>(mm));
  const FusedKernel& before = c.plan.kernels.at(c.plan.steps[0].kernel);
  const FusedKernel& after = c.plan.kernels.at(c.plan.steps[2].kernel);
  EXPECT_EQ(positions(buffers(before, /*output=*/true)), (std::vector<uint32_t>{uint32_t(h)}));
  std::vector<uint32_t> reads = positions(buffers(after, /*output=*/false));
  EXPECT_NE(std::find(reads.begin(), reads.end(), static_cast<uint32_t>(mm)), reads.end());
  EXPECT_EQ(positions(buffers(after, /*output=*/true)), outputPositions(c.graph));
}

TEST(PartitionTest, LayerNormNeedsNoFullSizeTemporary) {
  Case c = layerNormCase();
  EXPECT_EQ(countExterns(c.plan), 0) << printPlan(c.graph, c.plan);
  EXPECT_FALSE(hasTempOfSize(c.plan, 3 * 5 * 16)) << printPlan(c.graph, c.plan);
  const FusedKernel& last = *kernelSteps(c.plan).back();
  EXPECT_EQ(last.kernel.domain, (std::vector<int64_t>{3, 5, 16}));
}

/// Records a chain of `length` pointwise ops and lowers it with fusion on, which must take well
/// under a second (Note [Fusion partitioning]: near-linear) and give one kernel.
void expectLongChainPartitionsFast(int length) {
  // One trace: no automatic cut at the chain's repeated ops (Note [Automatic step boundaries]);
  // the limit is read at each sync.
  setenv("LAZYFUSE_TRACE_LIMIT", "0", /*overwrite=*/1);
  syncLiveTensors();
  at::Tensor y = at::randn({4, 4}).to(c10::DeviceType::Lazy);
  for (int i = 0; i < length; ++i) y = i % 2 ? y.neg() : y * 0.999;
  Graph graph = graphOf({y});
  unsetenv("LAZYFUSE_TRACE_LIMIT");  // read again at the next sync
  ASSERT_EQ(graph.nodes().size(), static_cast<size_t>(length) + 1);
  const auto start = std::chrono::steady_clock::now();
  ExecutionPlan plan = lowerGraph(graph, /*fuse=*/true);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took.count(), 1.0);
  // Note [Bounded kernels]: cut into kernels of at most 512 nodes, and no smaller than needed
  // (inlined chains are realized every 256 nodes).
  EXPECT_GE(plan.kernels.size(), static_cast<size_t>(length) / 512);
  EXPECT_LE(plan.kernels.size(), static_cast<size_t>(length) / 256 + 1);
  EXPECT_EQ(plan.steps.size(), plan.kernels.size());
}

TEST(PartitionTest, TwoThousandNodeChainPartitionsWellUnderASecond) {
  expectLongChainPartitionsFast(2000);
}

// Emitting a kernel inlines a chain by recursion; the partitioner bounds the inlined depth, so
// a 10,000-node chain neither overflows the stack nor slows down.
TEST(PartitionTest, TenThousandNodeChainPartitionsWellUnderASecond) {
  expectLongChainPartitionsFast(10000);
}

// Each level reads the previous one twice: 28 levels are 2^28 paths (tens of seconds if walked
// path by path), so the partitioner must visit each node once.
TEST(PartitionTest, DeepDiamondsPartitionWellUnderASecond) {
  at::Tensor y = at::rand({8, 8}).to(c10::DeviceType::Lazy);
  for (int i = 0; i < 28; ++i) y = (y * y) * 0.5;
  Graph graph = graphOf({y});
  const auto start = std::chrono::steady_clock::now();
  ExecutionPlan plan = lowerGraph(graph, /*fuse=*/true);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took.count(), 1.0);
  EXPECT_EQ(plan.kernels.size(), 1u);
}

}  // namespace
}  // namespace lazyfuse
