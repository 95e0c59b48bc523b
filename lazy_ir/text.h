#pragma once

// Small string helpers shared by the folders above lazy_ir/.

#include <string_view>

namespace lazyfuse {

/// Whether `s` begins with `prefix`.
inline bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

/// Whether `s` ends with `suffix`.
inline bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace lazyfuse
