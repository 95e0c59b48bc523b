#pragma once

// Golden files of generated text (test/golden): a test compares its output with the file, or
// rewrites the file when LAZYFUSE_UPDATE_GOLDEN=1 (review the diff before committing it).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace lazyfuse::testing {

inline std::string readGoldenFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Compares `text` with the golden file `name`, or writes it when LAZYFUSE_UPDATE_GOLDEN=1.
inline void expectMatchesGolden(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::path(LAZYFUSE_GOLDEN_DIR) / name;
  if (const char* update = std::getenv("LAZYFUSE_UPDATE_GOLDEN");
      update && update == std::string("1")) {
    std::ofstream(path, std::ios::binary) << text;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing; run with LAZYFUSE_UPDATE_GOLDEN=1";
  EXPECT_EQ(readGoldenFile(path), text)
      << "differs from " << path << "; regenerate with LAZYFUSE_UPDATE_GOLDEN=1 if intended";
}

}  // namespace lazyfuse::testing
