// IR construction, hashing, printing and lowering. See Note [What a graph hash covers].
#include "kernels/plan_runner.h"
#include "lazy_ir/graph.h"
#include "lowering/pipeline.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/add.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sum.h>
#include <gtest/gtest.h>

namespace lazyfuse {
namespace {

c10::OperatorHandle opNamed(const char* name, const char* overload) {
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  EXPECT_TRUE(op.has_value()) << name;
  return *op;
}

// add.Tensor(self, other, *, alpha): two tensor inputs and a Scalar parameter.
std::shared_ptr<const AtenCallAttrs> addAttrs(const TensorMeta& out) {
  auto attrs = std::make_shared<AtenCallAttrs>(opNamed("aten::add", "Tensor"));
  attrs->name = "aten::add.Tensor";
  attrs->args.resize(3);
  attrs->args[0].kind = ArgKind::kTensor;
  attrs->args[1].kind = ArgKind::kTensor;
  attrs->args[2].kind = ArgKind::kParam;
  attrs->returns.push_back(ReturnSlot{});
  attrs->outputs.push_back(out);
  attrs->finalize();
  return attrs;
}

// sum.dim_IntList(self, dim, keepdim, *, dtype): `dim` and `keepdim` are hashed constants.
std::shared_ptr<const AtenCallAttrs> sumAttrs(int64_t dim, const TensorMeta& out) {
  auto attrs = std::make_shared<AtenCallAttrs>(opNamed("aten::sum", "dim_IntList"));
  attrs->name = "aten::sum.dim_IntList";
  attrs->args.resize(4);
  attrs->args[0].kind = ArgKind::kTensor;
  attrs->args[1].constant = c10::IValue(std::vector<int64_t>{dim});
  attrs->args[2].constant = c10::IValue(false);
  attrs->args[3].constant = c10::IValue();
  attrs->returns.push_back(ReturnSlot{});
  attrs->outputs.push_back(out);
  attrs->finalize();
  return attrs;
}

// select_copy.int(self, dim, index): `index` is a position (Note [Positions as plan arguments]).
std::shared_ptr<const AtenCallAttrs> selectAttrs(int64_t dim, int64_t index,
                                                 const TensorMeta& out) {
  auto attrs = std::make_shared<AtenCallAttrs>(opNamed("aten::select_copy", "int"));
  attrs->name = "aten::select_copy.int";
  attrs->args.resize(3);
  attrs->args[0].kind = ArgKind::kTensor;
  attrs->args[1].constant = c10::IValue(dim);
  attrs->args[2].constant = c10::IValue(index);
  attrs->returns.push_back(ReturnSlot{});
  attrs->outputs.push_back(out);
  attrs->finalize();
  return attrs;
}

Value deviceData(const at::Tensor& t) { return Value{Node::deviceData(t), 0}; }

Value add(const Value& a, const Value& b, double alpha = 1.0) {
  return Value{Node::aten(addAttrs(a.meta()), {a, b}, {c10::IValue(alpha)}), 0};
}

// (a + b) + (a + b) as a diamond, over fresh buffers of the given shape and dtype.
Graph diamond(at::IntArrayRef shape, at::ScalarType dtype, double alpha = 1.0) {
  Value a = deviceData(at::randn(shape).to(dtype));
  Value b = deviceData(at::randn(shape).to(dtype));
  Value s = add(a, b, alpha);
  return Graph::fromRoots({add(s, s)});
}

TEST(GraphTest, OrdersInputsBeforeUsersOnce) {
  Graph g = diamond({2, 3}, at::kFloat);
  ASSERT_EQ(g.nodes().size(), 4u);
  EXPECT_EQ(g.dataPositions().size(), 2u);
  for (size_t p = 0; p < g.nodes().size(); ++p) {
    for (const NodeRef& ref : g.inputsOf(p)) EXPECT_LT(ref.position, p);
  }
  EXPECT_EQ(g.outputs().at(0).position, 3u);
}

TEST(GraphTest, EqualGraphsHashEqualWhateverTheDataAndScalars) {
  EXPECT_EQ(diamond({2, 3}, at::kFloat).hash(), diamond({2, 3}, at::kFloat).hash());
  EXPECT_EQ(diamond({2, 3}, at::kFloat, 1.0).hash(), diamond({2, 3}, at::kFloat, 5.0).hash());
}

TEST(GraphTest, ShapeAndDtypeChangeTheHash) {
  HashValue base = diamond({2, 3}, at::kFloat).hash();
  EXPECT_NE(base, diamond({3, 2}, at::kFloat).hash());
  EXPECT_NE(base, diamond({2, 3}, at::kDouble).hash());
}

TEST(GraphTest, AttributesChangeTheHash) {
  Value x = deviceData(at::randn({4, 5}));
  TensorMeta m0{at::kFloat, {5}, {1}};
  TensorMeta m1{at::kFloat, {4}, {1}};
  Graph g0 = Graph::fromRoots({Value{Node::aten(sumAttrs(0, m0), {x}, {}), 0}});
  Graph g1 = Graph::fromRoots({Value{Node::aten(sumAttrs(1, m1), {x}, {}), 0}});
  EXPECT_NE(g0.hash(), g1.hash());
}

TEST(GraphTest, PositionsChangeTheHashButNotThePositionBlindHash) {
  at::Tensor buffer = at::randn({4, 5});
  auto select = [&](int64_t dim, int64_t index, const TensorMeta& out) {
    Value x = deviceData(buffer);
    return Graph::fromRoots({Value{Node::aten(selectAttrs(dim, index, out), {x}, {}), 0}});
  };
  const TensorMeta row{at::kFloat, {5}, {1}}, column{at::kFloat, {4}, {1}};
  Graph g1 = select(0, 1, row), g3 = select(0, 3, row), last = select(0, -1, row);
  EXPECT_NE(g1.hash(), g3.hash());
  EXPECT_EQ(g1.positionBlindHash(), g3.positionBlindHash());
  EXPECT_EQ(g1.positionBlindHash(), last.positionBlindHash());
  EXPECT_EQ(g3.positionValues(), (std::vector<int64_t>{3}));
  EXPECT_EQ(last.positionValues(std::vector<uint32_t>{1}), (std::vector<int64_t>{-1}));
  // The dimension is no position, and neither are sizes.
  EXPECT_NE(g1.positionBlindHash(), select(1, 1, column).positionBlindHash());
  EXPECT_NE(g1.positionBlindHash(),
            select(0, 1, TensorMeta{at::kFloat, {5}, {2}}).positionBlindHash());
  // Graphs without positions: the blind hash tells them apart as the hash does.
  EXPECT_NE(diamond({2, 3}, at::kFloat).positionBlindHash(),
            diamond({3, 2}, at::kFloat).positionBlindHash());
  EXPECT_TRUE(diamond({2, 3}, at::kFloat).positionValues().empty());
}

TEST(GraphTest, AliasingPatternChangesTheHash) {
  at::Tensor buffer = at::randn({3});
  Graph shared = Graph::fromRoots({add(deviceData(buffer), deviceData(buffer))});
  Graph distinct = Graph::fromRoots({add(deviceData(at::randn({3})), deviceData(at::randn({3})))});
  EXPECT_EQ(shared.aliasClasses(), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(distinct.aliasClasses(), (std::vector<uint32_t>{0, 1}));
  EXPECT_NE(shared.hash(), distinct.hash());
}

TEST(GraphTest, SharingVersusDuplicatingHashesDifferently) {
  Value a = deviceData(at::randn({3}));
  Value once = add(a, a);
  Graph shared = Graph::fromRoots({add(once, once)});
  Graph duplicated = Graph::fromRoots({add(add(a, a), add(a, a))});
  EXPECT_NE(shared.nodes().size(), duplicated.nodes().size());
  EXPECT_NE(shared.hash(), duplicated.hash());
}

// Note [Values a sync keeps for later]: a computed node is read as device data from then on.
TEST(GraphTest, AComputedNodeIsReadAsDeviceData) {
  Value a = deviceData(at::randn({3}));
  Value s = add(a, a);
  Value later = add(s, s);  // pending outside the graph that computes s
  at::Tensor value = at::randn({3});
  Graph::setComputed(s.node, {value});
  EXPECT_TRUE(s.node->inputs().empty());  // a computed node lets go of its trace
  Graph g = Graph::fromRoots({later});
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[0]->kind(), OpKind::kDeviceData);
  EXPECT_TRUE(g.nodes()[0]->data().is_same(value));
  ASSERT_EQ(g.computedInputs().size(), 1u);
  EXPECT_EQ(g.computedInputs()[0].position, 0u);
  EXPECT_EQ(g.computedInputs()[0].owner.get(), s.node.get());
  EXPECT_EQ(g.computedInputs()[0].uses, 2u);  // both inputs of `later`
  Value d = deviceData(value);
  EXPECT_EQ(g.hash(), Graph::fromRoots({add(d, d)}).hash());
  // A root that was computed is its device data; the first value stored stays.
  Graph root = Graph::fromRoots({s});
  ASSERT_EQ(root.nodes().size(), 1u);
  Graph::setComputed(s.node, {at::randn({3})});
  EXPECT_TRUE(Graph::computedValue(s)->data().is_same(value));
  EXPECT_FALSE(Graph::computedValue(later));
}

TEST(GraphTest, AFailedNodeRaisesWhenAGraphReadsIt) {
  Value a = deviceData(at::randn({3}));
  Value s = add(a, a);
  Value later = add(s, a);
  Graph::setFailed(s.node, "the extern failed");
  try {
    Graph::fromRoots({later});
    FAIL() << "a graph reading a failed node was built";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the extern failed"), std::string::npos) << e.what();
  }
}

TEST(GraphTest, AddedOutputsAreHashed) {
  Value a = deviceData(at::randn({3}));
  Value s = add(a, a);
  Graph g = Graph::fromRoots({add(s, s)});
  const HashValue before = g.hash();
  g.addOutputs({NodeRef{1, 0}});
  EXPECT_EQ(g.outputs().size(), 2u);
  EXPECT_NE(g.hash(), before);
  EXPECT_THROW(g.addOutputs({NodeRef{7, 0}}), c10::Error);
}

TEST(GraphTest, PrintsTextAndDot) {
  Graph g = diamond({2, 3}, at::kFloat);
  std::string text = printText(g);
  EXPECT_NE(text.find("%0 = device_data() : Float[2, 3]"), std::string::npos) << text;
  EXPECT_NE(text.find("%2 = aten::add.Tensor(%0, %1, alpha=$0) : Float[2, 3]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("return (%3)"), std::string::npos) << text;
  EXPECT_EQ(text, printText(g));
  std::string dot = printDot(g);
  EXPECT_EQ(dot.rfind("digraph lazyfuse {", 0), 0u) << dot;
  EXPECT_NE(dot.find("n2 -> n3;"), std::string::npos) << dot;
}

TEST(GraphTest, RejectsARecipeMismatch) {
  Value a = deviceData(at::randn({3}));
  EXPECT_THROW(Node::aten(addAttrs(a.meta()), {a}, {c10::IValue(1.0)}), c10::Error);
  EXPECT_THROW(Node::aten(addAttrs(a.meta()), {a, a}, {}), c10::Error);
}

TEST(LoweringTest, OneStepPerAtenNodeAndIntermediatesReleased) {
  Graph g = diamond({2, 3}, at::kFloat);
  ExecutionPlan plan = lowerGraph(g);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].position, 2u);
  EXPECT_EQ(plan.steps[1].release_after, std::vector<uint32_t>{2});
  EXPECT_TRUE(plan.steps[0].release_after.empty());
}

TEST(ExternRunnerTest, MatchesEager) {
  at::Tensor a = at::randn({2, 3});
  at::Tensor b = at::randn({2, 3});
  Value s = add(deviceData(a), deviceData(b), 2.0);
  Graph g = Graph::fromRoots({add(s, s)});
  std::vector<at::Tensor> out = runPlan(lowerGraph(g), g);
  ASSERT_EQ(out.size(), 1u);
  at::Tensor expected = at::add(a, b, 2.0);
  EXPECT_TRUE(at::allclose(out[0], at::add(expected, expected)));
  // Inputs are never written by a plan run without donation (Note [Donated buffers]).
  EXPECT_TRUE(at::allclose(a + 0, a));
}

// Note [Loud lowering errors]: an assertion of ours inside a lowering fails the lowering with the
// op and the graph named; it is never taken for a decline that runs the ATen kernel instead.
TEST(GraphTest, InternalErrorInALoweringFailsLoudly) {
  Value a = deviceData(at::randn({2, 3}));
  TensorMeta wrong = a.meta();
  wrong.sizes = {6};  // an output of lower rank than its inputs: no broadcast gives it
  wrong.strides = {1};
  Graph graph =
      Graph::fromRoots({Value{Node::aten(addAttrs(wrong), {a, a}, {c10::IValue(1.0)}), 0}});
  try {
    lowerGraph(graph, /*fuse=*/true);
    FAIL() << "lowering a node with inconsistent metadata did not fail";
  } catch (const c10::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("of graph 0x"), std::string::npos) << message;
    EXPECT_NE(message.find("broadcast of rank 2 to 1"), std::string::npos) << message;
    EXPECT_NE(message.find("LAZYFUSE_DUMP=ir"), std::string::npos) << message;
  }
  // Without fusion nothing is lowered: the node is an ATen call.
  EXPECT_NO_THROW(lowerGraph(graph, /*fuse=*/false));
}

}  // namespace
}  // namespace lazyfuse
