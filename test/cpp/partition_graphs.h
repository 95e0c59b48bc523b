#pragma once

// The graphs the partitioner's tests record (test_partition.cpp, test_compiled_plans.cpp), with
// their inputs.
//
// Only ops with a C++ meta kernel record here (there are no Python meta kernels in this binary):
// relu and abs would run eagerly, so the graphs use clamp_min and pow instead.
#include "test/cpp/recorded_case.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sum.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace lazyfuse {
namespace testing_case {

inline std::vector<at::Tensor> pointwiseChain(const std::vector<at::Tensor>& in) {
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

inline std::vector<at::Tensor> broadcastChain(const std::vector<at::Tensor>& in) {
  // [4, 1, 8] with [3, 1] and [8]: the output is [4, 3, 8].
  at::Tensor y = (in[0] * in[1]).sigmoid() + in[2];
  return {(y - in[1]).tanh() * 0.5};
}

inline std::vector<at::Tensor> diamond(const std::vector<at::Tensor>& in) {
  at::Tensor a = in[0].exp();
  at::Tensor b = a + 1;
  at::Tensor c = a * 2;
  return {b + c};
}

inline std::vector<at::Tensor> transposedAdd(const std::vector<at::Tensor>& in) {
  return {in[0].t() + in[1]};
}

inline std::vector<at::Tensor> reshapedAdd(const std::vector<at::Tensor>& in) {
  // A reshape of an input and one of a computed value, both [4, 6] from [6, 4].
  return {in[0].reshape({4, 6}) + (in[0] * 3).reshape({4, 6}).sin() + in[1]};
}

inline std::vector<at::Tensor> sumExp(const std::vector<at::Tensor>& in) {
  return {at::sum(in[0].exp(), {1}) * 2};
}

inline std::vector<at::Tensor> softmax(const std::vector<at::Tensor>& in) {
  return {at::softmax(in[0], 1)};
}

inline std::vector<at::Tensor> linearClamp(const std::vector<at::Tensor>& in) {
  at::Tensor h = in[0] * 0.5;
  return {at::clamp_min(at::mm(h, in[1]) + in[2], 0)};
}

inline std::vector<at::Tensor> softmaxComposite(const std::vector<at::Tensor>& in) {
  at::Tensor e = (in[0] - in[0].amax({1}, /*keepdim=*/true)).exp();
  return {e / e.sum({1}, /*keepdim=*/true)};
}

inline std::vector<at::Tensor> softmaxOverFirstRowSum(const std::vector<at::Tensor>& in) {
  at::Tensor e = (in[0] - in[0].amax({1}, /*keepdim=*/true)).exp();
  return {e / e.sum({1}, /*keepdim=*/true).slice(0, 0, 1)};
}

inline std::vector<at::Tensor> sumAll(const std::vector<at::Tensor>& in) { return {in[0].sum()}; }

inline std::vector<at::Tensor> chainInputs() { return {at::randn({5, 7})}; }
inline std::vector<at::Tensor> broadcastInputs() {
  return {at::randn({4, 1, 8}), at::randn({3, 1}), at::randn({8})};
}
inline std::vector<at::Tensor> viewInputs() { return {at::randn({6, 4}), at::randn({4, 6})}; }
inline std::vector<at::Tensor> rowsInputs() { return {at::randn({6, 33}) * 4}; }
inline std::vector<at::Tensor> linearInputs() {
  return {at::randn({5, 6}), at::randn({6, 3}), at::randn({3})};
}

// native_layer_norm has no C++ meta kernel, so its node is built directly: the op the backend
// records for F.layer_norm, over x [a, b, n] with weight and bias [n], all three outputs used.
inline std::shared_ptr<const AtenCallAttrs> layerNormAttrs(int64_t a, int64_t b, int64_t n) {
  auto op = c10::Dispatcher::singleton().findSchema({"aten::native_layer_norm", ""});
  EXPECT_TRUE(op.has_value());
  auto attrs = std::make_shared<AtenCallAttrs>(*op);
  attrs->name = "aten::native_layer_norm";
  attrs->args.resize(5);
  attrs->args[0].kind = ArgKind::kTensor;
  attrs->args[1].constant = c10::IValue(std::vector<int64_t>{n});
  attrs->args[2].kind = ArgKind::kOptionalTensor;
  attrs->args[2].present = {1};
  attrs->args[3].kind = ArgKind::kOptionalTensor;
  attrs->args[3].present = {1};
  attrs->args[4].constant = c10::IValue(1e-5);
  attrs->returns.resize(3);
  attrs->outputs = {TensorMeta{at::kFloat, {a, b, n}, {b * n, n, 1}},
                    TensorMeta{at::kFloat, {a, b, 1}, {b, 1, 1}},
                    TensorMeta{at::kFloat, {a, b, 1}, {b, 1, 1}}};
  attrs->finalize();
  return attrs;
}

/// native_layer_norm over the last dimension of x [a, b, n].
inline Case layerNormCase(int64_t a = 3, int64_t b = 5, int64_t n = 16) {
  at::Tensor x = at::randn({a, b, n}), w = at::randn({n}), bias = at::randn({n});
  std::vector<Value> in;
  for (const at::Tensor& t : {x, w, bias}) in.push_back(Value{Node::deviceData(t), 0});
  NodePtr node = Node::aten(layerNormAttrs(a, b, n), in, {});
  Graph graph = Graph::fromRoots({Value{node, 0}, Value{node, 1}, Value{node, 2}});
  ExecutionPlan plan = lowerGraph(graph, /*fuse=*/true);
  auto [y, mean, rstd] = at::native_layer_norm(x, {n}, w, bias, 1e-5);
  return Case{{y, mean, rstd}, std::move(graph), std::move(plan)};
}

}  // namespace testing_case
}  // namespace lazyfuse
