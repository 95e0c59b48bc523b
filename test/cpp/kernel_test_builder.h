#pragma once

// Builds kernel IR by hand for the renderer tests (test_cuda_codegen.cpp): one helper per
// instruction kind, each returning the new instruction's index. See Note [Kernel IR].

#include "lowering/kernel_ir.h"

#include <string>
#include <utility>
#include <vector>

namespace lazyfuse::testing {

struct KernelBuilder {
  Kernel k;
  explicit KernelBuilder(std::string name, std::vector<int64_t> domain = {}) {
    k.name = std::move(name);
    k.domain = std::move(domain);
  }
  int32_t push(KInstr instr) {
    k.instrs.push_back(std::move(instr));
    return static_cast<int32_t>(k.instrs.size() - 1);
  }
  int32_t buffer(c10::ScalarType dtype, bool output) {
    k.buffers.push_back(KBuffer{dtype, output});
    return static_cast<int32_t>(k.buffers.size() - 1);
  }
  int32_t param(bool floating) {
    k.params.push_back(KParam{floating});
    return static_cast<int32_t>(k.params.size() - 1);
  }
  int32_t load(int32_t buffer, c10::ScalarType dtype, IxPtr index, int32_t scope = -1) {
    KInstr instr;
    instr.op = KOp::kLoad;
    instr.dtype = dtype;
    instr.buffer = buffer;
    instr.index = std::move(index);
    instr.scope = scope;
    return push(instr);
  }
  int32_t fn(const std::string& name, c10::ScalarType dtype, std::vector<int32_t> args,
             int32_t scope = -1) {
    KInstr instr;
    instr.op = args.size() == 1 ? KOp::kUnary : KOp::kBinary;
    instr.dtype = dtype;
    instr.fn = name;
    instr.args = std::move(args);
    instr.scope = scope;
    return push(instr);
  }
  int32_t op(KOp kind, c10::ScalarType dtype, std::vector<int32_t> args, int64_t ivalue = 0,
             int32_t scope = -1) {
    KInstr instr;
    instr.op = kind;
    instr.dtype = dtype;
    instr.args = std::move(args);
    instr.ivalue = ivalue;
    instr.scope = scope;
    return push(instr);
  }
  int32_t constant(c10::ScalarType dtype, double value, int32_t scope = -1) {
    KInstr instr;
    instr.op = KOp::kConst;
    instr.dtype = dtype;
    instr.fvalue = value;
    instr.ivalue = static_cast<int64_t>(value);
    instr.scope = scope;
    return push(instr);
  }
  int32_t reduce(ReduceKind kind, std::vector<int64_t> sizes, int32_t body, c10::ScalarType dtype) {
    k.reductions.push_back(KReduction{kind, std::move(sizes), body, dtype});
    return op(KOp::kReduce, dtype, {}, static_cast<int64_t>(k.reductions.size() - 1));
  }
  void store(int32_t value, int32_t buffer, IxPtr index) {
    k.stores.push_back(KStore{value, buffer, std::move(index)});
  }
};

/// How many times `word` occurs in `text` (overlaps counted).
inline size_t countOccurrences(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

}  // namespace lazyfuse::testing
