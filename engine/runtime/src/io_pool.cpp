#include "io_pool.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace coli::runtime {

IoPool::IoPool(int threads) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

IoPool::~IoPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

std::future<Status> IoPool::submit(std::function<Status()> job) {
  std::packaged_task<Status()> task(std::move(job));
  std::future<Status> done = task.get_future();
  if (workers_.empty()) {
    task();
    return done;
  }
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return done;
}

void IoPool::work() {
  for (;;) {
    std::packaged_task<Status()> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // Drain before stopping: a queued job left unrun would leave its
      // future waiting forever.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Status pread_full(int fd, std::uint64_t offset, std::span<std::byte> out, std::size_t min_bytes,
                  const std::string& file) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && done >= min_bytes) return Ok{};
    if (n <= 0) {
      return make_error("cannot read " + std::to_string(out.size()) + " bytes at offset " + std::to_string(offset) +
                        " of " + file + (n == 0 ? ": unexpected end of file" : ": " + std::string(std::strerror(errno))) +
                        "; check the file (truncated or damaged?) or convert the model again");
    }
    done += static_cast<std::size_t>(n);
    // A short read means end of file; past min_bytes only padding is missing
    // (and an O_DIRECT retry from an unaligned offset would be refused).
    if (done < out.size() && done >= min_bytes) return Ok{};
  }
  return Ok{};
}

}  // namespace coli::runtime
