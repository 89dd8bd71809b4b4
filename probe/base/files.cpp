#include "coli/base/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace coli {
namespace fs = std::filesystem;

Status write_file_atomically(const fs::path& path, std::string_view content) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) return make_error("cannot create directory " + path.parent_path().string() + ": " + ec.message());

  const std::string temp = path.string() + ".tmp." + std::to_string(::getpid()) + "." +
                           std::to_string(std::random_device{}());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return make_error("cannot write " + path.string() + ": " + std::strerror(errno));
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(temp.c_str());
      return make_error("cannot write " + path.string() + ": " + reason);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    return make_error("cannot flush " + path.string() + ": " + reason);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    return make_error("cannot rename " + temp + " to " + path.string() + ": " + reason);
  }
  return Ok{};
}

Result<std::string> read_text_file(const fs::path& path) {
  // A directory, a device or an endless pipe given where a file belongs is
  // named as such, and no text file of coli's grows past kMaxTextFileBytes.
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!error && fs::is_directory(status)) return make_error(path.string() + " is a directory, not a file");
  if (!error && fs::exists(status) && !fs::is_regular_file(status)) {
    return make_error(path.string() + " is not a regular file (a device or a pipe?): give the file itself");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open " + path.string() + ": " + std::strerror(errno));
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxTextFileBytes) {
      return make_error(path.string() + " is larger than " + std::to_string(kMaxTextFileBytes >> 20) +
                        " MiB, which no coli text file is: is it the right file?");
    }
  }
  if (in.bad()) return make_error("cannot read " + path.string());
  return text;
}

fs::path SystemRoot::map(std::string_view absolute_path) const {
  if (is_live()) return fs::path(absolute_path);
  std::string_view relative = absolute_path;
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  return prefix_ / relative;
}

std::optional<std::string> SystemRoot::read(std::string_view absolute_path) const {
  std::ifstream in(map(absolute_path), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return buffer.str();
}

std::string SystemRoot::describe() const { return is_live() ? "live" : "replay:" + prefix_.string(); }

}  // namespace coli
