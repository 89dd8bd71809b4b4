// Crash-safe writing (docs/crash-safety.md): a file is written out of sight
// and published whole at its destination, and no writer's temporaries
// outlive it, whether it ends normally, by SIGINT/SIGTERM/SIGHUP, or by
// SIGKILL (the next writer of the same destination removes what was left).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"

namespace coli {

// A temporary for `destination`: "<destination>.tmp.<pid>.<random>" beside it,
// so that the writer's pid tells a later run whether it is still writing.
std::filesystem::path temporary_name_for(const std::filesystem::path& destination);

// The writer's pid when `entry_name` is a temporary of `destination_name`
// ("<name>.tmp.<pid>.<anything>", or the container writer's older
// "<name>.partial.<pid>.<anything>"); nullopt otherwise.
std::optional<pid_t> temporary_owner(std::string_view entry_name, std::string_view destination_name);

// Removes the temporaries (files or staging directories) of `destination`
// whose writer no longer runs: what a SIGKILL left. Returns how many.
std::size_t remove_stale_temporaries(const std::filesystem::path& destination);

// While a TemporaryPath lives, SIGINT, SIGTERM and SIGHUP unlink its path
// before the process ends with that signal (the handler is installed only
// where the signal's disposition is the default one). Signal-safe: a fixed
// table of slots, no allocation in the handler.
class TemporaryPath {
 public:
  explicit TemporaryPath(const std::filesystem::path& path);
  ~TemporaryPath();
  TemporaryPath(const TemporaryPath&) = delete;
  TemporaryPath& operator=(const TemporaryPath&) = delete;

 private:
  int slot_ = -1;  // -1: the table was full; the stale-temporary sweep still covers it
};

// Holds SIGINT, SIGTERM and SIGHUP pending in this thread while it lives, so
// that a short critical section finishes or rolls back before the signal ends
// the process (it is delivered when the section ends).
class TerminationSignalsDeferred {
 public:
  TerminationSignalsDeferred();
  ~TerminationSignalsDeferred();
  TerminationSignalsDeferred(const TerminationSignalsDeferred&) = delete;
  TerminationSignalsDeferred& operator=(const TerminationSignalsDeferred&) = delete;

 private:
  sigset_t saved_mask_{};
};

// A file being written that appears at its destination only on commit().
// Where the filesystem allows, it is an O_TMPFILE (nameless: a killed writer
// leaves nothing); otherwise a named temporary (TemporaryPath-registered).
// Destroyed without commit(), it leaves nothing and the destination as it was.
// COLI_NO_TMPFILE=1 forces the named temporary (tests of that path).
class PendingFile {
 public:
  // Creates missing parent directories and sweeps stale temporaries first.
  static Result<PendingFile> create(const std::filesystem::path& destination);
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&& other) noexcept;
  ~PendingFile();

  int fd() const { return fd_; }
  const std::filesystem::path& destination() const { return destination_; }
  Status write_all(std::string_view content);
  // fsync, then publish: rename over the destination (readers see the old
  // file or the new one, never a part), then fsync the directory.
  Status commit();

 private:
  PendingFile(std::filesystem::path destination, int fd, std::filesystem::path named);
  void discard();

  std::filesystem::path destination_;
  int fd_ = -1;
  std::filesystem::path named_;  // empty for an O_TMPFILE until commit links it
  std::optional<TemporaryPath> registration_;
};

// One file of a set written together.
struct NamedContent {
  std::string name;  // a plain file name inside the directory
  std::string content;
};

enum class DirectoryUpdate {
  swapped,     // the directory was rebuilt beside itself and swapped in (RENAME_EXCHANGE)
  created,     // the directory did not exist; it appeared complete (rename)
  one_by_one,  // the filesystem cannot swap directories: each file was replaced atomically, in turn
};

// Writes every file of `files` into `dir` (replacing those of the same name,
// keeping every other entry), all or nothing: a copy of `dir` (entries hard
// linked) receives the new files beside it and is swapped with `dir` in one
// rename, so a reader or a kill at any point sees the old directory or the
// new one. Concurrent callers on the same directory are serialised (flock).
Result<DirectoryUpdate> write_files_together(const std::filesystem::path& dir, const std::vector<NamedContent>& files);

// Bytes the filesystem holding `path` (or its nearest existing parent) lets
// this user write: statvfs f_bavail * f_frsize.
Result<std::uint64_t> free_bytes_at(const std::filesystem::path& path);

// Ok when `needed` bytes fit in `available`; otherwise an error naming the
// file, both figures and what to do.
Status check_free_space(const std::filesystem::path& destination, std::uint64_t needed, std::uint64_t available);

}  // namespace coli
