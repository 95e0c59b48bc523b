// The fusion partitioner end to end: op classes, the kernel groups it picks for graphs recorded
// through the dispatcher, the values the compiled plans compute, and golden dumps of plans and
// generated C++. See Note [Fusion partitioning] in lowering/partition.cpp.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "kernels/cpu_row_groups.h"
#include "kernels/detail/cpu_dialect.h"
#include "kernels/extern_runner.h"
#include "lowering/lowerings.h"
#include "lowering/pipeline.h"
#include "lowering/print_plan.h"
#include "test/cpp/recorded_case.h"

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sum.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <stdlib.h>

#ifndef LAZYFUSE_GOLDEN_DIR
#error "test/cpp/CMakeLists.txt defines LAZYFUSE_GOLDEN_DIR"
#endif

namespace lazyfuse {
namespace {

namespace fs = std::filesystem;
using namespace testing_case;

/// The source the CPU target compiles for `plan`: its kernels, and its row groups.
std::string kernelSource(const ExecutionPlan& plan) { return renderCppProgram(plan).source; }

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

// --- the graphs, shared by the partition, execution and golden tests ---
//
// Only ops with a C++ meta kernel record here (there are no Python meta kernels in this binary):
// relu and abs would run eagerly, so the graphs use clamp_min and pow instead.

std::vector<at::Tensor> pointwiseChain(const std::vector<at::Tensor>& in) {
  at::Tensor y = in[0].sin();
  y = y * 2;
  y = y + 1;
  y = y.tanh();
  y = y.pow(2);
  y = y.sqrt();
  y = y - 0.5;
  y = y.sigmoid();
  y = y.neg();
  y = y.exp();
  return {y};
}

std::vector<at::Tensor> broadcastChain(const std::vector<at::Tensor>& in) {
  // [4, 1, 8] with [3, 1] and [8]: the output is [4, 3, 8].
  at::Tensor y = (in[0] * in[1]).sigmoid() + in[2];
  return {(y - in[1]).tanh() * 0.5};
}

std::vector<at::Tensor> diamond(const std::vector<at::Tensor>& in) {
  at::Tensor a = in[0].exp();
  at::Tensor b = a + 1;
  at::Tensor c = a * 2;
  return {b + c};
}

std::vector<at::Tensor> transposedAdd(const std::vector<at::Tensor>& in) {
  return {in[0].t() + in[1]};
}

std::vector<at::Tensor> reshapedAdd(const std::vector<at::Tensor>& in) {
  // A reshape of an input and one of a computed value, both [4, 6] from [6, 4].
  return {in[0].reshape({4, 6}) + (in[0] * 3).reshape({4, 6}).sin() + in[1]};
}

std::vector<at::Tensor> sumExp(const std::vector<at::Tensor>& in) {
  return {at::sum(in[0].exp(), {1}) * 2};
}

std::vector<at::Tensor> softmax(const std::vector<at::Tensor>& in) {
  return {at::softmax(in[0], 1)};
}

std::vector<at::Tensor> linearClamp(const std::vector<at::Tensor>& in) {
  at::Tensor h = in[0] * 0.5;
  return {at::clamp_min(at::mm(h, in[1]) + in[2], 0)};
}

std::vector<at::Tensor> chainInputs() { return {at::randn({5, 7})}; }
std::vector<at::Tensor> broadcastInputs() {
  return {at::randn({4, 1, 8}), at::randn({3, 1}), at::randn({8})};
}
std::vector<at::Tensor> viewInputs() { return {at::randn({6, 4}), at::randn({4, 6})}; }
std::vector<at::Tensor> rowsInputs() { return {at::randn({6, 33}) * 4}; }
std::vector<at::Tensor> linearInputs() {
  return {at::randn({5, 6}), at::randn({6, 3}), at::randn({3})};
}

// native_layer_norm has no C++ meta kernel, so its node is built directly: the op the backend
// records for F.layer_norm, over x [3, 5, 16] with weight and bias [16], all three outputs used.
std::shared_ptr<const AtenCallAttrs> layerNormAttrs() {
  auto op = c10::Dispatcher::singleton().findSchema({"aten::native_layer_norm", ""});
  EXPECT_TRUE(op.has_value());
  auto attrs = std::make_shared<AtenCallAttrs>(*op);
  attrs->name = "aten::native_layer_norm";
  attrs->args.resize(5);
  attrs->args[0].kind = ArgKind::kTensor;
  attrs->args[1].constant = c10::IValue(std::vector<int64_t>{16});
  attrs->args[2].kind = ArgKind::kOptionalTensor;
  attrs->args[2].present = {1};
  attrs->args[3].kind = ArgKind::kOptionalTensor;
  attrs->args[3].present = {1};
  attrs->args[4].constant = c10::IValue(1e-5);
  attrs->returns.resize(3);
  attrs->outputs = {TensorMeta{at::kFloat, {3, 5, 16}, {80, 16, 1}},
                    TensorMeta{at::kFloat, {3, 5, 1}, {5, 1, 1}},
                    TensorMeta{at::kFloat, {3, 5, 1}, {5, 1, 1}}};
  attrs->finalize();
  return attrs;
}

Case layerNormCase() {
  at::Tensor x = at::randn({3, 5, 16}), w = at::randn({16}), b = at::randn({16});
  std::vector<Value> in;
  for (const at::Tensor& t : {x, w, b}) in.push_back(Value{Node::deviceData(t), 0});
  NodePtr node = Node::aten(layerNormAttrs(), in, {});
  Graph graph = Graph::fromRoots({Value{node, 0}, Value{node, 1}, Value{node, 2}});
  ExecutionPlan plan = lowerGraph(graph, /*fuse=*/true);
  auto [y, mean, rstd] = at::native_layer_norm(x, {16}, w, b, 1e-5);
  return Case{{y, mean, rstd}, std::move(graph), std::move(plan)};
}

// --- partitioning: which kernels, which buffers ---

TEST(PartitionTest, PointwiseChainIsOneKernelReadingTheInputWritingTheOutput) {
  Case c = record(chainInputs(), pointwiseChain);
  ASSERT_EQ(c.graph.nodes().size(), 11u) << printText(c.graph);
  ASSERT_EQ(c.plan.steps.size(), 1u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(c.plan.kernels.size(), 1u);
  const FusedKernel& k = c.plan.kernels[0];
  EXPECT_EQ(k.kernel.domain, (std::vector<int64_t>{5, 7}));
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
    const bool has_view = positionOf(c.graph, "aten::t_copy") >= 0 ||
                          positionOf(c.graph, "aten::view_copy") >= 0;
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

std::vector<at::Tensor> softmaxComposite(const std::vector<at::Tensor>& in) {
  at::Tensor e = (in[0] - in[0].amax({1}, /*keepdim=*/true)).exp();
  return {e / e.sum({1}, /*keepdim=*/true)};
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

// Nothing expensive to share: the two kernels stay two functions (running them row by row
// alone saved nothing measurable, Note [CPU row groups]).
TEST(PartitionTest, LayerNormIsNoRowGroup) {
  Case c = layerNormCase();
  EXPECT_EQ(cpuFunctions(c.plan).size(), c.plan.kernels.size());
}

std::vector<at::Tensor> softmaxOverFirstRowSum(const std::vector<at::Tensor>& in) {
  at::Tensor e = (in[0] - in[0].amax({1}, /*keepdim=*/true)).exp();
  return {e / e.sum({1}, /*keepdim=*/true).slice(0, 0, 1)};
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

std::vector<at::Tensor> sumAll(const std::vector<at::Tensor>& in) { return {in[0].sum()}; }

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
  at::Tensor y = at::randn({4, 4}).to(c10::DeviceType::Lazy);
  for (int i = 0; i < length; ++i) y = i % 2 ? y.neg() : y * 0.999;
  Graph graph = graphOf({y});
  ASSERT_EQ(graph.nodes().size(), static_cast<size_t>(length) + 1);
  const auto start = std::chrono::steady_clock::now();
  ExecutionPlan plan = lowerGraph(graph, /*fuse=*/true);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took.count(), 1.0);
  EXPECT_EQ(plan.kernels.size(), 1u);
  EXPECT_EQ(plan.steps.size(), 1u);
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

// --- execution: the compiled plans compute what eager CPU does ---

class PartitionRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = (fs::temp_directory_path() / "lf-partition-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  void SetUp() override {
    if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
    setenv("LAZYFUSE_CACHE_DIR", root_.c_str(), /*overwrite=*/1);
  }

  static void expectRunsLikeEager(const Case& c, double rtol = 1e-5, double atol = 1e-6) {
    std::vector<const Kernel*> kernels;
    std::vector<std::string> names;
    for (const FusedKernel& k : c.plan.kernels) {
      kernels.push_back(&k.kernel);
      names.push_back(k.kernel.name);
    }
    ASSERT_FALSE(kernels.empty());
    CpuCompileResult compiled = compileCpp(renderCpp(kernels), names);
    ASSERT_TRUE(compiled.module) << compiled.error;
    expectOutputs(c, runPlan(c.plan, c.graph, compiled.module->functions), rtol, atol);
    // The same plan as the CPU target runs it, with its row groups (Note [CPU row groups]).
    CpuCompileResult program = compileCppProgram(renderCppProgram(c.plan));
    ASSERT_TRUE(program.module) << program.error;
    const std::vector<CpuKernelFn>& functions = program.module->functions;
    expectOutputs(c, runPlan(c.plan, c.graph, [&](size_t index, const Graph& g, PlanValues& v) {
      runCpuKernel(c.plan, index, functions, g, v);
    }), rtol, atol);
  }

  static void expectOutputs(const Case& c, const std::vector<at::Tensor>& got, double rtol,
                            double atol) {
    ASSERT_EQ(got.size(), c.expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), c.expected[i].sizes()) << i;
      EXPECT_EQ(got[i].scalar_type(), c.expected[i].scalar_type()) << i;
      EXPECT_TRUE(at::allclose(got[i], c.expected[i], rtol, atol))
          << "output " << i << "\n" << printPlan(c.graph, c.plan) << got[i] << "\nexpected\n"
          << c.expected[i];
    }
  }

  static std::string root_;
};

std::string PartitionRunTest::root_;

TEST_F(PartitionRunTest, PointwiseChain) {
  expectRunsLikeEager(record(chainInputs(), pointwiseChain));
}
TEST_F(PartitionRunTest, BroadcastChain) {
  expectRunsLikeEager(record(broadcastInputs(), broadcastChain));
}
TEST_F(PartitionRunTest, Diamond) { expectRunsLikeEager(record(chainInputs(), diamond)); }
TEST_F(PartitionRunTest, Views) {
  expectRunsLikeEager(record(viewInputs(), transposedAdd));
  expectRunsLikeEager(record(viewInputs(), reshapedAdd));
}
TEST_F(PartitionRunTest, ReductionWithPrologueAndEpilogue) {
  expectRunsLikeEager(record({at::randn({6, 9})}, sumExp));
}
TEST_F(PartitionRunTest, Softmax) { expectRunsLikeEager(record(rowsInputs(), softmax)); }
TEST_F(PartitionRunTest, SoftmaxComposite) {
  expectRunsLikeEager(record(rowsInputs(), softmaxComposite));
  expectRunsLikeEager(record(rowsInputs(), softmaxOverFirstRowSum));
}
TEST_F(PartitionRunTest, LargeFullSum) {
  expectRunsLikeEager(record({at::randn({300, 300})}, sumAll), 1e-4, 1e-4);
}
TEST_F(PartitionRunTest, ExternBoundary) {
  expectRunsLikeEager(record(linearInputs(), linearClamp), 1e-5, 1e-5);
}
TEST_F(PartitionRunTest, LayerNorm) { expectRunsLikeEager(layerNormCase(), 1e-5, 1e-5); }

// --- golden dumps of plans and generated C++ ---

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Compares `text` with the golden file `name`, or writes it when LAZYFUSE_UPDATE_GOLDEN=1.
void expectGolden(const std::string& name, const std::string& text) {
  const fs::path path = fs::path(LAZYFUSE_GOLDEN_DIR) / name;
  const char* update = std::getenv("LAZYFUSE_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << text;
    return;
  }
  ASSERT_TRUE(fs::exists(path)) << path << " is missing; run with LAZYFUSE_UPDATE_GOLDEN=1";
  EXPECT_EQ(readFile(path), text) << "differs from " << path
                                  << "; regenerate with LAZYFUSE_UPDATE_GOLDEN=1 if intended";
}

void expectGoldenAndDeterministic(const std::string& name, const std::function<Case()>& make) {
  Case first = make(), second = make();
  const std::string plan = printPlan(first.graph, first.plan);
  const std::string source = kernelSource(first.plan);
  // Two recordings of the same program lower and render byte-identically.
  EXPECT_EQ(plan, printPlan(second.graph, second.plan));
  EXPECT_EQ(source, kernelSource(second.plan));
  EXPECT_EQ(source, kernelSource(first.plan));
  expectGolden(name + ".plan.txt", plan);
  // The golden file holds the kernels: the prelude every source starts with is a fixed text.
  const std::string prelude =
      "// codegen version " + std::to_string(kCpuCodegenVersion) + "\n" + detail::cpuPrelude();
  ASSERT_EQ(source.compare(0, prelude.size(), prelude), 0)
      << "source does not start with the prelude";
  expectGolden(name + ".cpp", source.substr(prelude.size()));
}

TEST(PartitionGoldenTest, PointwiseBroadcast) {
  expectGoldenAndDeterministic("pointwise_broadcast",
                               [] { return record(broadcastInputs(), broadcastChain); });
}

TEST(PartitionGoldenTest, Softmax) {
  expectGoldenAndDeterministic("softmax", [] { return record(rowsInputs(), softmax); });
}

TEST(PartitionGoldenTest, SoftmaxCompositeRowGroup) {
  expectGoldenAndDeterministic("softmax_composite",
                               [] { return record(rowsInputs(), softmaxComposite); });
}

TEST(PartitionGoldenTest, LayerNormForward) {
  expectGoldenAndDeterministic("layer_norm", layerNormCase);
}

}  // namespace
}  // namespace lazyfuse
