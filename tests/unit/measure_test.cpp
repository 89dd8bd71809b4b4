#include <sched.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "coli/base/expert_io.h"
#include "measure/disk_bandwidth.h"
#include "measure/memory_bandwidth.h"
#include "measure/stats.h"

namespace coli::probe {
namespace {

using namespace std::chrono_literals;
using Seconds = std::chrono::duration<double>;
constexpr std::uint64_t kMiB = 1ull << 20;

// ------------------------------------------------------------- stats

TEST(Summarize, OddCountTakesTheMiddleSample) {
  const SampleStats stats = summarize({3.0, 1.0, 2.0});
  EXPECT_EQ(stats.samples, 3);
  EXPECT_DOUBLE_EQ(stats.median, 2.0);
  EXPECT_DOUBLE_EQ(stats.best, 3.0);
  EXPECT_DOUBLE_EQ(stats.worst, 1.0);
  EXPECT_DOUBLE_EQ(stats.spread, 1.0);
}

TEST(Summarize, EvenCountAveragesTheTwoMiddleSamples) {
  const SampleStats stats = summarize({10.0, 40.0, 20.0, 30.0});
  EXPECT_DOUBLE_EQ(stats.median, 25.0);
  EXPECT_DOUBLE_EQ(stats.spread, 30.0 / 25.0);
}

TEST(Summarize, OneSampleHasNoSpreadAndNoneIsEmpty) {
  const SampleStats one = summarize({7.5});
  EXPECT_EQ(one.samples, 1);
  EXPECT_DOUBLE_EQ(one.median, 7.5);
  EXPECT_DOUBLE_EQ(one.spread, 0.0);
  EXPECT_EQ(summarize({}), SampleStats{});
}

struct SleepyWorkload {
  int calls = 0;
  double operator()() {
    ++calls;
    std::this_thread::sleep_for(5ms);
    return static_cast<double>(calls);
  }
};

SampleStats timed_repeat(SleepyWorkload& workload, const RepeatPolicy& policy, double& seconds) {
  const auto start = std::chrono::steady_clock::now();
  const SampleStats stats = measure_repeatedly([&] { return workload(); }, policy);
  seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  return stats;
}

TEST(MeasureRepeatedly, StopsAtMinSamplesOnceMinTotalIsMet) {
  SleepyWorkload workload;
  double seconds = 0;
  const SampleStats stats = timed_repeat(workload, {.warmup_runs = 2, .min_samples = 3, .max_samples = 10,
                                                    .min_total = 0s, .max_total = 10s}, seconds);
  EXPECT_EQ(stats.samples, 3);
  EXPECT_EQ(workload.calls, 5);          // warm-up runs are not samples
  EXPECT_DOUBLE_EQ(stats.worst, 3.0);    // samples came after the two warm-up calls
}

TEST(MeasureRepeatedly, KeepsSamplingUntilMinTotalButNotPastMaxSamples) {
  SleepyWorkload workload;
  double seconds = 0;
  const SampleStats stats = timed_repeat(workload, {.warmup_runs = 0, .min_samples = 2, .max_samples = 6,
                                                    .min_total = 10s, .max_total = 20s}, seconds);
  EXPECT_EQ(stats.samples, 6);
  EXPECT_LT(seconds, 1.0);
}

TEST(MeasureRepeatedly, MaxTotalBoundsTheTime) {
  SleepyWorkload workload;
  double seconds = 0;
  const SampleStats stats = timed_repeat(workload, {.warmup_runs = 1, .min_samples = 100, .max_samples = 100,
                                                    .min_total = 0s, .max_total = 60ms}, seconds);
  EXPECT_GE(stats.samples, 1);
  EXPECT_LE(stats.samples, 12);  // 60 ms of 5 ms runs, warm-up included
  EXPECT_LT(seconds, 0.3);
}

TEST(MeasureRepeatedly, TakesOneSampleEvenWhenTheBudgetIsTooSmall) {
  SleepyWorkload workload;
  double seconds = 0;
  const SampleStats stats = timed_repeat(workload, {.warmup_runs = 3, .min_samples = 5, .max_samples = 5,
                                                    .min_total = 0s, .max_total = 1ms}, seconds);
  EXPECT_EQ(stats.samples, 1);
  EXPECT_LE(workload.calls, 2);
}

// ------------------------------------------------------------- memory

// This machine's allowed CPUs, at most two (keeps the test short on big
// hosts), as one kind without SMT.
CpuFacts allowed_cpus(int at_most) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  EXPECT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  std::vector<int> pus;
  for (int cpu = 0; cpu < CPU_SETSIZE && static_cast<int>(pus.size()) < at_most; ++cpu)
    if (CPU_ISSET(cpu, &mask)) pus.push_back(cpu);
  CpuFacts facts;
  facts.cores = facts.pus = static_cast<int>(pus.size());
  facts.usable.pus = facts.usable.affinity = CpuSet(pus);
  facts.kinds.push_back(CpuKind{.rank = 0, .pus = CpuSet(pus), .cores = facts.cores});
  facts.caches.push_back(CacheInfo{.level = 3, .type = "unified", .size_bytes = 32 * kMiB, .instances = 1});
  return facts;
}

MemoryFacts plenty_of_memory() {
  MemoryFacts memory;
  memory.headroom_bytes = 8ull << 30;
  memory.headroom_source = "test";
  return memory;
}

const MemoryBandwidthPoint* find_point(const MemoryBandwidth& bandwidth, const std::string& kernel, int kind_rank,
                                       int threads) {
  for (const auto& point : bandwidth.points)
    if (point.kernel == kernel && point.kind_rank == kind_rank && point.threads == threads) return &point;
  return nullptr;
}

// Arrays of 16 last-level caches (a hybrid CPU's shared L3 once) within
// 64 MiB..2 GiB, at most the option's bytes and three arrays within an
// eighth of the headroom; unknown headroom is an error.
TEST(MemoryBandwidth, BufferIsSixteenLastLevelCachesWithinBounds) {
  auto cpu_with = [](std::uint64_t l3, int instances) {
    CpuFacts cpu;
    cpu.caches = {{2, "unified", 0, 2 * kMiB, 64, 1, 16}, {3, "unified", 0, l3, 64, 16 / instances, instances}};
    return cpu;
  };
  MemoryFacts memory = plenty_of_memory();
  memory.headroom_bytes = 100ull << 30;
  EXPECT_EQ(*memory_buffer_bytes(cpu_with(32 * kMiB, 1), memory, {}), 512 * kMiB);  // the VM's 32 MiB L3
  EXPECT_EQ(*memory_buffer_bytes(cpu_with(64 * kMiB, 2), memory, {}), 2048 * kMiB);  // two 64 MiB L3s: at most 2 GiB
  EXPECT_EQ(*memory_buffer_bytes(cpu_with(2 * kMiB, 1), memory, {}), 64 * kMiB);     // at least 64 MiB
  CpuFacts hybrid;  // two kinds report the one 8 MiB L3 they share: counted once
  hybrid.caches = {{3, "unified", 0, 8 * kMiB, 64, 8, 1}, {3, "unified", 1, 8 * kMiB, 64, 16, 1}};
  EXPECT_EQ(*memory_buffer_bytes(hybrid, memory, {}), 128 * kMiB);
  EXPECT_EQ(*memory_buffer_bytes(cpu_with(32 * kMiB, 1), memory, {.max_buffer_bytes = 16 * kMiB}), 16 * kMiB);
  memory.headroom_bytes = 3ull << 30;  // 3 arrays within 384 MiB
  EXPECT_EQ(*memory_buffer_bytes(cpu_with(32 * kMiB, 1), memory, {}), 128 * kMiB);
  memory.headroom_bytes = 0;
  const auto unknown = memory_buffer_bytes(cpu_with(32 * kMiB, 1), memory, {});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("headroom is unknown"), std::string::npos) << unknown.error().message;
}

TEST(MemoryBandwidth, MeasuresEveryThreadCountWithinTheBudget) {
  const CpuFacts cpu = allowed_cpus(2);
  const int max_threads = cpu.usable.pus.size();
  int progress_calls = 0;
  const auto start = std::chrono::steady_clock::now();
  auto bandwidth = measure_memory_bandwidth(cpu, plenty_of_memory(), {.budget_seconds = 1.5, .max_buffer_bytes = 16 * kMiB},
                                            [&](std::string_view) { ++progress_calls; });
  const double seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.error().message;
  EXPECT_EQ(bandwidth->buffer_bytes, 16 * kMiB);
  EXPECT_LT(seconds, 4.0);
  EXPECT_GE(progress_calls, 1);
  for (int threads : {1, max_threads}) {
    for (const char* kernel : {"read", "triad"}) {
      const MemoryBandwidthPoint* point = find_point(*bandwidth, kernel, -1, threads);
      ASSERT_NE(point, nullptr) << kernel << " with " << threads << " thread(s)";
      EXPECT_GE(point->gb_per_s.samples, 1);
      EXPECT_GT(point->gb_per_s.worst, 0.0);
      EXPECT_GE(point->gb_per_s.best, point->gb_per_s.median);
      EXPECT_EQ(point->pus.size(), threads);  // pinned to allowed PUs, so pinning succeeds
      EXPECT_TRUE(point->pus.intersect(cpu.usable.pus) == point->pus);
    }
  }
}

TEST(MemoryBandwidth, MeasuresEachKindOnItsOwnPus) {
  CpuFacts cpu = allowed_cpus(2);
  if (cpu.usable.pus.size() < 2) GTEST_SKIP() << "needs two allowed CPUs";
  const int little = cpu.usable.pus.cpus()[0], big = cpu.usable.pus.cpus()[1];
  cpu.kinds = {CpuKind{.rank = 0, .pus = CpuSet({little}), .cores = 1},
               CpuKind{.rank = 1, .pus = CpuSet({big}), .cores = 1}};
  auto bandwidth = measure_memory_bandwidth(cpu, plenty_of_memory(), {.budget_seconds = 3, .max_buffer_bytes = 8 * kMiB}, {});
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.error().message;
  const MemoryBandwidthPoint* one_thread = find_point(*bandwidth, "triad", -1, 1);
  ASSERT_NE(one_thread, nullptr);
  EXPECT_EQ(one_thread->pus, CpuSet({big}));  // the fastest kind comes first
  for (int rank : {0, 1}) {
    const MemoryBandwidthPoint* point = find_point(*bandwidth, "read", rank, 1);
    ASSERT_NE(point, nullptr) << "kind " << rank;
    EXPECT_EQ(point->pus, CpuSet({rank == 0 ? little : big}));
    EXPECT_GT(point->gb_per_s.median, 0.0);
  }
}

TEST(MemoryBandwidth, SeveralNumaNodesGiveEveryPointItsOwnFirstTouchedArrays) {
  CpuFacts cpu = allowed_cpus(2);
  cpu.numa_nodes = {NumaNode{.os_index = 0, .pus = cpu.usable.pus}, NumaNode{.os_index = 1}};
  auto bandwidth = measure_memory_bandwidth(cpu, plenty_of_memory(), {.budget_seconds = 1.5, .max_buffer_bytes = 8 * kMiB}, {});
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.error().message;
  EXPECT_EQ(bandwidth->buffer_bytes, 8 * kMiB);
  ASSERT_NE(find_point(*bandwidth, "triad", -1, cpu.usable.pus.size()), nullptr);
  for (const auto& point : bandwidth->points) EXPECT_GT(point.gb_per_s.median, 0.0) << point.kernel;
}

TEST(MemoryBandwidth, RefusesWhenHeadroomIsTooSmall) {
  MemoryFacts tiny;
  tiny.headroom_bytes = 4 * kMiB;
  tiny.headroom_source = "test";
  auto bandwidth = measure_memory_bandwidth(allowed_cpus(1), tiny, {.budget_seconds = 1}, {});
  ASSERT_FALSE(bandwidth.ok());
  EXPECT_NE(bandwidth.error().message.find("headroom"), std::string::npos);
}

// ------------------------------------------------------------- disk

class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& parent) {
    std::string name = parent + "/coli-measure-test-XXXXXX";
    if (mkdtemp(name.data())) path_ = name;
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  bool empty() const { return std::filesystem::is_empty(path_); }

 private:
  std::filesystem::path path_;
};

void expect_all_points(const DiskBandwidth& disk) {
  // Both patterns x 3 blocks x 4 depths, random 16 KiB at 4 depths, the
  // engine's I/O pool at 16 KiB, 1 and 4 MiB in batches of 1..8, and one
  // 16 KiB read through it after 0.25, 1 and 4 ms idle.
  EXPECT_EQ(disk.points.size(), 2u * 3 * 4 + 4 + 3 * 4 + 3);
  std::vector<double> idle;
  for (const DiskBandwidthPoint& p : disk.points) {
    if (p.pattern != kEnginePoolIdlePattern) continue;
    EXPECT_EQ(p.block_bytes, 16u * 1024);
    EXPECT_EQ(p.queue_depth, 1);
    EXPECT_GT(p.gb_per_s.median, 0.0);
    idle.push_back(p.idle_us);
  }
  EXPECT_EQ(idle, (std::vector<double>{250, 1000, 4000}));
  EXPECT_EQ(disk.engine_io_threads, kDefaultIoThreads);
  for (const char* pattern : {"sequential", "random", kEnginePoolPattern})
    for (std::uint64_t block : {16 * kMiB / 1024, 1 * kMiB, 4 * kMiB, 16 * kMiB})
      for (int depth : {1, 2, 4, 8}) {
        if (block == 16 * 1024 && std::string_view(pattern) == "sequential") continue;  // latency: random reads only
        if (block == 16 * kMiB && std::string_view(pattern) == kEnginePoolPattern) continue;  // expert-sized and latency blocks
        const auto match = [&](const DiskBandwidthPoint& p) {
          return p.pattern == pattern && p.block_bytes == block && p.queue_depth == depth;
        };
        const auto point = std::find_if(disk.points.begin(), disk.points.end(), match);
        ASSERT_NE(point, disk.points.end()) << pattern << " " << block << " qd " << depth;
        EXPECT_GE(point->gb_per_s.samples, 1);
        EXPECT_GT(point->gb_per_s.median, 0.0);
      }
}

TEST(DiskBandwidth, MeasuresBothPatternsAndLeavesNoFile) {
  ScratchDirectory scratch("/tmp");
  ASSERT_FALSE(scratch.path().empty());
  const auto start = std::chrono::steady_clock::now();
  auto disk = measure_disk_bandwidth(scratch.path(), {.budget_seconds = 2, .file_bytes = 64 * kMiB}, {});
  const double seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(disk.ok()) << disk.error().message;
  EXPECT_TRUE(scratch.empty());
  EXPECT_EQ(disk->directory, scratch.path().string());
  EXPECT_EQ(disk->file_bytes, 64 * kMiB);
  EXPECT_FALSE(disk->filesystem.empty());
  EXPECT_EQ(disk->direct_io, disk->note.empty());  // a note exactly when the page cache was in the way
  EXPECT_LT(seconds, 6.0);
  expect_all_points(*disk);
}

TEST(DiskBandwidth, TmpfsFallsBackToBufferedReadsWithANote) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  ScratchDirectory scratch("/dev/shm");
  ASSERT_FALSE(scratch.path().empty());
  auto disk = measure_disk_bandwidth(scratch.path(), {.budget_seconds = 1, .file_bytes = 32 * kMiB}, {});
  ASSERT_TRUE(disk.ok()) << disk.error().message;
  EXPECT_TRUE(scratch.empty());
  EXPECT_EQ(disk->filesystem, "tmpfs");
  EXPECT_FALSE(disk->direct_io);
  EXPECT_NE(disk->note.find("page cache"), std::string::npos) << disk->note;
  expect_all_points(*disk);
}

TEST(DiskBandwidth, MissingDirectoryIsAnErrorNamingIt) {
  const std::string missing = "/tmp/coli-no-such-directory/for-sure";
  auto disk = measure_disk_bandwidth(missing, {.budget_seconds = 1}, {});
  ASSERT_FALSE(disk.ok());
  EXPECT_NE(disk.error().message.find(missing), std::string::npos) << disk.error().message;
  EXPECT_NE(disk.error().message.find("--disk-dir"), std::string::npos);
}

TEST(DiskBandwidth, DirectoryWithoutSpaceIsAnErrorNamingIt) {
  // /proc has no free space and takes no files, for root too.
  auto disk = measure_disk_bandwidth("/proc", {.budget_seconds = 1, .file_bytes = 32 * kMiB}, {});
  ASSERT_FALSE(disk.ok());
  EXPECT_NE(disk.error().message.find("/proc"), std::string::npos) << disk.error().message;
}

}  // namespace
}  // namespace coli::probe
