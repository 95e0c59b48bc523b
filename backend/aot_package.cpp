// Ahead-of-time packages (Note [Ahead-of-time packages]): writing one from recorded lazy
// tensors, loading it, and running it without Python.
#include "backend/aot_package.h"

#include "backend/detail/aot_format.h"
#include "backend/detail/graph_cache.h"
#include "backend/device.h"
#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "backend/plan_compiler.h"
#include "kernels/cpu_kernel_families.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/graph.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/custom_class.h>

#include <cstring>
#include <map>
#include <utility>

namespace lazyfuse {

// Note [Ahead-of-time packages]
// `lazyfuse.aot_compile(exported_program, path)` runs the exported program once on lazy copies
// of its example inputs and writes what that recorded: the graph of its outputs (every node with
// its op's name, its argument recipe, output metadata and parameters: Note [Argument recipes]),
// the memory of every tensor the graph reads that is not an input (weights and buffers, each
// storage once, so tensors that alias stay aliases), the dtypes, sizes and strides it was built
// for, and the shared objects of its fused CPU kernels (Note [Kernels in a package]). Its plan
// is compiled with static kernels before it is written, and every run of the package compiles
// and looks up with static kernels too, so a run on the same CPU finds every function in the
// package and needs no compiler; on another CPU of the same architecture the kernels are
// compiled again from the graph (a machine without a compiler then runs the graph node by node,
// counted in FusionFallback). CUDA kernels are not packaged: NVRTC compiles them where the
// package runs.
//
// The file is a header line with the format, then the SHA-1 and size of the payload, then the
// payload: torch's pickle of one tuple (what torch.load reads, too). A file whose header or
// checksum does not match, or that another lazyfuse version, torch version or architecture
// wrote, is refused with an error that says which. A run checks its inputs against the package's
// dtypes and sizes and copies an input with other strides into the package's layout; it builds
// the graph's nodes anew over them and syncs its outputs as one graph (fused from the first run:
// ScopedFuseNewGraphs), so from the second run on the graph cache holds its plan. An output the
// plan hands back as an input's, a weight's or another output's buffer is copied: outputs never
// share memory. The Python side refuses a program whose recording synced (a data-dependent op,
// an op run eagerly), since what a sync computed from the example inputs would be stored as a
// weight, and turns automatic trace cuts off while it records. Loading validates every index,
// dtype and extent of the payload, so a hand-edited file is "damaged", not a crash. The shared
// objects are code: they are used only from a file this user owns and nobody else may write;
// from another the kernels are compiled from the graph.
namespace {

using namespace aot;

/// The package's record of ATen node `node`, whose inputs are `refs`.
c10::IValue atenRecord(const Node& node, c10::ArrayRef<NodeRef> refs) {
  const AtenCallAttrs& attrs = node.aten();
  c10::impl::GenericList args = anyList();
  for (const ArgSlot& slot : attrs.args) {
    std::vector<int64_t> present(slot.present.begin(), slot.present.end());
    args.push_back(c10::ivalue::Tuple::create({static_cast<int64_t>(slot.kind), slot.mutated,
                                               c10::List<int64_t>(present), slot.constant}));
  }
  c10::impl::GenericList returns = anyList();
  for (const ReturnSlot& ret : attrs.returns) {
    returns.push_back(
        c10::ivalue::Tuple::create({static_cast<int64_t>(ret.kind), static_cast<int64_t>(ret.count),
                                    static_cast<int64_t>(ret.arg)}));
  }
  c10::impl::GenericList outputs = anyList();
  for (const TensorMeta& meta : attrs.outputs) outputs.push_back(metaTuple(meta));
  c10::impl::GenericList inputs = anyList();
  for (const NodeRef& ref : refs) {
    inputs.push_back(c10::ivalue::Tuple::create(
        {static_cast<int64_t>(ref.position), static_cast<int64_t>(ref.index)}));
  }
  c10::impl::GenericList params = anyList();
  for (const c10::IValue& param : node.params()) {
    LF_CHECK(!param.isGenerator(), "an ahead-of-time package cannot hold ", attrs.name,
             ": it draws random numbers from a generator");
    params.push_back(param);
  }
  return c10::ivalue::Tuple::create(
      {std::string("aten"), attrs.name, args, returns, outputs, inputs, params});
}

/// The input of `inputs` whose buffer device-data `data` is, or -1; raises when `data` is another
/// view of an input's memory.
int64_t inputIndexOf(const at::Tensor& data, const std::vector<at::Tensor>& inputs) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const at::Tensor& input = inputs[k];
    if (!input.storage().is_alias_of(data.storage())) continue;
    LF_CHECK(input.sizes() == data.sizes() && input.strides() == data.strides() &&
                 input.storage_offset() == data.storage_offset(),
             "aot_compile: the program reads another view of input ", k,
             "'s memory; pass inputs that share no memory");
    return static_cast<int64_t>(k);
  }
  return -1;
}

/// The bytes of `data`'s whole storage as a uint8 CPU tensor of its own.
at::Tensor storageBytes(const at::Tensor& data) {
  const int64_t nbytes = static_cast<int64_t>(data.storage().nbytes());
  at::Tensor bytes = at::empty({0}, data.options().dtype(at::kByte));
  bytes.set_(data.storage(), 0, {nbytes}, {1});
  return bytes.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

/// One node of a package's graph: a graph input, a weight, or an ATen call.
struct AotProgram::Record {
  enum class Kind { kInput, kConstant, kAten } kind = Kind::kAten;
  int64_t input = 0;  // kInput: which input
  NodePtr constant;   // kConstant: its device-data node, shared by every run
  std::shared_ptr<const AtenCallAttrs> attrs;  // kAten
  std::vector<std::pair<uint32_t, uint32_t>> inputs;
  std::vector<c10::IValue> params;
};

void saveAotPackage(const std::string& path, const std::vector<at::Tensor>& inputs,
                    const std::vector<at::Tensor>& outputs, const std::string& metadata) {
  std::vector<at::Tensor> input_buffers;
  c10::impl::GenericList input_specs = anyList();
  for (const at::Tensor& input : inputs) {
    LazyTensorImpl& impl = lazyImplOrRaise(input, "aot_compile takes lazy inputs");
    LF_CHECK(!impl.reportsOtherGeometry(), "aot_compile: an input is a view; pass whole tensors");
    input_buffers.push_back(materialize(input));
    input_specs.push_back(metaTuple(TensorMeta::of(input_buffers.back())));
  }
  std::vector<Value> roots;
  for (const at::Tensor& output : outputs) {
    LazyTensorImpl& impl = lazyImplOrRaise(output, "aot_compile: the program returns lazy tensors");
    LF_CHECK(!impl.reportsOtherGeometry(),
             "aot_compile: an output is a view; return a tensor of its own (clone it)");
    roots.push_back(impl.data().asInput());
  }
  const Graph graph = Graph::fromRoots(roots);

  c10::impl::GenericList nodes = anyList();
  c10::impl::GenericList storages = anyList();
  std::map<const c10::StorageImpl*, int64_t> storage_index;
  for (size_t p = 0; p < graph.nodes().size(); ++p) {
    const Node& node = *graph.nodes()[p];
    if (node.kind() == OpKind::kAten) {
      nodes.push_back(atenRecord(node, graph.inputsOf(p)));
      continue;
    }
    const at::Tensor& data = node.data();
    if (int64_t k = inputIndexOf(data, input_buffers); k >= 0) {
      nodes.push_back(c10::ivalue::Tuple::create({std::string("input"), k}));
      continue;
    }
    auto [it, added] = storage_index.emplace(data.storage().unsafeGetStorageImpl(),
                                             static_cast<int64_t>(storages.size()));
    if (added) storages.push_back(storageBytes(data));
    nodes.push_back(
        c10::ivalue::Tuple::create({std::string("constant"), it->second,
                                    metaTuple(TensorMeta::of(data)), data.storage_offset()}));
  }
  c10::impl::GenericList output_refs = anyList();
  for (const NodeRef& ref : graph.outputs()) {
    output_refs.push_back(c10::ivalue::Tuple::create(
        {static_cast<int64_t>(ref.position), static_cast<int64_t>(ref.index)}));
  }

  // The plan, compiled as every run of the package will compile it (Note [Kernels in a
  // package]); its shared objects go into the package.
  c10::impl::GenericList kernels = anyList();
  {
    config::ScopedDynamicShapes static_kernels(config::DynamicShapes::kStatic);
    std::shared_ptr<const CompiledPlan> plan = compilePlan(graph, /*recurring=*/true);
    if (plan->kernels) {
      for (auto& [bytes, names] : plan->kernels->packagedCode()) {
        at::Tensor blob = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
        std::memcpy(blob.data_ptr(), bytes.data(), bytes.size());
        kernels.push_back(c10::ivalue::Tuple::create({blob, c10::List<std::string>(names)}));
      }
    }
  }

  writePackageFile(path, c10::ivalue::Tuple::create({kFormat, builtHere(), metadata, storages,
                                                     nodes, input_specs, output_refs, kernels}));
}

std::shared_ptr<const AotProgram> AotProgram::load(const std::string& path) {
  bool trusted = false;
  const std::vector<c10::IValue> fields = readPackageFile(path, &trusted);
  const bool kernels_fit = checkBuiltHere(fields[1], path) && trusted;
  try {
    return decodePackage(fields, path, kernels_fit);
  } catch (const std::exception& e) {
    const std::string what = whatOf(e);
    if (what.rfind(path, 0) == 0) throw;  // one of decodePackage's own errors
    LF_CHECK(false, path, " is damaged: ", what);
  }
  return nullptr;
}

std::shared_ptr<const AotProgram> AotProgram::decodePackage(const std::vector<c10::IValue>& fields,
                                                            const std::string& path,
                                                            bool kernels_fit) {
  std::shared_ptr<AotProgram> program(new AotProgram());
  program->path_ = path;
  program->metadata_ = fields[2].toStringRef();
  std::vector<at::Tensor> storages;
  for (const c10::IValue& bytes : fields[3].toListRef()) {
    storages.push_back(bytes.toTensor().to(hardwareDevice()));
  }
  for (const c10::IValue& spec : fields[5].toListRef()) {
    const TensorMeta meta = metaOf(spec);
    program->input_specs_.push_back(at::empty_strided(
        meta.sizes, meta.strides, at::TensorOptions(meta.dtype).device(c10::kMeta)));
  }
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  std::vector<size_t> outputs_of;  // per record: how many outputs it has
  for (const c10::IValue& entry : fields[4].toListRef()) {
    const std::vector<c10::IValue> t = items(entry);
    const std::string& kind = t.at(0).toStringRef();
    Record record;
    if (kind == "input") {
      record.kind = Record::Kind::kInput;
      record.input = t.at(1).toInt();
      LF_CHECK(
          record.input >= 0 && record.input < static_cast<int64_t>(program->input_specs_.size()),
          path, " is damaged: a node reads input ", record.input);
      outputs_of.push_back(1);
    } else if (kind == "constant") {
      record.kind = Record::Kind::kConstant;
      const TensorMeta meta = metaOf(t.at(2));
      const int64_t index = t.at(1).toInt();
      const int64_t offset = t.at(3).toInt();
      LF_CHECK(index >= 0 && index < static_cast<int64_t>(storages.size()), path,
               " is damaged: a weight names storage ", index);
      const at::Tensor& bytes = storages[static_cast<size_t>(index)];
      const size_t extent = at::detail::computeStorageNbytes(meta.sizes, meta.strides,
                                                             c10::elementSize(meta.dtype), offset);
      LF_CHECK(offset >= 0 && extent <= static_cast<size_t>(bytes.numel()), path,
               " is damaged: a weight reaches past its storage");
      at::Tensor data = at::empty({0}, bytes.options().dtype(meta.dtype));
      data.set_(bytes.storage(), offset, meta.sizes, meta.strides);
      program->constants_.push_back(data);
      record.constant = Node::deviceData(std::move(data));
      outputs_of.push_back(1);
    } else {
      LF_CHECK(kind == "aten", path, " is damaged: a node of kind '", kind, "'");
      const std::string& name = t.at(1).toStringRef();
      const size_t sep = name.find('.', name.find("::"));
      const std::string op = name.substr(0, sep);
      const std::string overload = sep == std::string::npos ? "" : name.substr(sep + 1);
      std::optional<c10::OperatorHandle> handle = dispatcher.findSchema({op, overload});
      LF_CHECK(handle.has_value(), path, " runs ", name, ", which is not registered here");
      auto attrs = std::make_shared<AtenCallAttrs>(*handle);
      attrs->name = name;
      const auto& arguments = handle->schema().arguments();
      for (const c10::IValue& a : t.at(2).toListRef()) {
        const std::vector<c10::IValue> f = items(a);
        ArgSlot slot;
        const int64_t arg_kind = f.at(0).toInt();
        LF_CHECK(arg_kind >= 0 && arg_kind <= static_cast<int64_t>(ArgKind::kParam), path,
                 " is damaged: an argument of ", name, " of kind ", arg_kind);
        slot.kind = static_cast<ArgKind>(arg_kind);
        slot.mutated = f.at(1).toBool();
        for (int64_t p : ints(f.at(2))) slot.present.push_back(static_cast<uint8_t>(p != 0));
        LF_CHECK(attrs->args.size() < arguments.size(), path, " calls ", name,
                 " with more arguments than its schema has");
        slot.constant = typedConstant(arguments[attrs->args.size()], f.at(3));
        attrs->args.push_back(std::move(slot));
      }
      for (const c10::IValue& r : t.at(3).toListRef()) {
        const std::vector<c10::IValue> f = items(r);
        const int64_t ret_kind = f.at(0).toInt();
        LF_CHECK(ret_kind >= 0 && ret_kind <= static_cast<int64_t>(ReturnKind::kMutatedArg) &&
                     f.at(1).toInt() >= 0 && f.at(2).toInt() >= 0,
                 path, " is damaged: a result of ", name);
        attrs->returns.push_back({static_cast<ReturnKind>(ret_kind),
                                  static_cast<uint32_t>(f.at(1).toInt()),
                                  static_cast<uint32_t>(f.at(2).toInt())});
      }
      for (const c10::IValue& m : t.at(4).toListRef()) attrs->outputs.push_back(metaOf(m));
      attrs->finalize();
      for (const c10::IValue& ref : t.at(5).toListRef()) {
        const std::vector<c10::IValue> f = items(ref);
        const int64_t position = f.at(0).toInt(), index = f.at(1).toInt();
        LF_CHECK(position >= 0 && position < static_cast<int64_t>(outputs_of.size()) &&
                     index >= 0 && index < static_cast<int64_t>(outputs_of[position]),
                 path, " is damaged: ", name, " reads a value no earlier node makes");
        record.inputs.emplace_back(static_cast<uint32_t>(position), static_cast<uint32_t>(index));
      }
      for (const c10::IValue& param : t.at(6).toListRef()) record.params.push_back(param);
      LF_CHECK(
          record.inputs.size() == attrs->num_inputs && record.params.size() == attrs->num_params,
          path, " is damaged: ", name, " has ", record.inputs.size(), " inputs and ",
          record.params.size(), " parameters for a recipe of ", attrs->num_inputs, " and ",
          attrs->num_params);
      outputs_of.push_back(attrs->outputs.size());
      record.attrs = std::move(attrs);
    }
    program->records_.push_back(std::move(record));
  }
  for (const c10::IValue& ref : fields[6].toListRef()) {
    const std::vector<c10::IValue> f = items(ref);
    const int64_t position = f.at(0).toInt(), index = f.at(1).toInt();
    LF_CHECK(position >= 0 && position < static_cast<int64_t>(outputs_of.size()) && index >= 0 &&
                 index < static_cast<int64_t>(outputs_of[position]),
             path, " is damaged: an output names a value no node makes");
    program->outputs_.emplace_back(static_cast<uint32_t>(position), static_cast<uint32_t>(index));
  }
  if (kernels_fit) {
    std::vector<PackagedCpuModule> modules;
    for (const c10::IValue& entry : fields[7].toListRef()) {
      const std::vector<c10::IValue> f = items(entry);
      const at::Tensor blob = f.at(0).toTensor().contiguous();
      PackagedCpuModule module;
      module.bytes = std::make_shared<const std::string>(static_cast<const char*>(blob.data_ptr()),
                                                         static_cast<size_t>(blob.numel()));
      for (const c10::IValue& name : f.at(1).toListRef())
        module.names.push_back(name.toStringRef());
      modules.push_back(std::move(module));
    }
    addPackagedCpuModules(modules);
  }
  return program;
}

std::vector<at::Tensor> AotProgram::run(const std::vector<at::Tensor>& inputs) const {
  LF_CHECK(inputs.size() == input_specs_.size(), path_, " takes ", input_specs_.size(),
           " input tensors, got ", inputs.size());
  std::vector<at::Tensor> buffers;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const at::Tensor& input = inputs[k];
    const at::Tensor& spec = input_specs_[k];
    LF_CHECK(input.defined() && !isLazy(input), path_, ": input ", k,
             " must be a tensor on the CPU or the hardware device");
    LF_CHECK(input.scalar_type() == spec.scalar_type() && input.sizes() == spec.sizes(), path_,
             " was built for input ", k, " of ", metaText(spec.scalar_type(), spec.sizes()),
             ", got ", metaText(input.scalar_type(), input.sizes()),
             " (a package runs the shapes it was exported with)");
    at::Tensor buffer = input.to(hardwareDevice());
    if (buffer.strides() != spec.strides()) {
      buffer = at::empty_strided(spec.sizes(), spec.strides(), buffer.options()).copy_(buffer);
    }
    buffers.push_back(std::move(buffer));
  }
  std::vector<NodePtr> nodes;
  nodes.reserve(records_.size());
  for (const Record& record : records_) {
    switch (record.kind) {
      case Record::Kind::kInput:
        nodes.push_back(Node::deviceData(buffers.at(static_cast<size_t>(record.input))));
        break;
      case Record::Kind::kConstant: nodes.push_back(record.constant); break;
      case Record::Kind::kAten: {
        std::vector<Value> values;
        for (const auto& [position, index] : record.inputs) {
          values.push_back(Value{nodes.at(position), index});
        }
        nodes.push_back(Node::aten(record.attrs, std::move(values), record.params));
        break;
      }
    }
  }
  std::vector<c10::intrusive_ptr<LazyData>> data;
  for (const auto& [position, index] : outputs_) {
    data.push_back(LazyData::pending(Value{nodes.at(position), index}));
  }
  // Only the outputs may hold nodes: a sync keeps the value of a node something else holds
  // (Note [Values a sync keeps for later]).
  nodes.clear();
  {
    config::ScopedDynamicShapes static_kernels(config::DynamicShapes::kStatic);
    detail::ScopedFuseNewGraphs fused;
    syncData(data);
  }
  // Every output in memory of its own: a plan hands back an input's or a weight's buffer for an
  // output that only renames it (clone, contiguous of a contiguous tensor), and two outputs may
  // be one value.
  std::vector<at::Tensor> results;
  for (const auto& d : data) {
    at::Tensor result = d->buffer();
    bool shared = false;
    for (const at::Tensor& other : buffers) shared = shared || result.is_alias_of(other);
    for (const at::Tensor& other : results) shared = shared || result.is_alias_of(other);
    for (const at::Tensor& other : constants_) shared = shared || result.is_alias_of(other);
    results.push_back(shared ? result.clone() : result);
  }
  return results;
}

namespace {

/// torch.classes.lazyfuse.AotModel: a loaded package, for lazyfuse.aot_load.
struct AotModelClass : torch::CustomClassHolder {
  explicit AotModelClass(const std::string& path) : program(AotProgram::load(path)) {}
  std::shared_ptr<const AotProgram> program;
};

void saveAotPackageOp(const std::string& path, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& outputs, const std::string& metadata) {
  saveAotPackage(path, inputs, outputs, metadata);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(lazyfuse, m) {
  m.def("aot_save(str path, Tensor[] inputs, Tensor[] outputs, str metadata) -> ()",
        &saveAotPackageOp);
  m.def("override_trace_limit(int limit) -> int", &config::overrideTraceLimit);
  m.class_<AotModelClass>("AotModel")
      .def(torch::init<std::string>())
      .def("run", [](const c10::intrusive_ptr<AotModelClass>& self,
                     std::vector<at::Tensor> inputs) { return self->program->run(inputs); })
      .def("metadata",
           [](const c10::intrusive_ptr<AotModelClass>& self) { return self->program->metadata(); });
}

}  // namespace lazyfuse
