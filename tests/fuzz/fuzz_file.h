// A harness's input as a real file: the parsers under test open paths (stat,
// size checks, pread), so the fuzzed bytes take the same road a user's file
// does. One private directory per process, removed at exit.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace coli::fuzz {

inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "coli-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    std::atexit([] { std::error_code ignored; std::filesystem::remove_all(scratch_dir(), ignored); });
    return std::filesystem::path(pattern);
  }();
  return dir;
}

// Replaces scratch_dir()/name with exactly `size` bytes of `data`.
inline std::filesystem::path write_scratch_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = scratch_dir() / name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return path;
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace coli::fuzz
