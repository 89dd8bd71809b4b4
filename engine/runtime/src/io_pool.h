// A small fixed pool of I/O threads for expert reads. A read blocks in the
// kernel (a page-cache miss or an O_DIRECT transfer), so a few threads keep
// several reads in flight while the compute thread works on experts that are
// already resident. Every submitted job runs exactly once (the destructor
// drains the queue before joining), so a future from submit() always
// becomes ready: waiting on one can never hang.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coli/base/result.h"

namespace coli::runtime {

class IoPool {
 public:
  // 0 threads: submit() runs the job on the caller's thread (synchronous reads).
  explicit IoPool(int threads);
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  std::future<Status> submit(std::function<Status()> job);
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<Status()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// An owned file descriptor (closed on destruction; movable).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  ~UniqueFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// pread of out.size() bytes at `offset`, retrying short reads and EINTR; a
// read that ends at end of file after at least `min_bytes` succeeds (an
// aligned O_DIRECT read may ask past the last meaningful byte). Errors name
// `file`, the offset and the byte count.
Status pread_full(int fd, std::uint64_t offset, std::span<std::byte> out, std::size_t min_bytes,
                  const std::string& file);

}  // namespace coli::runtime
