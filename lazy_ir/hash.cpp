#include "lazy_ir/hash.h"

#include <cstring>
#include <sstream>

namespace lazyfuse {
namespace {

HashValue hashDouble(double value) {
  HashValue bits = 0;
  static_assert(sizeof(bits) == sizeof(value));
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

}  // namespace

HashValue hashIValue(HashValue seed, const c10::IValue& value) {
  seed = hashCombine(seed, static_cast<HashValue>(value.tagKind().size()));
  seed = hashCombine(seed, hashString(value.tagKind()));
  if (value.isNone()) return seed;
  if (value.isTensor()) return hashCombine(seed, value.toTensor().defined());
  if (value.isBool()) return hashCombine(seed, value.toBool());
  if (value.isInt()) return hashCombine(seed, static_cast<HashValue>(value.toInt()));
  if (value.isDouble()) return hashCombine(seed, hashDouble(value.toDouble()));
  if (value.isComplexDouble()) {
    auto c = value.toComplexDouble();
    return hashCombine(hashCombine(seed, hashDouble(c.real())), hashDouble(c.imag()));
  }
  if (value.isString()) return hashCombine(seed, hashString(value.toStringRef()));
  if (value.isDevice()) {
    auto d = value.toDevice();
    return hashCombine(hashCombine(seed, static_cast<HashValue>(d.type())), d.index());
  }
  if (value.isIntList()) return hashInts(seed, value.toIntList().vec());
  if (value.isList()) {
    auto list = value.toListRef();
    seed = hashCombine(seed, list.size());
    for (const auto& element : list) seed = hashIValue(seed, element);
    return seed;
  }
  std::ostringstream text;
  text << value;
  return hashCombine(seed, hashString(text.str()));
}

}  // namespace lazyfuse
