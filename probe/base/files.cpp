#include "coli/base/files.h"

#include "coli/base/pending_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace coli {
namespace fs = std::filesystem;

Status write_file_atomically(const fs::path& path, std::string_view content) {
  auto file = PendingFile::create(path);
  if (!file) return file.error();
  if (Status written = file->write_all(content); !written) return written;
  return file->commit();
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
