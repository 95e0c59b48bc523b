// Splits rendered kernel text into its shape and integer constants (Note [Shape-generic kernels]).
#include "kernels/kernel_constants.h"

#include "lazy_ir/check.h"

#include <cctype>
#include <charconv>
#include <limits>

namespace lazyfuse {
namespace {

constexpr char kConstantMark = '\x01';
constexpr char kNameMark = '\x02';
constexpr char kFloatMark = '\x03';  // a floating literal with an integer value: 256.0, 4.0f

bool identifierStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool identifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool integerSuffix(char c) { return c == 'u' || c == 'U' || c == 'l' || c == 'L'; }

/// The end of the preprocessing number starting at `begin` (C's pp-number: digits, letters,
/// underscores, dots, and a sign after an exponent letter).
size_t numberEnd(const std::string& text, size_t begin) {
  size_t i = begin + 1;
  while (i < text.size()) {
    const char c = text[i];
    const char prev = text[i - 1];
    if (identifierChar(c) || c == '.') {
      ++i;
    } else if ((c == '+' || c == '-') &&
               (prev == 'e' || prev == 'E' || prev == 'p' || prev == 'P')) {
      ++i;
    } else {
      break;
    }
  }
  return i;
}

/// The value of `token` when it is a decimal integer literal that fits an int64 (its suffix in
/// `suffix`), else false.
bool integerLiteral(const std::string& token, int64_t& value, std::string& suffix) {
  size_t digits = 0;
  while (digits < token.size() && digit(token[digits])) ++digits;
  if (digits == 0 || (digits > 1 && token[0] == '0')) return false;  // octal or not a number
  for (size_t i = digits; i < token.size(); ++i) {
    if (!integerSuffix(token[i])) return false;
  }
  uint64_t parsed = 0;
  const auto [end, error] = std::from_chars(token.data(), token.data() + digits, parsed);
  if (error != std::errc() || end != token.data() + digits ||
      parsed > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return false;
  }
  value = static_cast<int64_t>(parsed);
  suffix = token.substr(digits);
  return true;
}

/// The value of `token` when it is a decimal floating literal with an integer value below 2^53,
/// written as digits, ".0" and an optional f or F (`suffix`), else false.
bool integralFloat(const std::string& token, int64_t& value, std::string& suffix) {
  const size_t dot = token.find('.');
  if (dot == std::string::npos || token.compare(dot, 2, ".0") != 0) return false;
  suffix = token.substr(dot + 2);
  if (!suffix.empty() && suffix != "f" && suffix != "F") return false;
  std::string ignored;
  return integerLiteral(token.substr(0, dot), value, ignored) && ignored.empty() &&
         value < (int64_t{1} << 53);
}

/// The end of the comment, string or character literal starting at `i`, or `i` when none does.
size_t skipVerbatim(const std::string& text, size_t i) {
  const char c = text[i];
  const char next = i + 1 < text.size() ? text[i + 1] : '\0';
  if (c == '/' && next == '/') {
    const size_t end = text.find('\n', i);
    return end == std::string::npos ? text.size() : end;
  }
  if (c == '/' && next == '*') {
    const size_t end = text.find("*/", i + 2);
    return end == std::string::npos ? text.size() : end + 2;
  }
  if (c == '"' || c == '\'') {
    size_t j = i + 1;
    while (j < text.size() && text[j] != c) j += text[j] == '\\' ? 2 : 1;
    return std::min(j + 1, text.size());
  }
  return i;
}

}  // namespace

KernelText splitConstants(const std::string& text, const std::string& name,
                          bool constant_brackets) {
  KernelText out;
  out.shape.reserve(text.size());
  bool line_start = true;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    LF_INTERNAL_ASSERT(c != kConstantMark && c != kNameMark && c != kFloatMark,
                       "kernel text holds a marker byte");
    if (c == '\n') {
      line_start = true;
      out.shape += c;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t') {
      out.shape += c;
      ++i;
      continue;
    }
    if (line_start && c == '#') {  // a preprocessor line stays whole
      const size_t end = text.find('\n', i);
      const size_t stop = end == std::string::npos ? text.size() : end;
      out.shape.append(text, i, stop - i);
      i = stop;
      continue;
    }
    line_start = false;
    const size_t verbatim = skipVerbatim(text, i);
    if (verbatim != i) {
      out.shape.append(text, i, verbatim - i);
      i = verbatim;
      continue;
    }
    if (identifierStart(c)) {
      size_t end = i + 1;
      while (end < text.size() && identifierChar(text[end])) ++end;
      const std::string word = text.substr(i, end - i);
      if (word == name) {
        out.shape += kNameMark;
      } else {
        out.shape += word;
      }
      i = end;
      continue;
    }
    if (digit(c) || (c == '.' && i + 1 < text.size() && digit(text[i + 1]))) {
      const size_t end = numberEnd(text, i);
      const std::string token = text.substr(i, end - i);
      int64_t value = 0;
      std::string suffix;
      // A template argument (lf_group_reduce<lf_max, 32>) must be a constant: it stays.
      const bool template_argument =
          (i > 0 && text[i - 1] == '<') || (end < text.size() && text[end] == '>');
      const bool bracketed =
          constant_brackets && i > 0 && end < text.size() &&
          ((text[i - 1] == '[' && text[end] == ']') ||
           (text[i - 1] == '(' && i >= 18 && text.compare(i - 18, 17, "__launch_bounds__") == 0));
      if (template_argument || bracketed) {
        out.shape += token;
      } else if (integerLiteral(token, value, suffix)) {
        out.shape += kConstantMark;
        out.shape += suffix;
        out.constants.push_back(value);
      } else if (integralFloat(token, value, suffix)) {
        out.shape += kFloatMark;
        out.shape += suffix;
        out.constants.push_back(value);
      } else {
        out.shape += token;
      }
      i = end;
      continue;
    }
    out.shape += c;
    ++i;
  }
  return out;
}

std::string joinConstants(const KernelText& kernel, const std::vector<int64_t>& constants,
                          const std::vector<bool>& runtime, const std::string& name,
                          const std::function<std::string(size_t)>& argument) {
  LF_INTERNAL_ASSERT(
      constants.size() == kernel.constants.size() && runtime.size() == kernel.constants.size(),
      "constants do not match the kernel's shape");
  std::string out;
  out.reserve(kernel.shape.size() + 8 * constants.size());
  size_t next = 0;
  const std::string& shape = kernel.shape;
  for (size_t i = 0; i < shape.size(); ++i) {
    const char c = shape[i];
    if (c == kNameMark) {
      out += name;
    } else if (c == kFloatMark) {
      const bool single = i + 1 < shape.size() && (shape[i + 1] == 'f' || shape[i + 1] == 'F');
      if (runtime[next]) {
        out += std::string(single ? "((float)" : "((double)") + argument(next++) + ")";
        if (single) ++i;
      } else {
        out += std::to_string(constants[next++]) + ".0";
      }
    } else if (c != kConstantMark) {
      out += c;
    } else if (runtime[next]) {
      out += argument(next++);
      while (i + 1 < shape.size() && integerSuffix(shape[i + 1])) ++i;  // an argument has none
    } else {
      out += std::to_string(constants[next++]);
    }
  }
  return out;
}

}  // namespace lazyfuse
