#pragma once

// The file format of ahead-of-time packages (Note [Ahead-of-time packages] in
// backend/aot_package.cpp). Defined in backend/aot_format.cpp, used by backend/aot_package.cpp.

#include "lazy_ir/node.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>

#include <exception>
#include <string>
#include <vector>

namespace lazyfuse::aot {

/// The payload's layout: (format, builtHere(), metadata, storages, nodes, input specs, outputs,
/// kernels).
constexpr int64_t kFormat = 1;

/// The elements of a tuple (a vector: GCC 12 warns about indexing a small tuple's inline array).
std::vector<c10::IValue> items(const c10::IValue& tuple);
c10::impl::GenericList anyList();
c10::List<int64_t> intList(c10::IntArrayRef values);
/// A list of ints: typed as C++ writes it, or generic as a package rewritten by Python is.
std::vector<int64_t> ints(const c10::IValue& list);
/// "Float[8, 16]".
std::string metaText(c10::ScalarType dtype, c10::IntArrayRef sizes);
/// (dtype, sizes, strides) of a tensor value, as the package holds it, and back (raising for a
/// dtype that does not exist).
c10::IValue metaTuple(const TensorMeta& meta);
TensorMeta metaOf(const c10::IValue& v);
/// `value`, a constant for `arg`, as a list of `arg`'s element type when it is a list.
c10::IValue typedConstant(const c10::Argument& arg, c10::IValue value);
/// An exception's message, without a c10::Error's backtrace.
std::string whatOf(const std::exception& e);

/// What a package records of the build that wrote it: lazyfuse and torch versions, architecture,
/// CPU kernel ABI, hardware device.
c10::Dict<std::string, std::string> builtHere();
/// Raises unless a package's builtHere() record names this lazyfuse, torch and architecture;
/// true when its kernels were compiled for this CPU.
bool checkBuiltHere(const c10::IValue& dict, const std::string& path);

/// Writes `package` framed (format, SHA-1 and size of the payload) to `path`, atomically.
void writePackageFile(const std::string& path, const c10::IValue& package);
/// The fields of the package at `path`, its frame and checksum checked; `trusted`: the file is
/// this user's and nobody else may write it.
std::vector<c10::IValue> readPackageFile(const std::string& path, bool* trusted);

}  // namespace lazyfuse::aot
