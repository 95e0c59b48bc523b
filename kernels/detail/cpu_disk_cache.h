#pragma once

// Files of the CPU kernel disk cache: private folders, atomic writes and checksummed entries.
// Defined in kernels/cpu_disk_cache.cpp, used by kernels/cpu_compiler.cpp.
//
// Note [CPU disk cache]
// An entry is `<key>.so` and `<key>.so.fnv64`, the FNV-1a 64-bit hash and size of the shared
// object's bytes and the entry's own file name: a checksum file proves its shared object was
// stored under this key, so two entries swapped (each with its checksum) or copied to another
// key's name are rebuilt, never loaded as the kernels of the key they are found under. Both are
// written under a unique temporary name in the same folder and renamed
// into place, the checksum after the shared object, so a reader sees whole files only, and a
// shared object without its matching checksum (a crash, a concurrent writer) is rebuilt, never
// loaded. A file is trusted only when the user owns it and nobody else may write it. The folder
// itself must be ours and not writable by group or others; when it is not, the process compiles
// in a private temporary folder instead (mkdtemp), so another user can never plant code we run.
// FNV is a checksum against torn or damaged files, not a defence: the ownership checks are.

#include <string>

namespace lazyfuse::detail {

/// An existing folder owned by this user that nobody else may write.
bool isPrivateDirectory(const std::string& dir);
/// mkdir -p with mode 0700 for every folder it creates.
bool makeDirectories(const std::string& dir);
/// A folder made by mkdtemp (0700) once per process; "" when even that fails.
std::string privateTempDirectory();
/// True when `so_path` and its checksum are trusted files and agree.
bool loadVerified(const std::string& so_path);
/// Moves the freshly built `tmp_so` to `so_path` and writes its checksum, both atomically.
bool storeVerified(const std::string& tmp_so, const std::string& so_path);
/// A new empty file `<dir>/<prefix>XXXXXX` (mode 0600); "" on failure.
std::string makeTempFile(const std::string& dir, const std::string& prefix);
bool writeFile(const std::string& path, const std::string& bytes);
/// Reads `path` into `bytes` when it is a regular file this user owns and nobody else may write.
bool readOwnedFile(const std::string& path, std::string& bytes);

}  // namespace lazyfuse::detail
