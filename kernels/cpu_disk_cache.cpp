#include "kernels/detail/cpu_disk_cache.h"

#include "lazy_ir/config.h"
#include "lazy_ir/hash.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lazyfuse {
namespace detail {

namespace {

/// The checksum line of an entry: the hash and size of its bytes, and the file name it was
/// stored under (its cache key), so an entry moved to another key's name is never loaded.
std::string checksumText(const std::string& bytes, const std::string& path) {
  char text[64];
  std::snprintf(text, sizeof(text), "fnv1a64 %016" PRIx64 " %zu ", hashString(bytes), bytes.size());
  return text + path.substr(path.rfind('/') + 1) + "\n";
}

bool ownedAndPrivate(const struct stat& st) {
  return st.st_uid == geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

/// The bytes of a regular file we own that nobody else can write; false otherwise.

std::string parentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

bool isPrivateDirectory(const std::string& dir) {
  struct stat st;
  return !dir.empty() && stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ownedAndPrivate(st);
}

bool makeDirectories(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    std::string prefix = dir.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) break;
  }
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string privateTempDirectory() {
  static const std::string dir = [] {
    std::string pattern = config::tempDirectory() + "/lazyfuse-XXXXXX";
    return mkdtemp(pattern.data()) ? pattern : std::string();
  }();
  return dir;
}

std::string makeTempFile(const std::string& dir, const std::string& prefix) {
  std::string path = dir + "/" + prefix + "XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) return "";
  close(fd);
  return path;
}

bool writeFile(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return close(fd) == 0 && done == bytes.size();
}

bool loadVerified(const std::string& so_path) {
  std::string bytes, checksum;
  return readOwnedFile(so_path, bytes) && readOwnedFile(so_path + ".fnv64", checksum) &&
         checksum == checksumText(bytes, so_path);
}

bool storeVerified(const std::string& tmp_so, const std::string& so_path) {
  // The linker may recreate its output with the umask's mode; the loader wants 0700.
  std::string bytes;
  if (chmod(tmp_so.c_str(), 0700) != 0 || !readOwnedFile(tmp_so, bytes)) return false;
  if (rename(tmp_so.c_str(), so_path.c_str()) != 0) return false;
  std::string leaf = so_path.substr(so_path.rfind('/') + 1);
  std::string tmp_sum = makeTempFile(parentOf(so_path), leaf + ".fnv64.");
  if (tmp_sum.empty()) return false;
  std::string sum_path = so_path + ".fnv64";
  if (writeFile(tmp_sum, checksumText(bytes, so_path)) &&
      rename(tmp_sum.c_str(), sum_path.c_str()) == 0) {
    return true;
  }
  unlink(tmp_sum.c_str());
  return false;
}

bool readOwnedFile(const std::string& path, std::string& bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ownedAndPrivate(st);
  bytes.clear();
  char buffer[1 << 16];
  while (ok) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return ok;
}

}  // namespace detail
}  // namespace lazyfuse
