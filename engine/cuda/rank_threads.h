// One host thread per GPU of an expert-parallel decoder (issue 18): the
// ranks run at the same time (a rank's all-reduce waits for every other
// rank) and each rank's CUDA calls stay on its own thread (the current
// device is per thread). Rank 0 runs on the calling thread: the engine's
// own, whose CPUs its thread plan chose and whose OpenMP team (pinned by
// kernels/cpu/thread_placement.h) computes the host's experts, as with one
// GPU. Ranks 1.. each get a thread, bound to its GPU's local CPUs when
// given (the NUMA node the GPU hangs off); else it may run on any CPU of
// the process (not on the starting thread's CPUs: once the engine pinned its
// OpenMP team, that is member 0's single PU). Plain C++: tests run it
// without a device.
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
  // `ranks` - 1 threads; cpus[r] (when cpus has an entry for r >= 1 and it
  // is not empty) binds rank r's thread; cpus[0] is not applied (rank 0 is
  // the caller's thread, placed by the engine). Errors: a CPU set this
  // process may not use, named with its rank.
  static Result<std::unique_ptr<RankThreads>> start(int ranks, const std::vector<CpuSet>& cpus);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  using Job = std::function<Status(int rank)>;
  // Runs job(r) for every rank at once (job(0) on the calling thread) and
  // waits for all of them. The first rank to fail calls failed(rank) from
  // its thread at once (so ranks blocked on it can be released), and its
  // error, named with the rank, is returned.
  Status run(const Job& job, const std::function<void(int rank)>& failed = {});
  int ranks() const { return static_cast<int>(threads_.size()) + 1; }

 private:
  RankThreads() = default;
  void loop(int rank, CpuSet cpus);
  void finished(int rank, const Status& s, const std::function<void(int)>* failed, std::unique_lock<std::mutex>& lock);

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
  std::vector<Status> bound_;  // each thread's binding (by rank; rank 0's unused), reported once at start
};

}  // namespace coli::cuda
