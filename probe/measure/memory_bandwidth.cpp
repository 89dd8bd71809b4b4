#include "measure/memory_bandwidth.h"

#include <sys/mman.h>
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <algorithm>
#include <barrier>
#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "coli/base/clock.h"
#include "coli/base/files.h"
#include "coli/base/text.h"
#include "cpu/core_map.h"
#include "measure/stats.h"

namespace coli::probe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kMinBufferBytes = 64 * kMiB;
// streaming_buffer_bytes per array (16 last-level caches), as the tuning
// pool: a buffer the cache partly keeps between passes reads too fast. On the 2-core
// VM (32 MiB L3) one thread read 128 MiB at 30.8 GB/s, 512 MiB at 27.1 and
// 2 GiB at 26.3 (interleaved, medians of 12). At most 2 GiB per array (6 GiB
// for triad): larger would not fit the time budget's first touch.
constexpr std::uint64_t kMaxDerivedBufferBytes = 2048 * kMiB;
constexpr std::uint64_t kSmallestUsefulBuffer = 1 * kMiB;
// Kernels walk blocks of this many doubles: a constant inner trip count lets
// GCC -O2 (very-cheap vectoriser cost model) vectorise without epilogues.
constexpr std::size_t kLanes = 8;
constexpr double kMinSecondsPerPoint = 0.75;  // below this a point is mostly setup
constexpr double kSetupShareOfBudget = 0.4;   // first touch is slow in some VMs (host faults pages in)
constexpr std::uint64_t kTouchChunkBytes = 8 * kMiB;
constexpr double kTriadScalar = 3.0;

// ------------------------------------------------------------- kernels

// Wide loads keep more bytes in flight per instruction: one clone per vector
// width, picked at run time for this CPU (binaries stay portable).
#define COLI_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// Eight independent sums keep the adds out of one dependency chain; GCC packs
// them into vector registers (plain -O2, no -ffast-math needed).
COLI_VECTOR_CLONES double sum_kernel(const double* __restrict data, std::size_t count) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  for (std::size_t i = 0; i < count; i += kLanes) {
    s0 += data[i], s1 += data[i + 1], s2 += data[i + 2], s3 += data[i + 3];
    s4 += data[i + 4], s5 += data[i + 5], s6 += data[i + 6], s7 += data[i + 7];
  }
  return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

COLI_VECTOR_CLONES void triad_kernel(double* __restrict a, const double* __restrict b, const double* __restrict c, double scalar,
                  std::size_t count) {
  for (std::size_t i = 0; i < count; i += kLanes)
#pragma GCC unroll 8
    for (std::size_t j = 0; j < kLanes; ++j) a[i + j] = b[i + j] + scalar * c[i + j];
}

// ------------------------------------------------------------- placement

struct KindCores { int rank = 0; std::vector<int> pus; };  // pus: one per physical core

std::vector<KindCores> usable_kinds(const CpuFacts& cpu) {
  std::vector<CpuKind> kinds = cpu.kinds;
  if (kinds.empty()) kinds.push_back(CpuKind{.pus = cpu.usable.pus, .cores = cpu.cores});
  std::vector<KindCores> result;
  for (const CpuKind& kind : kinds) {
    auto pus = first_usable_pu_per_core(kind, cpu.usable.pus);
    if (!pus.empty()) result.push_back({kind.rank, std::move(pus)});
  }
  return result;
}

struct PointPlan { int kind_rank = -1; std::vector<int> pus; };

// 1, 2, 4, ... and always `pus.size()`: 1 and the maximum go to `ends`,
// the powers of two between to `middle`.
void thread_counts(int kind_rank, const std::vector<int>& pus, std::vector<PointPlan>& ends,
                   std::vector<PointPlan>& middle) {
  const int max_threads = static_cast<int>(pus.size());
  for (int n = 1;; n *= 2) {
    const int threads = std::min(n, max_threads);
    (threads == 1 || threads == max_threads ? ends : middle).push_back({kind_rank, {pus.begin(), pus.begin() + threads}});
    if (threads == max_threads) return;
  }
}

std::vector<PointPlan> plan_points(const std::vector<KindCores>& kinds, double budget_seconds) {
  std::vector<int> spread;  // fastest kind first: that is where the engine starts
  for (auto kind = kinds.rbegin(); kind != kinds.rend(); ++kind) spread.insert(spread.end(), kind->pus.begin(), kind->pus.end());
  if (spread.empty()) return {};
  std::vector<PointPlan> plans, spread_middle, kind_middle;
  thread_counts(-1, spread, plans, spread_middle);
  if (kinds.size() > 1)
    for (const auto& kind : kinds) thread_counts(kind.rank, kind.pus, plans, kind_middle);
  // Ends first, then the points between while the budget allows.
  const auto cap = static_cast<std::size_t>(std::max(1.0, budget_seconds / kMinSecondsPerPoint));
  for (auto* extra : {&spread_middle, &kind_middle})
    for (auto& plan : *extra) plans.push_back(std::move(plan));
  if (plans.size() > cap) plans.resize(cap);
  std::sort(plans.begin(), plans.end(), [](const PointPlan& x, const PointPlan& y) {
    return std::pair(x.kind_rank, x.pus.size()) < std::pair(y.kind_rank, y.pus.size());
  });
  return plans;
}

}  // namespace

// ------------------------------------------------------------- buffers

Result<std::uint64_t> memory_buffer_bytes(const CpuFacts& cpu, const MemoryFacts& memory, const MemoryBandwidthOptions& options) {
  std::uint64_t bytes = std::clamp(streaming_buffer_bytes(cpu.caches), kMinBufferBytes, kMaxDerivedBufferBytes);
  if (options.max_buffer_bytes > 0) bytes = std::min(bytes, options.max_buffer_bytes);
  if (memory.headroom_bytes == 0)
    return make_error("memory bandwidth: memory headroom is unknown, so buffer sizes cannot be chosen safely");
  bytes = std::min(bytes, memory.headroom_bytes / 8 / 3);  // three arrays within 1/8 of headroom
  bytes -= bytes % (64 * 1024);
  if (bytes < kSmallestUsefulBuffer)
    return make_error("memory bandwidth: only " + format_bytes(memory.headroom_bytes) + " of memory headroom (" +
                      memory.headroom_source + "); too little to measure with buffers of at least " +
                      format_bytes(kSmallestUsefulBuffer));
  return bytes;
}

namespace {

// a, b and c in one anonymous mapping, unmapped on destruction.
struct TriadArrays {
  explicit TriadArrays(std::uint64_t bytes_each) : mapped_bytes(3 * bytes_each) {
    void* address = mmap(nullptr, mapped_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (address == MAP_FAILED) return;
#ifdef MADV_HUGEPAGE
    madvise(address, mapped_bytes, MADV_HUGEPAGE);  // fewer faults and TLB misses; the kernel may decline
#endif
    a = static_cast<double*>(address), b = a + bytes_each / sizeof(double), c = b + bytes_each / sizeof(double);
  }
  ~TriadArrays() { if (a) munmap(a, mapped_bytes); }
  TriadArrays(const TriadArrays&) = delete;
  std::uint64_t bytes_each() const { return mapped_bytes / 3; }

  std::uint64_t mapped_bytes;
  double *a = nullptr, *b = nullptr, *c = nullptr;
  std::size_t elements = 0;  // in use, from the start of each array
};

// First touch costs more than streaming: page faults, and in some VMs the
// host faults the page in too (0.4 GB/s on the dev VM against 5 GB/s for pages
// it already backs; no probe predicts which). So touch a, b, c chunk by chunk
// until done or `seconds` have passed (never below kMinBufferBytes) and use
// what was touched; returns the bytes per array.
std::uint64_t touch_within(TriadArrays& arrays, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  const std::uint64_t bytes = arrays.bytes_each();
  std::uint64_t touched = 0;
  while (touched < bytes && (touched < kMinBufferBytes || Clock::now() < deadline)) {
    const std::size_t first = touched / sizeof(double), count = std::min(kTouchChunkBytes, bytes - touched) / sizeof(double);
    std::fill_n(arrays.a + first, count, 0.0);
    std::fill_n(arrays.b + first, count, 1.0);
    std::fill_n(arrays.c + first, count, 2.0);
    touched += count * sizeof(double);
  }
  arrays.elements = touched / sizeof(double);
  return touched;
}

// A fresh page's first touch: one byte per 4 KiB page of a new 16 MiB
// mapping, without madvise (the machine's huge page setting applies as it does
// to malloc's memory), microseconds per page; the median of a few mappings.
// 0 when none could be mapped.
double measure_fresh_page_us() {
  constexpr std::uint64_t kBytes = 16 * kMiB, kPage = 4096;
  constexpr int kMappings = 5;
  std::vector<double> per_page;
  for (int i = 0; i < kMappings; ++i) {
    void* address = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (address == MAP_FAILED) break;
    volatile char* bytes = static_cast<char*>(address);
    const auto start = Clock::now();
    for (std::uint64_t at = 0; at < kBytes; at += kPage) bytes[at] = 1;
    per_page.push_back(seconds_since(start) * 1e6 / static_cast<double>(kBytes / kPage));
    munmap(address, kBytes);
  }
  return per_page.empty() ? 0 : summarize(std::move(per_page)).median;
}

// ------------------------------------------------------------- threads

bool pin_current_thread(int pu) {
#if defined(__linux__)
  if (pu < 0 || pu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(pu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
#else
  (void)pu;
  return false;  // no hard affinity API (macOS): threads run where the OS puts them
#endif
}

enum class Kernel { read, triad, stop };

// Threads pinned one per PU, each owning a slice of the arrays (which it
// first-touches itself when asked, so pages sit on its NUMA node), started
// once and released together by a barrier for every run.
class PinnedTeam {
 public:
  PinnedTeam(std::vector<int> pus, const TriadArrays& arrays, bool first_touch)
      : pus_(std::move(pus)), a_(arrays.a), b_(arrays.b), c_(arrays.c),
        elements_(arrays.elements), first_touch_(first_touch), results_(pus_.size()),
        start_(static_cast<std::ptrdiff_t>(pus_.size()) + 1), done_(static_cast<std::ptrdiff_t>(pus_.size()) + 1) {
    try {
      for (std::size_t i = 0; i < pus_.size(); ++i) threads_.emplace_back([this, i] { work(i); });
    } catch (const std::system_error&) {  // out of threads: let the started ones finish, report !complete()
      for (std::size_t missing = threads_.size(); missing < pus_.size(); ++missing)
        start_.arrive_and_drop(), done_.arrive_and_drop();
    }
    done_.arrive_and_wait();  // every thread pinned and its slice touched
  }
  ~PinnedTeam() {
    kernel_ = Kernel::stop;
    start_.arrive_and_wait();
    for (auto& thread : threads_) thread.join();
  }
  bool complete() const { return threads_.size() == pus_.size(); }

  // Seconds from the common start to the end of the last thread.
  double run(Kernel kernel) {
    kernel_ = kernel;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    auto first = results_.front().start, last = results_.front().end;
    for (const auto& result : results_) first = std::min(first, result.start), last = std::max(last, result.end);
    return std::chrono::duration<double>(last - first).count();
  }

  double checksum() const {
    double sum = 0;
    for (const auto& result : results_) sum += result.checksum;
    return sum;
  }
  CpuSet pinned_pus() const {  // where pinning failed (PU not allowed) a thread ran unpinned
    std::vector<int> pinned;
    for (std::size_t i = 0; i < results_.size(); ++i) if (results_[i].pinned) pinned.push_back(pus_[i]);
    return CpuSet(std::move(pinned));
  }

 private:
  struct alignas(64) WorkerResult {  // one cache line each: no false sharing
    Clock::time_point start, end;
    double checksum = 0;
    bool pinned = false;
  };

  void work(std::size_t index) {
    WorkerResult& result = results_[index];
    result.pinned = pin_current_thread(pus_[index]);  // unpinned still measures, just less exactly
    const std::size_t blocks = elements_ / kLanes, threads = pus_.size();
    const std::size_t begin = blocks * index / threads * kLanes, end = blocks * (index + 1) / threads * kLanes;
    if (first_touch_)
      for (std::size_t i = begin; i < end; ++i) a_[i] = 0, b_[i] = 1, c_[i] = 2;
    done_.arrive_and_wait();
    while (true) {
      start_.arrive_and_wait();
      if (kernel_ == Kernel::stop) return;
      result.start = Clock::now();
      if (kernel_ == Kernel::read) {
        result.checksum = sum_kernel(b_ + begin, end - begin);
      } else {
        triad_kernel(a_ + begin, b_ + begin, c_ + begin, kTriadScalar, end - begin);
        result.checksum = end > begin ? a_[begin] : 0;
      }
      result.end = Clock::now();
      done_.arrive_and_wait();
    }
  }

  std::vector<int> pus_;
  double *a_, *b_, *c_;
  std::size_t elements_;
  bool first_touch_;
  std::vector<WorkerResult> results_;
  std::barrier<> start_, done_;
  std::vector<std::thread> threads_;
  Kernel kernel_ = Kernel::read;
};

// ------------------------------------------------------------- one point

Result<std::vector<MemoryBandwidthPoint>> measure_point(const PointPlan& plan, const TriadArrays& arrays,
                                                        bool first_touch, double seconds) {
  const auto started = Clock::now();
  PinnedTeam team(plan.pus, arrays, first_touch);
  if (!team.complete())
    return make_error("memory bandwidth: could not start " + std::to_string(plan.pus.size()) + " threads");

  const double setup = coli::seconds_since(started);
  RepeatPolicy policy;
  policy.max_total = std::chrono::duration<double>(std::max(0.05, (seconds - setup) / 2));
  const double read_bytes = static_cast<double>(arrays.elements) * sizeof(double);
  const double triad_bytes = 3 * read_bytes;  // STREAM counting: read b and c, write a

  const SampleStats read = measure_repeatedly([&] { return read_bytes / team.run(Kernel::read) / 1e9; }, policy);
  if (team.checksum() != static_cast<double>(arrays.elements))  // b holds ones: the sum is the element count
    return make_error("memory bandwidth: read kernel checksum is wrong; memory or compiler misbehaved");
  const SampleStats triad = measure_repeatedly([&] { return triad_bytes / team.run(Kernel::triad) / 1e9; }, policy);
  if (team.checksum() != static_cast<double>(plan.pus.size()) * (1 + kTriadScalar * 2))
    return make_error("memory bandwidth: triad kernel produced wrong values; memory or compiler misbehaved");

  const int threads = static_cast<int>(plan.pus.size());
  const CpuSet pinned = team.pinned_pus();
  return std::vector<MemoryBandwidthPoint>{{"read", plan.kind_rank, threads, pinned, read},
                                           {"triad", plan.kind_rank, threads, pinned, triad}};
}

}  // namespace

Result<MemoryBandwidth> measure_memory_bandwidth(const CpuFacts& cpu, const MemoryFacts& memory,
                                                 const MemoryBandwidthOptions& options, const ProgressFn& progress) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(options.budget_seconds);
  auto buffer_bytes = memory_buffer_bytes(cpu, memory, options);
  if (!buffer_bytes) return buffer_bytes.error();
  const auto plans = plan_points(usable_kinds(cpu), options.budget_seconds);
  if (plans.empty()) return make_error("memory bandwidth: no usable CPU to run on (usable set is empty)");

  // On one NUMA node page placement does not matter: the arrays are touched
  // once and shared by every point. On several, every point maps its own,
  // first-touched by its own threads; the first touch only sizes them.
  const bool touch_per_point = cpu.numa_nodes.size() > 1;
  const double touch_seconds = kSetupShareOfBudget * options.budget_seconds / (touch_per_point ? plans.size() : 1);
  auto arrays = std::make_unique<TriadArrays>(*buffer_bytes);
  const auto mapping_failed = [](std::uint64_t bytes) {
    return make_error("memory bandwidth: could not map 3 arrays of " + format_bytes(bytes));
  };
  if (!arrays->a) return mapping_failed(*buffer_bytes);
  MemoryBandwidth bandwidth;
  bandwidth.fresh_page_us = measure_fresh_page_us();
  bandwidth.buffer_bytes = touch_within(*arrays, touch_seconds);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (touch_per_point) {
      arrays.reset();  // unmap the old ones first
      arrays = std::make_unique<TriadArrays>(bandwidth.buffer_bytes);
      if (!arrays->a) return mapping_failed(bandwidth.buffer_bytes);
      arrays->elements = bandwidth.buffer_bytes / sizeof(double);
    }
    if (progress) progress("memory bandwidth: " + std::to_string(plans[i].pus.size()) + " thread(s), PUs " + CpuSet(plans[i].pus).to_list());
    // Share what is left of the budget among the points still to run, so an
    // expensive point (slow first touch) shortens the later ones.
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    auto points = measure_point(plans[i], *arrays, touch_per_point, left / static_cast<double>(plans.size() - i));
    if (!points) return points.error();
    bandwidth.points.insert(bandwidth.points.end(), points->begin(), points->end());
  }
  return bandwidth;
}

}  // namespace coli::probe
