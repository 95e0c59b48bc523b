#include "lazy_ir/graph.h"

#include <c10/core/ScalarType.h>

#include <sstream>

namespace lazyfuse {
namespace {

void printMeta(std::ostream& out, const TensorMeta& meta) {
  out << c10::toString(meta.dtype) << "[";
  for (size_t i = 0; i < meta.sizes.size(); ++i) out << (i ? ", " : "") << meta.sizes[i];
  out << "]";
}

void printOutputs(std::ostream& out, const Node& node) {
  for (size_t i = 0; i < node.numOutputs(); ++i) {
    out << (i ? ", " : "");
    printMeta(out, node.outputMeta(i));
  }
}

void printRef(std::ostream& out, const NodeRef& ref, const Node& producer) {
  out << "%" << ref.position;
  if (producer.numOutputs() > 1) out << "." << ref.index;
}

// Prints the arguments of an aten node following its recipe. See Note [Argument recipes].
void printArgs(std::ostream& out, const Graph& graph, size_t position) {
  const Node& node = *graph.nodes()[position];
  const AtenCallAttrs& attrs = node.aten();
  const auto& schema = attrs.op.schema();
  auto inputs = graph.inputsOf(position);
  size_t next_input = 0;
  size_t next_param = 0;
  auto input = [&](std::ostream& o) {
    const NodeRef& ref = inputs[next_input++];
    printRef(o, ref, *graph.nodes()[ref.position]);
  };
  for (size_t i = 0; i < attrs.args.size(); ++i) {
    const ArgSlot& slot = attrs.args[i];
    out << (i ? ", " : "");
    if (i < schema.arguments().size() && schema.arguments()[i].kwarg_only()) {
      out << schema.arguments()[i].name() << "=";
    }
    switch (slot.kind) {
      case ArgKind::kTensor: input(out); break;
      case ArgKind::kOptionalTensor:
        if (slot.present[0])
          input(out);
        else
          out << "None";
        break;
      case ArgKind::kTensorList:
      case ArgKind::kOptionalTensorList:
        out << "[";
        for (size_t k = 0; k < slot.present.size(); ++k) {
          out << (k ? ", " : "");
          if (slot.present[k])
            input(out);
          else
            out << "None";
        }
        out << "]";
        break;
      case ArgKind::kConstant: out << slot.constant; break;
      case ArgKind::kParam: out << "$" << next_param++; break;
    }
  }
}

}  // namespace

std::string printText(const Graph& graph) {
  std::ostringstream out;
  out << "graph(hash=0x" << std::hex << graph.hash() << std::dec
      << ", nodes=" << graph.nodes().size() << ", inputs=" << graph.dataPositions().size() << ")\n";
  for (size_t position = 0; position < graph.nodes().size(); ++position) {
    const Node& node = *graph.nodes()[position];
    out << "  %" << position << " = " << node.opName() << "(";
    if (node.kind() == OpKind::kAten) printArgs(out, graph, position);
    out << ") : ";
    printOutputs(out, node);
    out << "\n";
  }
  out << "  return (";
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const NodeRef& ref = graph.outputs()[i];
    out << (i ? ", " : "");
    printRef(out, ref, *graph.nodes()[ref.position]);
  }
  out << ")\n";
  return out.str();
}

std::string printDot(const Graph& graph) {
  std::ostringstream out;
  out << "digraph lazyfuse {\n  node [shape=box, fontname=monospace];\n";
  for (size_t position = 0; position < graph.nodes().size(); ++position) {
    const Node& node = *graph.nodes()[position];
    out << "  n" << position << " [label=\"%" << position << " " << node.opName() << "\\n";
    printOutputs(out, node);
    out << "\"];\n";
    for (const NodeRef& ref : graph.inputsOf(position)) {
      out << "  n" << ref.position << " -> n" << position << ";\n";
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    out << "  out" << i << " [shape=ellipse, label=\"output " << i << "\"];\n";
    out << "  n" << graph.outputs()[i].position << " -> out" << i << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace lazyfuse
