// One host thread per GPU of an expert-parallel decoder (issue 18): the
// ranks run at the same time (a rank's all-reduce waits for every other
// rank), each rank's CUDA calls stay on its own thread (the current device
// is per thread), and each thread runs on its GPU's local CPUs when given
// (the NUMA node the GPU hangs off: pinned copies and the host's experts
// stay near it). Plain C++: tests run it without a device.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "coli/base/cpu_set.h"
#include "coli/base/result.h"

namespace coli::cuda {

class RankThreads {
 public:
  // `ranks` threads; cpus[r] (when cpus has an entry for r and it is not
  // empty) binds rank r's thread. Errors: a CPU set this process may not
  // use, named with its rank.
  static Result<std::unique_ptr<RankThreads>> start(int ranks, const std::vector<CpuSet>& cpus);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  using Job = std::function<Status(int rank)>;
  // Runs job(r) on every rank's thread at once and waits for all of them.
  // The first rank to fail calls failed(rank) from its thread at once (so
  // ranks blocked on it can be released), and its error, named with the
  // rank, is returned.
  Status run(const Job& job, const std::function<void(int rank)>& failed = {});
  int ranks() const { return static_cast<int>(threads_.size()); }

 private:
  RankThreads() = default;
  void loop(int rank, CpuSet cpus);

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const Job* job_ = nullptr;
  const std::function<void(int)>* failed_ = nullptr;
  std::uint64_t generation_ = 0;  // one per run()
  int running_ = 0;
  bool stopping_ = false;
  int failed_rank_ = -1;
  Status first_error_ = Ok{};
  std::vector<Status> bound_;  // each thread's binding, reported once at start
};

}  // namespace coli::cuda
