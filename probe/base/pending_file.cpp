#include "coli/base/pending_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include "coli/base/text.h"

namespace coli {
namespace fs = std::filesystem;

// ---- the signal-safe table of temporaries ---------------------------------
namespace {

enum SlotState : int { kFree = 0, kFilling = 1, kReady = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[4096];
};
static_assert(std::atomic<int>::is_always_lock_free);
constexpr int kTerminationSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::array<Slot, 64> g_slots;

// Unlinks every registered temporary, then ends the process with the same
// signal (default action), so the exit status says what happened.
extern "C" void unlink_temporaries_and_die(int signal_number) {
  for (Slot& slot : g_slots) {
    if (slot.state.load() == kReady) ::unlink(slot.path);
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  ::sigaction(signal_number, &default_action, nullptr);
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal_number);
  ::sigprocmask(SIG_UNBLOCK, &just_this, nullptr);
  ::raise(signal_number);
}

// Installs the handler where the disposition is the default one: a program
// that handles (or ignores, e.g. under nohup) a signal keeps doing so.
void install_handlers_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int signal_number : kTerminationSignals) {
      struct sigaction current {};
      if (::sigaction(signal_number, nullptr, &current) != 0) continue;
      if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) continue;
      struct sigaction ours {};
      ours.sa_handler = unlink_temporaries_and_die;
      sigfillset(&ours.sa_mask);
      ::sigaction(signal_number, &ours, nullptr);
    }
  });
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

std::string strerror_text() { return std::strerror(errno); }

fs::path directory_of(const fs::path& path) { return path.has_parent_path() ? path.parent_path() : fs::path("."); }

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // durability is best effort; the rename itself is atomic
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

TemporaryPath::TemporaryPath(const fs::path& path) {
  const std::string& text = path.native();
  if (text.size() >= sizeof(Slot::path)) return;
  install_handlers_once();
  for (std::size_t i = 0; i < g_slots.size(); ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, text.c_str(), text.size() + 1);
    g_slots[i].state.store(kReady);
    slot_ = static_cast<int>(i);
    return;
  }
}

TemporaryPath::~TemporaryPath() {
  if (slot_ >= 0) g_slots[static_cast<std::size_t>(slot_)].state.store(kFree);
}

TerminationSignalsDeferred::TerminationSignalsDeferred() {
  sigset_t termination;
  sigemptyset(&termination);
  for (int signal_number : kTerminationSignals) sigaddset(&termination, signal_number);
  ::pthread_sigmask(SIG_BLOCK, &termination, &saved_mask_);
}

TerminationSignalsDeferred::~TerminationSignalsDeferred() { ::pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr); }

// ---- names of temporaries and the sweep of stale ones ----------------------

fs::path temporary_name_for(const fs::path& destination) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  return destination.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(random() % 1000000000);
}

std::optional<pid_t> temporary_owner(std::string_view entry_name, std::string_view destination_name) {
  for (std::string_view marker : {".tmp.", ".partial."}) {
    if (entry_name.size() <= destination_name.size() + marker.size()) continue;
    if (!entry_name.starts_with(destination_name) || entry_name.substr(destination_name.size(), marker.size()) != marker) {
      continue;
    }
    const std::string_view rest = entry_name.substr(destination_name.size() + marker.size());
    pid_t pid = 0;
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (error != std::errc{} || pid <= 0 || end == rest.data() + rest.size() || *end != '.') continue;
    return pid;
  }
  return std::nullopt;
}

std::size_t remove_stale_temporaries(const fs::path& destination) {
  const std::string name = destination.filename().string();
  if (name.empty()) return 0;
  std::error_code error;
  fs::directory_iterator entries(directory_of(destination), error);
  if (error) return 0;
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : entries) {
    const auto owner = temporary_owner(entry.path().filename().string(), name);
    if (owner && *owner != ::getpid() && !process_alive(*owner)) stale.push_back(entry.path());
  }
  std::size_t removed = 0;
  for (const fs::path& path : stale) removed += fs::remove_all(path, error) > 0 ? 1 : 0;
  return removed;
}

// ---- PendingFile ------------------------------------------------------------

PendingFile::PendingFile(fs::path destination, int fd, fs::path named)
    : destination_(std::move(destination)), fd_(fd), named_(std::move(named)) {}

PendingFile::PendingFile(PendingFile&& other) noexcept { *this = std::move(other); }

PendingFile& PendingFile::operator=(PendingFile&& other) noexcept {
  if (this == &other) return *this;
  discard();
  destination_ = std::move(other.destination_);
  fd_ = std::exchange(other.fd_, -1);
  named_ = std::move(other.named_);
  other.named_.clear();
  if (!named_.empty()) registration_.emplace(named_);  // a slot per live object
  other.registration_.reset();
  return *this;
}

PendingFile::~PendingFile() { discard(); }

void PendingFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!named_.empty()) ::unlink(named_.c_str());
  named_.clear();
  registration_.reset();
}

Result<PendingFile> PendingFile::create(const fs::path& destination) {
  std::error_code error;
  if (destination.has_parent_path()) fs::create_directories(destination.parent_path(), error);
  if (error) return make_error("cannot create directory " + destination.parent_path().string() + ": " + error.message());
  remove_stale_temporaries(destination);
  const char* no_tmpfile = std::getenv("COLI_NO_TMPFILE");
  const bool try_tmpfile = !(no_tmpfile && *no_tmpfile && std::string_view(no_tmpfile) != "0");
  if (try_tmpfile && ::access("/proc/self/fd", X_OK) == 0) {
    const int fd = ::open(directory_of(destination).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) return PendingFile(destination, fd, {});
    // EOPNOTSUPP, EISDIR (kernel without O_TMPFILE), ...: a named temporary instead
  }
  fs::path named = temporary_name_for(destination);
  PendingFile file(destination, -1, named);
  file.registration_.emplace(named);  // before the file exists: no window without cleanup
  file.fd_ = ::open(named.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (file.fd_ < 0) {
    const std::string reason = strerror_text();
    file.named_.clear();
    return make_error("cannot write " + destination.string() + ": " + reason);
  }
  return file;
}

Status PendingFile::write_all(std::string_view content) {
  const char* data = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("cannot write " + destination_.string() + ": " + strerror_text());
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  return Ok{};
}

Status PendingFile::commit() {
  if (fd_ < 0) return make_error("cannot write " + destination_.string() + ": the file was already published or discarded");
  if (::fsync(fd_) != 0) return make_error("cannot flush " + destination_.string() + ": " + strerror_text());
  if (named_.empty()) {  // an O_TMPFILE: give it a name beside the destination, then rename that
    fs::path named = temporary_name_for(destination_);
    registration_.emplace(named);
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, named.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      return make_error("cannot publish " + destination_.string() + ": " + strerror_text());
    }
    named_ = std::move(named);
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return make_error("cannot flush " + destination_.string() + ": " + strerror_text());
  if (::rename(named_.c_str(), destination_.c_str()) != 0) {
    return make_error("cannot rename " + named_.string() + " to " + destination_.string() + ": " + strerror_text());
  }
  named_.clear();
  registration_.reset();
  fsync_directory(directory_of(destination_));
  return Ok{};
}

// ---- free space ---------------------------------------------------------------

Result<std::uint64_t> free_bytes_at(const fs::path& path) {
  fs::path probe = path.empty() ? fs::path(".") : path;
  std::error_code error;
  while (!fs::exists(probe, error) && probe.has_parent_path() && probe.parent_path() != probe) probe = probe.parent_path();
  struct statvfs facts {};
  if (::statvfs(probe.c_str(), &facts) != 0) {
    return make_error("cannot read the free space of " + probe.string() + ": " + strerror_text());
  }
  return static_cast<std::uint64_t>(facts.f_bavail) * facts.f_frsize;
}

Status check_free_space(const fs::path& destination, std::uint64_t needed, std::uint64_t available) {
  if (needed <= available) return Ok{};
  return make_error("not enough free space for " + destination.string() + ": it needs " + format_bytes(needed) + " (" +
                    std::to_string(needed) + " bytes) and its filesystem has " + format_bytes(available) + " (" +
                    std::to_string(available) + " bytes) available; free " + format_bytes(needed - available) +
                    " there, or write it elsewhere (--out on a larger filesystem)");
}

}  // namespace coli
