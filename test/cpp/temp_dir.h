#pragma once

// A private temporary folder for a test: made by mkdtemp, removed with everything in it when
// the TempDir goes.

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <stdlib.h>

namespace lazyfuse::testing {

class TempDir {
 public:
  /// Makes `<temp>/<prefix>-XXXXXX`; made() says whether it could.
  explicit TempDir(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool made() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  /// Points LAZYFUSE_CACHE_DIR at the folder (or at `sub`, a folder inside it).
  void useAsCacheDir(const std::string& sub = "") const {
    const std::string dir = sub.empty() ? path_ : path_ + "/" + sub;
    setenv("LAZYFUSE_CACHE_DIR", dir.c_str(), /*overwrite=*/1);
  }

 private:
  std::string path_;
};

}  // namespace lazyfuse::testing
