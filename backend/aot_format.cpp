// The file format of ahead-of-time packages (Note [Ahead-of-time packages] in
// backend/aot_package.cpp): the framed, checksummed payload, the build it was made for, and the
// conversions between the IR's metadata and the payload's values.
#include "backend/detail/aot_format.h"

#include "backend/device.h"
#include "kernels/cpu_compiler.h"
#include "kernels/detail/cpu_disk_cache.h"
#include "lazy_ir/check.h"

#include <c10/util/hash.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/headeronly/version.h>

#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#ifndef LAZYFUSE_VERSION
#error "LAZYFUSE_VERSION must be defined by the build"
#endif

namespace lazyfuse::aot {
namespace {

constexpr const char* kMagic = "lazyfuse-package";

std::string machineName() {
  struct utsname names {};
  return uname(&names) == 0 ? std::string(names.machine) : std::string("unknown");
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LF_CHECK(in.good(), "cannot read the lazyfuse package ", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The payload of the package file `bytes`, after its header and checksum were checked.
std::vector<char> checkedPayload(const std::string& bytes, const std::string& path) {
  std::istringstream header(bytes);
  std::string magic, sha, format_line;
  int64_t format = 0, size = -1;
  header >> magic >> format >> sha >> size;
  LF_CHECK(magic == kMagic, path, " is not a lazyfuse package (it does not start with '", kMagic,
           "')");
  LF_CHECK(format == kFormat, path, " is a lazyfuse package of format ", format,
           ", and this lazyfuse (", LAZYFUSE_VERSION, ") reads format ", kFormat,
           ": export it again with this version");
  const std::streamoff start = header.tellg();
  LF_CHECK(start > 0 && size >= 0 && static_cast<size_t>(start) + 1 + size == bytes.size(), path,
           " is damaged: its payload is ",
           start > 0 ? static_cast<int64_t>(bytes.size()) - start - 1 : 0,
           " bytes where its header says ", size);
  std::string payload = bytes.substr(static_cast<size_t>(start) + 1);
  LF_CHECK(c10::sha1(payload).str() == sha, path,
           " is damaged: its payload does not match the checksum in its header");
  return std::vector<char>(payload.begin(), payload.end());
}

}  // namespace

/// The elements of a tuple (a vector: GCC 12 warns about indexing a small tuple's inline array).
std::vector<c10::IValue> items(const c10::IValue& tuple) {
  return tuple.toTupleRef().elements().vec();
}

c10::impl::GenericList anyList() { return c10::impl::GenericList(c10::AnyType::get()); }

c10::List<int64_t> intList(c10::IntArrayRef values) { return c10::List<int64_t>(values.vec()); }

std::string metaText(c10::ScalarType dtype, c10::IntArrayRef sizes) {
  std::ostringstream out;
  out << c10::toString(dtype) << sizes;
  return out.str();
}

/// (dtype, sizes, strides) of a tensor value, as the package holds it.
c10::IValue metaTuple(const TensorMeta& meta) {
  return c10::ivalue::Tuple::create(
      {static_cast<int64_t>(meta.dtype), intList(meta.sizes), intList(meta.strides)});
}

/// A list of ints: typed as C++ writes it, or generic as a package rewritten by Python is.
std::vector<int64_t> ints(const c10::IValue& list) {
  std::vector<int64_t> out;
  for (const c10::IValue& v : list.toListRef()) out.push_back(v.toInt());
  return out;
}

/// `value`, a constant for `arg`, as a list of `arg`'s element type when it is a list: a package
/// rewritten by Python holds generic lists where the op's kernel reads typed ones.
c10::IValue typedConstant(const c10::Argument& arg, c10::IValue value) {
  if (!value.isList()) return value;
  c10::TypePtr type = arg.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  auto list = type->cast<c10::ListType>();
  if (!list) return value;
  const c10::TypeKind kind = list->getElementType()->kind();
  if (kind == c10::TypeKind::IntType || kind == c10::TypeKind::SymIntType) {
    return c10::List<int64_t>(ints(value));
  }
  if (kind == c10::TypeKind::FloatType) {
    c10::List<double> out;
    for (const c10::IValue& v : value.toListRef()) out.push_back(v.toDouble());
    return out;
  }
  if (kind == c10::TypeKind::BoolType) {
    c10::List<bool> out;
    for (const c10::IValue& v : value.toListRef()) out.push_back(v.toBool());
    return out;
  }
  return value;
}

TensorMeta metaOf(const c10::IValue& v) {
  const std::vector<c10::IValue> t = items(v);
  TensorMeta meta;
  const int64_t dtype = t.at(0).toInt();
  TORCH_CHECK(dtype >= 0 && dtype < static_cast<int64_t>(c10::ScalarType::NumOptions) &&
                  c10::elementSize(static_cast<c10::ScalarType>(dtype)) > 0,
              "a dtype numbered ", dtype);
  meta.dtype = static_cast<c10::ScalarType>(dtype);
  meta.sizes = ints(t.at(1));
  meta.strides = ints(t.at(2));
  return meta;
}

std::string whatOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e))
    return error->what_without_backtrace();
  return e.what();
}

/// Raises unless the package's `meta` says this lazyfuse, torch and architecture; true when its
/// kernels were compiled for this CPU.
bool checkBuiltHere(const c10::IValue& dict, const std::string& path) {
  std::map<std::string, std::string> meta;
  for (const auto& entry : dict.toGenericDict()) {
    if (entry.key().isString() && entry.value().isString()) {
      meta[entry.key().toStringRef()] = entry.value().toStringRef();
    }
  }
  auto want = [&](const char* key, const std::string& here, const char* what) {
    const std::string there = meta.count(key) ? meta.at(key) : std::string("?");
    LF_CHECK(there == here, path, " was built for ", what, " ", there, ", and this is ", here,
             ": export it again here");
  };
  want("lazyfuse", LAZYFUSE_VERSION, "lazyfuse");
  want("torch", TORCH_VERSION, "torch");
  want("arch", machineName(), "the architecture");
  return meta.count("cpu") && meta.at("cpu") == cpuKernelAbi();
}

c10::Dict<std::string, std::string> builtHere() {
  c10::Dict<std::string, std::string> meta;
  meta.insert("lazyfuse", LAZYFUSE_VERSION);
  meta.insert("torch", TORCH_VERSION);
  meta.insert("arch", machineName());
  meta.insert("cpu", cpuKernelAbi());
  meta.insert("device", hardwareDevice().str());
  return meta;
}

void writePackageFile(const std::string& path, const c10::IValue& package) {
  std::vector<char> payload;
  try {
    payload = torch::jit::pickle_save(package);
  } catch (const c10::Error& e) {
    LF_CHECK(false, "aot_compile: the graph holds a value a package cannot store: ",
             e.what_without_backtrace());
  }
  const std::string body(payload.begin(), payload.end());
  std::ostringstream header;
  header << kMagic << ' ' << kFormat << ' ' << c10::sha1(body).str() << ' ' << body.size() << '\n';
  // Written beside `path` and renamed into place: a failed write leaves the old file as it was.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string tmp = detail::makeTempFile(dir.empty() ? "/" : dir, "." + leaf + ".");
  LF_CHECK(!tmp.empty(), "aot_compile: cannot write in ", dir, ": ", std::strerror(errno));
  if (!detail::writeFile(tmp, header.str() + body) || rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(tmp.c_str());
    LF_CHECK(false, "aot_compile: writing ", path, " failed: ", std::strerror(error));
  }
}

std::vector<c10::IValue> readPackageFile(const std::string& path, bool* trusted) {
  // A package's kernels are code: they are loaded only from a file this user owns and nobody
  // else may write, as the disk cache's entries (Note [CPU disk cache]); from another file the
  // graph is read and its kernels are compiled here.
  std::string bytes;
  *trusted = detail::readOwnedFile(path, bytes);
  if (!*trusted) bytes = readFile(path);
  const std::vector<char> payload = checkedPayload(bytes, path);
  bytes.clear();
  c10::IValue package;
  try {
    package = torch::jit::pickle_load(payload);
  } catch (const std::exception& e) {
    LF_CHECK(false, path, " is damaged: ", whatOf(e));
  }
  LF_CHECK(package.isTuple() && package.toTupleRef().elements().size() == 8, path,
           " is damaged: its payload is not a package");
  std::vector<c10::IValue> fields = items(package);
  LF_CHECK(fields[0].isInt() && fields[0].toInt() == kFormat && fields[1].isGenericDict(), path,
           " is damaged: its payload is not a package");
  return fields;
}

}  // namespace lazyfuse::aot
