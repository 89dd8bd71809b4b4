// The probe's disk test file and its buffers: a temporary file written with
// incompressible data and read back (O_DIRECT where the filesystem allows)
// by the disk bandwidth phase (disk_bandwidth.h) and the reads beside compute
// (read_interference.h).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "coli/base/result.h"

namespace coli::probe {

inline constexpr std::size_t kAlignment = 4096;  // O_DIRECT wants buffers and offsets aligned to the block size
inline constexpr std::uint64_t kTestFileChunk = 16ull << 20;  // written whole; the largest block read
inline constexpr std::uint64_t kMinTestFileBytes = 2 * kTestFileChunk;

// " (directory D); choose another with --disk-dir"
std::string where(const std::filesystem::path& directory);
// "what: strerror" and where; the caller names its phase ("disk bandwidth: ...").
Error os_error(const std::string& what, const std::filesystem::path& directory, int error_number);

struct FreeDeleter {
  void operator()(void* pointer) const { std::free(pointer); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;
AlignedBuffer aligned_buffer(std::size_t bytes);  // kAlignment-aligned; null when out of memory

// A temporary file that never outlives the measurement: it is unlinked as
// soon as the reader is open (so even a killed process leaves nothing), and
// the destructor covers the error paths before that.
class TempFile {
 public:
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    unlink_now();
    if (writer_ >= 0) close(writer_);
    if (reader_ >= 0) close(reader_);
  }

  Status open(const std::filesystem::path& directory, bool try_direct);
  // Some filesystems accept O_DIRECT at open and refuse it at read time.
  void drop_direct() {
#ifdef O_DIRECT
    fcntl(reader_, F_SETFL, fcntl(reader_, F_GETFL) & ~O_DIRECT);
#endif
    direct_ = false;
  }
  void close_writer() { close(writer_), writer_ = -1; }

  int writer() const { return writer_; }
  int reader() const { return reader_; }
  bool direct() const { return direct_; }

 private:
  void unlink_now() {
    if (!path_.empty()) ::unlink(path_.c_str());
    path_.clear();
  }
  std::string path_;
  int writer_ = -1, reader_ = -1;
  bool direct_ = false;
};

// Writes up to `bytes` (whole kTestFileChunk chunks, at least
// kMinTestFileBytes), stopping early once `seconds` have passed; fsyncs,
// drops the clean pages and closes the writer; returns the bytes written.
// Errors name no phase: the caller prefixes its own.
Result<std::uint64_t> write_test_file(TempFile& file, std::uint64_t bytes, double seconds,
                                      const std::filesystem::path& directory);

}  // namespace coli::probe
