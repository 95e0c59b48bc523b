#pragma once

// Hash helpers shared by the IR and the caches. 64-bit, order-sensitive, deterministic across
// runs (no pointers, no addresses). See Note [What a graph hash covers] in lazy_ir/graph.h.

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string_view>

namespace lazyfuse {

using HashValue = uint64_t;

inline HashValue hashCombine(HashValue seed, HashValue value) {
  // 64-bit variant of boost::hash_combine with a stronger mix.
  value *= 0x9e3779b97f4a7c15ULL;
  value ^= value >> 32;
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

inline HashValue hashString(std::string_view text) {
  HashValue h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : text) {
    h = (h ^ c) * 0x100000001b3ULL;
  }
  return h;
}

inline HashValue hashInts(HashValue seed, c10::ArrayRef<int64_t> values) {
  seed = hashCombine(seed, values.size());
  for (int64_t v : values) seed = hashCombine(seed, static_cast<HashValue>(v));
  return seed;
}

/// Hashes a constant operator argument by value (ints, lists, dtypes, devices, strings, ...).
HashValue hashIValue(HashValue seed, const c10::IValue& value);

}  // namespace lazyfuse
