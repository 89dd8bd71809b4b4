// write_files_together: several files land in a directory all or nothing.
// The directory is rebuilt beside itself ("<dir>.tmp.<pid>.<n>": existing
// entries hard linked, new files written and fsynced) and swapped with it by
// renameat2(RENAME_EXCHANGE); the old tree, now under the temporary name, is
// removed afterwards. A kill before the swap leaves the old directory, after
// it the new one; the temporary is swept by the next run (its pid is gone).
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "coli/base/files.h"
#include "coli/base/pending_file.h"

namespace coli {
namespace fs = std::filesystem;
namespace {

std::string strerror_text() { return std::strerror(errno); }

// Serialises writers of one directory: an exclusive flock on its parent.
class ParentLock {
 public:
  explicit ParentLock(const fs::path& parent) : fd_(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~ParentLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

Status write_and_sync(const fs::path& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return make_error("cannot write " + path.string() + ": " + strerror_text());
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const bool ok = done == content.size() && ::fsync(fd) == 0;
  const std::string reason = strerror_text();
  if (::close(fd) != 0 || !ok) return make_error("cannot write " + path.string() + ": " + reason);
  return Ok{};
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Recreates `from` at `to` with every file hard linked (no data copied);
// records each top-level entry's inode in `linked`.
Status link_tree(const fs::path& from, const fs::path& to, const std::set<std::string>& skip,
                 std::map<std::string, ino_t>* linked) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(from, error)) {
    const std::string name = entry.path().filename().string();
    if (skip.count(name)) continue;
    struct stat facts {};
    if (::lstat(entry.path().c_str(), &facts) != 0) continue;  // vanished meanwhile
    const fs::path target = to / name;
    if (S_ISDIR(facts.st_mode)) {
      if (::mkdir(target.c_str(), facts.st_mode & 07777) != 0) return make_error("cannot create " + target.string() + ": " + strerror_text());
      if (Status s = link_tree(entry.path(), target, {}, nullptr); !s) return s;
    } else if (::link(entry.path().c_str(), target.c_str()) != 0) {
      return make_error("cannot link " + entry.path().string() + " into " + to.string() + ": " + strerror_text());
    }
    if (linked) (*linked)[name] = facts.st_ino;
  }
  if (error) return make_error("cannot list " + from.string() + ": " + error.message());
  return Ok{};
}

// Entries another process put into `dir` after link_tree saw it (they are in
// the old tree, now at `old_tree`): moved into the new directory, unless one
// of ours has that name.
void carry_late_arrivals(const fs::path& old_tree, const fs::path& dir, const std::set<std::string>& ours,
                         const std::map<std::string, ino_t>& linked) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(old_tree, error)) {
    const std::string name = entry.path().filename().string();
    struct stat facts {};
    if (ours.count(name) || ::lstat(entry.path().c_str(), &facts) != 0) continue;
    const auto seen = linked.find(name);
    if (seen != linked.end() && seen->second == facts.st_ino) continue;
    ::rename(entry.path().c_str(), (dir / name).c_str());
  }
}

Result<DirectoryUpdate> replace_one_by_one(const fs::path& dir, const std::vector<NamedContent>& files) {
  std::vector<fs::path> created;
  for (const NamedContent& file : files) {
    const fs::path destination = dir / file.name;
    const bool existed = fs::exists(destination);
    if (Status saved = write_file_atomically(destination, file.content); !saved) {
      std::error_code ignored;
      for (const fs::path& path : created) fs::remove(path, ignored);
      return saved.error();
    }
    if (!existed) created.push_back(destination);
  }
  return DirectoryUpdate::one_by_one;
}

}  // namespace

Result<DirectoryUpdate> write_files_together(const fs::path& dir_in, const std::vector<NamedContent>& files) {
  fs::path dir = dir_in.has_filename() ? dir_in : dir_in.parent_path();  // "a/b/" -> "a/b"
  std::error_code error;
  if (fs::is_symlink(fs::symlink_status(dir, error))) {
    dir = fs::canonical(dir, error);  // swap the target, keep the link
    if (error) return make_error("cannot resolve " + dir_in.string() + ": " + error.message());
  }
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  std::set<std::string> ours;
  for (const NamedContent& file : files) {
    if (file.name.empty() || file.name.find('/') != std::string::npos || file.name == "." || file.name == "..") {
      return make_error("cannot write '" + file.name + "' into " + dir.string() + ": not a plain file name");
    }
    ours.insert(file.name);
  }
  fs::create_directories(parent, error);
  if (error) return make_error("cannot create directory " + parent.string() + ": " + error.message());
  const ParentLock lock(parent);
  remove_stale_temporaries(dir);
  const bool exists = fs::exists(dir, error);
  if (exists && !fs::is_directory(dir, error)) return make_error(dir.string() + " exists and is not a directory");

  const TerminationSignalsDeferred deferred;  // Ctrl-C waits for the swap or the rollback below
  const fs::path staging = temporary_name_for(dir);
  auto remove_staging = [&] { fs::remove_all(staging, error); };
  struct stat dir_facts {};
  const mode_t mode = exists && ::stat(dir.c_str(), &dir_facts) == 0 ? (dir_facts.st_mode & 07777) : 0755;
  if (::mkdir(staging.c_str(), mode) != 0) return make_error("cannot create " + staging.string() + ": " + strerror_text());
  std::map<std::string, ino_t> linked;
  Status staged = exists ? link_tree(dir, staging, ours, &linked) : Status(Ok{});
  for (const NamedContent& file : files) {
    if (staged) staged = write_and_sync(staging / file.name, file.content);
  }
  if (!staged) {
    remove_staging();
    return staged.error();
  }
  fsync_path(staging);
  if (!exists) {
    if (::rename(staging.c_str(), dir.c_str()) != 0) {
      const std::string reason = strerror_text();
      remove_staging();
      return make_error("cannot create " + dir.string() + ": " + reason);
    }
    fsync_path(parent);
    return DirectoryUpdate::created;
  }
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    const int reason = errno;
    remove_staging();
    if (reason == EINVAL || reason == ENOSYS || reason == ENOTSUP || reason == EXDEV || reason == EBUSY) {
      return replace_one_by_one(dir, files);  // NFS and the like: no directory swap
    }
    return make_error("cannot swap " + staging.string() + " with " + dir.string() + ": " + std::strerror(reason));
  }
  fsync_path(parent);
  carry_late_arrivals(staging, dir, ours, linked);
  remove_staging();  // the old tree
  return DirectoryUpdate::swapped;
}

}  // namespace coli
