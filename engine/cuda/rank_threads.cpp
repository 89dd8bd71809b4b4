#include "cuda/rank_threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace coli::cuda {
namespace {

// No CPUs given: anywhere the process may run (the kernel keeps the mask
// within its cpuset), not the starting thread's mask, which is OpenMP
// member 0's single PU once the engine pinned its team.
Status bind_this_thread(const CpuSet& cpus) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (cpus.empty()) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &mask);
    return pthread_setaffinity_np(pthread_self(), sizeof mask, &mask) == 0
               ? Status(Ok{})
               : Status(make_error("its thread cannot be left to run on any CPU of this process"));
  }
  for (int cpu : cpus.cpus()) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return make_error("its GPU's local CPUs (" + cpus.to_list() + ") name CPU " +
                        std::to_string(cpu) + ", which no thread can be bound to: re-probe this machine");
    }
    CPU_SET(cpu, &mask);
  }
  const int code = pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
  if (code != 0) {
    return make_error("its thread cannot run on its GPU's local CPUs " +
                      cpus.to_list() + " (" + std::strerror(code) +
                      "; outside this process's allowed CPUs?): re-probe here, or give no CPUs to leave it unbound");
  }
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<RankThreads>> RankThreads::start(int ranks, const std::vector<CpuSet>& cpus) {
  std::unique_ptr<RankThreads> t(new RankThreads());
  t->bound_.assign(static_cast<std::size_t>(std::max(ranks, 1)), Status(Ok{}));
  for (int r = 1; r < ranks; ++r) {
    const CpuSet set = static_cast<std::size_t>(r) < cpus.size() ? cpus[static_cast<std::size_t>(r)] : CpuSet{};
    t->threads_.emplace_back([raw = t.get(), r, set] { raw->loop(r, set); });
  }
  // Each thread reports its binding through a first, empty run.
  const Status bound = t->run([&t](int rank) { return t->bound_[static_cast<std::size_t>(rank)]; });
  if (!bound) return bound.error();
  return t;
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Status RankThreads::run(const Job& job, const std::function<void(int)>& failed) {
  std::unique_lock lock(mutex_);
  job_ = &job;
  failed_ = failed ? &failed : nullptr;
  running_ = ranks();
  failed_rank_ = -1;
  first_error_ = Ok{};
  ++generation_;
  wake_.notify_all();
  lock.unlock();
  const Status own = job(0);
  lock.lock();
  finished(0, own, failed_, lock);
  done_.wait(lock, [this] { return running_ == 0; });
  job_ = nullptr;
  failed_ = nullptr;
  return first_error_;
}

// Under the lock: the first failure is kept and reported (the callback
// outside the lock: it may wait on the other ranks' CUDA work).
void RankThreads::finished(int rank, const Status& s, const std::function<void(int)>* failed,
                           std::unique_lock<std::mutex>& lock) {
  if (!s && failed_rank_ < 0) {
    failed_rank_ = rank;
    first_error_ = make_error("GPU rank " + std::to_string(rank) + ": " + s.error().message);
    if (failed) {
      lock.unlock();
      (*failed)(rank);
      lock.lock();
    }
  }
  if (--running_ == 0) done_.notify_all();
}

void RankThreads::loop(int rank, CpuSet cpus) {
  bound_[static_cast<std::size_t>(rank)] = bind_this_thread(cpus);
  std::uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    const Job& job = *job_;
    const std::function<void(int)>* failed = failed_;
    lock.unlock();
    const Status s = job(rank);
    lock.lock();
    finished(rank, s, failed, lock);
  }
}

}  // namespace coli::cuda
