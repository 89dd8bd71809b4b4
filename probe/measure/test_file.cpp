#include "measure/test_file.h"

#include <chrono>
#include <cerrno>
#include <cstring>
#include <random>

#include "coli/base/clock.h"

namespace coli::probe {
namespace {

using Clock = std::chrono::steady_clock;

// Non-zero, incompressible data so compressing filesystems store (and read) it all.
void fill_random(std::byte* data, std::size_t bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
    const std::uint64_t value = rng() | 1;
    std::memcpy(data + i, &value, 8);
  }
}

}  // namespace

std::string where(const std::filesystem::path& directory) {
  return " (directory " + directory.string() + "); choose another with --disk-dir";
}

Error os_error(const std::string& what, const std::filesystem::path& directory, int error_number) {
  return make_error(what + ": " + std::strerror(error_number) + where(directory));
}

AlignedBuffer aligned_buffer(std::size_t bytes) {
  void* pointer = nullptr;
  if (posix_memalign(&pointer, kAlignment, bytes) != 0) return nullptr;
  return AlignedBuffer(static_cast<std::byte*>(pointer));
}

Status TempFile::open(const std::filesystem::path& directory, bool try_direct) {
  std::string name = (directory / ".coli-disk-probe-XXXXXX").string();
  writer_ = mkstemp(name.data());
  if (writer_ < 0) return os_error("cannot create a test file", directory, errno);
  path_ = name;
#ifdef O_DIRECT
  if (try_direct) reader_ = ::open(path_.c_str(), O_RDONLY | O_DIRECT);
  direct_ = reader_ >= 0;
#endif
  if (reader_ < 0) reader_ = ::open(path_.c_str(), O_RDONLY);  // tmpfs before Linux 6.6 refuses O_DIRECT
  if (reader_ < 0) return os_error("cannot reopen the test file", directory, errno);
  unlink_now();
  return Ok{};
}

Result<std::uint64_t> write_test_file(TempFile& file, std::uint64_t bytes, double seconds,
                                      const std::filesystem::path& directory) {
  AlignedBuffer chunk = aligned_buffer(kTestFileChunk);
  if (!chunk) return make_error("out of memory for the test file's write buffer");
  fill_random(chunk.get(), kTestFileChunk, 1);
  const auto start = Clock::now();
  std::uint64_t written = 0;
  for (std::uint64_t index = 0; written < bytes; ++index) {
    std::memcpy(chunk.get(), &index, sizeof(index));  // no two chunks alike (deduplication)
    for (std::uint64_t done = 0; done < kTestFileChunk;) {
      const ssize_t n = pwrite(file.writer(), chunk.get() + done, kTestFileChunk - done, static_cast<off_t>(written + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return os_error("writing the test file failed", directory, n < 0 ? errno : ENOSPC);
      done += static_cast<std::uint64_t>(n);
    }
    written += kTestFileChunk;
    const double elapsed = coli::seconds_since(start);
    if (written >= kMinTestFileBytes && elapsed > seconds) break;
  }
  if (fsync(file.writer()) != 0) return os_error("fsync of the test file failed", directory, errno);
#ifdef POSIX_FADV_DONTNEED
  posix_fadvise(file.writer(), 0, 0, POSIX_FADV_DONTNEED);  // clean pages can go: buffered reads start colder
#endif
  file.close_writer();
  return written;
}

}  // namespace coli::probe
