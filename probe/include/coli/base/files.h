// File helpers shared by every tool: atomic writes and a replayable system root.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "coli/base/result.h"

namespace coli {

// Writes `content` to `path` through a temporary in the same directory
// (a PendingFile: nameless where the filesystem allows), fsync, then rename:
// readers see the old file or the new one, never half, and no temporary
// outlives the writer (coli/base/pending_file.h). Creates missing parent
// directories.
Status write_file_atomically(const std::filesystem::path& path, std::string_view content);

// Reads a whole (small) file; an error names the path and the OS reason.
// Errors: a directory, a device or pipe, a file over kMaxTextFileBytes, an
// unreadable file, each named.
inline constexpr std::size_t kMaxTextFileBytes = 512ull << 20;
Result<std::string> read_text_file(const std::filesystem::path& path);

// Where /proc and /sys are read from. "/" on a live machine; a recorded tree
// (tests/fixtures/machines/*/root) when replaying, like hwloc's HWLOC_FSROOT.
class SystemRoot {
 public:
  SystemRoot() = default;  // live: "/"
  explicit SystemRoot(std::filesystem::path prefix) : prefix_(std::move(prefix)) {}

  bool is_live() const { return prefix_.empty() || prefix_ == "/"; }
  const std::filesystem::path& prefix() const { return prefix_; }
  // Maps an absolute system path ("/proc/meminfo") into this root.
  std::filesystem::path map(std::string_view absolute_path) const;
  // Reads a file below the root; nullopt when absent or unreadable.
  std::optional<std::string> read(std::string_view absolute_path) const;
  // Human name for provenance: "live" or "replay:<prefix>".
  std::string describe() const;

 private:
  std::filesystem::path prefix_;
};

}  // namespace coli
