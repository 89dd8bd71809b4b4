#include "measure/disk_bandwidth.h"

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <future>
#include <latch>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <thread>
#include <vector>

#include "coli/base/clock.h"
#include "coli/base/expert_io.h"
#include "coli/base/pending_file.h"
#include "coli/base/text.h"
#include "io_pool.h"
#include "measure/stats.h"
#include "measure/test_file.h"

namespace coli::probe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::array<std::uint64_t, 3> kBlockBytes{1 * kMiB, 4 * kMiB, 16 * kMiB};  // expert-sized reads
constexpr std::array<int, 4> kQueueDepths{1, 2, 4, 8};
// Random reads of a small block: the latency one read pays beside its bytes
// (with the 1 MiB point, the planner fits L + b / B for records of any size;
// a small model's records, or a prefill round missing one expert, wait for
// it). Assumed no faster than one such read per 100 us when sizing a round.
constexpr std::uint64_t kLatencyBlock = 16 * 1024;
constexpr double kLatencyBlockSeconds = 100e-6;
constexpr std::uint64_t kLargestBlock = kTestFileChunk;
// The engine's read path: a layer's misses submitted to its I/O pool
// together and waited for (small records, an OLMoE-sized and a larger one).
constexpr std::array<std::uint64_t, 3> kEnginePoolBlocks{kLatencyBlock, 1 * kMiB, 4 * kMiB};
// One small read through the pool after it sat idle this long (the caller
// spinning, as a decode computes): a decoded token's misses come
// milliseconds apart, and the pool's threads and the device wake from idle
// (the 2-core VM: 111 us back to back, 177 after 0.3 ms, 284 after 3 ms,
// 417 after 10; a job that reads nothing 15, 71, 116, 151 us).
constexpr std::array<double, 3> kEnginePoolIdleSeconds{0.25e-3, 1e-3, 4e-3};
// Reads averaged in each sample of an idle point, at least (single reads vary 2x).
constexpr int kIdleReadsPerSample = 4;
constexpr std::uint64_t kMinFileBytes = kMinTestFileBytes;
constexpr std::uint64_t kMinDerivedFileBytes = 256 * kMiB;
constexpr std::uint64_t kMaxDerivedFileBytes = 1024 * kMiB;
constexpr std::uint64_t kDerivedFileBytesPerSecond = 128 * kMiB;  // of budget
constexpr double kWriteShareOfBudget = 0.3;  // stop writing early on a slow disk

std::string filesystem_name(const std::filesystem::path& directory) {
#if defined(__linux__)
  struct statfs info {};
  if (statfs(directory.c_str(), &info) != 0) return "unknown";
  static constexpr std::pair<std::uint32_t, const char*> kMagics[] = {  // from linux/magic.h
      {0xEF53, "ext4"} /* ext2/3/4 share it */, {0x58465342, "xfs"}, {0x9123683E, "btrfs"}, {0x01021994, "tmpfs"},
      {0x858458F6, "ramfs"}, {0x794C7630, "overlay"}, {0x2FC12FC1, "zfs"}, {0xF2F52010, "f2fs"}, {0x6969, "nfs"},
      {0xFF534D42, "cifs"}, {0xFE534D42, "smb2"}, {0x65735546, "fuse"}, {0x01021997, "9p"}, {0x4D44, "vfat"},
      {0x2011BAB0, "exfat"}, {0x5346544E, "ntfs"}, {0x73717368, "squashfs"}};
  for (const auto& [magic, name] : kMagics)
    if (static_cast<std::uint32_t>(info.f_type) == magic) return name;
  char hex[32];
  std::snprintf(hex, sizeof(hex), "unknown (0x%lx)", static_cast<unsigned long>(info.f_type));
  return hex;
#else
  (void)directory;
  return "unknown";
#endif
}

// Reads `offsets` with `queue_depth` threads pulling from one queue, each
// with its own aligned buffer; returns seconds, or the errno of a failed read.
struct ReadRun {
  double seconds = 0;
  int error_number = 0;
};

ReadRun timed_reads(int fd, std::uint64_t block, const std::vector<std::uint64_t>& offsets,
                    std::vector<AlignedBuffer>& buffers) {
  std::atomic<std::size_t> next{0};
  std::atomic<int> failure{0};
  std::latch go(1);
  std::vector<std::jthread> threads;
  try {
    for (auto& buffer : buffers) threads.emplace_back([&, data = buffer.get()] {
      go.wait();
      for (std::size_t i; (i = next.fetch_add(1)) < offsets.size() && failure.load() == 0;) {
        for (std::uint64_t done = 0; done < block;) {
          const ssize_t n = pread(fd, data + done, block - done, static_cast<off_t>(offsets[i] + done));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) { failure = n < 0 ? errno : EIO; break; }
          done += static_cast<std::uint64_t>(n);
        }
      }
    });
  } catch (const std::system_error&) {
    failure = EAGAIN;  // out of threads: the started ones see the failure and stop at once
  }
  const auto start = Clock::now();
  go.count_down();
  for (auto& thread : threads) thread.join();
  return {coli::seconds_since(start), failure.load()};
}

struct PointSetup {
  bool random = false;
  std::uint64_t block = 0;
  int queue_depth = 1;
  bool engine_pool = false;  // batches through the engine's I/O pool (kEnginePoolPattern)
  double idle_s = 0;         // with engine_pool: one read after the pool sat idle this long (kEnginePoolIdlePattern)
};

// One aligned buffer of the point's block per read in flight.
Result<std::vector<AlignedBuffer>> read_buffers(const PointSetup& setup) {
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < setup.queue_depth; ++i) {
    buffers.push_back(aligned_buffer(setup.block));
    if (!buffers.back()) return make_error("disk bandwidth: out of memory for read buffers");
  }
  return buffers;
}

// Samples until the point's share of the budget is spent, with no warm-up:
// nothing to warm, O_DIRECT skips the cache and buffered data is cached already.
RepeatPolicy point_policy(double seconds) {
  RepeatPolicy policy;
  policy.warmup_runs = 0;
  policy.min_total = std::chrono::duration<double>(0);
  policy.max_total = std::chrono::duration<double>(seconds);
  return policy;
}

// One configuration: rounds of reads sized to take about a quarter of the
// point's time at the expected speed, repeated under the budget.
Result<SampleStats> measure_point(int fd, std::uint64_t file_bytes, const PointSetup& setup, double seconds,
                                  double expected_gb_per_s) {
  auto buffers = read_buffers(setup);
  if (!buffers) return buffers.error();
  const auto depth = static_cast<std::uint64_t>(setup.queue_depth);
  const auto target_reads = static_cast<std::uint64_t>(expected_gb_per_s * 1e9 * seconds / 4 / static_cast<double>(setup.block));
  const std::uint64_t reads = std::max<std::uint64_t>(1, target_reads / depth) * depth;  // whole reads per thread
  const std::uint64_t blocks_in_file = file_bytes / setup.block;
  std::mt19937_64 rng(0xC011 + setup.block + depth);  // fixed seed: the same offsets on every run
  std::uint64_t cursor = 0;
  int error_number = 0;
  auto run_once = [&] {
    std::vector<std::uint64_t> offsets(reads);
    for (auto& offset : offsets) offset = (setup.random ? rng() % blocks_in_file : cursor++ % blocks_in_file) * setup.block;
    const ReadRun run = timed_reads(fd, setup.block, offsets, *buffers);
    if (run.error_number != 0) error_number = run.error_number;
    return static_cast<double>(reads * setup.block) / run.seconds / 1e9;
  };
  const SampleStats stats = measure_repeatedly(run_once, point_policy(seconds));
  if (error_number != 0) return make_error(std::string("read failed: ") + std::strerror(error_number));
  return stats;
}

// One read of `data` at `offset` of the test file through the engine's I/O
// pool (pread_full, as ExpertStore reads a miss).
std::future<Status> pool_read(runtime::IoPool& pool, int fd, std::uint64_t offset, std::span<std::byte> data) {
  return pool.submit([fd, offset, data] { return runtime::pread_full(fd, offset, data, data.size(), "the test file"); });
}

// Batches of `setup.queue_depth` random reads through the engine's I/O
// pool (runtime::IoPool, pread_full, as ExpertStore reads a miss), each
// batch waited for before the next is submitted; GB/s of the batches.
Result<SampleStats> measure_engine_pool_point(int fd, std::uint64_t file_bytes, const PointSetup& setup,
                                              runtime::IoPool& pool, double seconds, double expected_gb_per_s) {
  auto buffers = read_buffers(setup);
  if (!buffers) return buffers.error();
  const double batch_bytes = static_cast<double>(setup.block) * setup.queue_depth;
  const auto batches = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(expected_gb_per_s * 1e9 * seconds / 4 / batch_bytes));
  const std::uint64_t blocks_in_file = file_bytes / setup.block;
  std::mt19937_64 rng(0xB47C + setup.block + static_cast<std::uint64_t>(setup.queue_depth));
  std::string failure;
  auto run_once = [&] {
    std::vector<std::future<Status>> reads;
    const auto start = Clock::now();
    for (std::uint64_t batch = 0; batch < batches && failure.empty(); ++batch) {
      reads.clear();
      for (AlignedBuffer& buffer : *buffers) {
        const std::uint64_t offset = rng() % blocks_in_file * setup.block;
        reads.push_back(pool_read(pool, fd, offset, std::span<std::byte>(buffer.get(), setup.block)));
      }
      for (auto& read : reads) {
        if (Status done = read.get(); !done && failure.empty()) failure = done.error().message;
      }
    }
    const double elapsed = coli::seconds_since(start);
    return static_cast<double>(batches) * batch_bytes / elapsed / 1e9;
  };
  const SampleStats stats = measure_repeatedly(run_once, point_policy(seconds));
  if (!failure.empty()) return make_error(failure);
  return stats;
}

// Single random reads through the engine's I/O pool, each after the
// calling thread spun `setup.idle_s` with the pool idle; GB/s of the reads
// alone (the idle time is not counted), as many per sample as a quarter of
// the point's time holds at kLatencyBlockSeconds a read (kIdleReadsPerSample at least).
Result<SampleStats> measure_engine_pool_idle_point(int fd, std::uint64_t file_bytes, const PointSetup& setup,
                                                   runtime::IoPool& pool, double seconds) {
  const int reads = std::max(kIdleReadsPerSample, static_cast<int>(seconds / 4 / (setup.idle_s + kLatencyBlockSeconds)));
  AlignedBuffer buffer = aligned_buffer(setup.block);
  if (!buffer) return make_error("disk bandwidth: out of memory for read buffers");
  const std::uint64_t blocks_in_file = file_bytes / setup.block;
  std::mt19937_64 rng(0x1D1E + setup.block);
  const auto idle = std::chrono::duration<double>(setup.idle_s);
  std::string failure;
  auto run_once = [&] {
    double reading = 0;
    for (int i = 0; i < reads && failure.empty(); ++i) {
      for (const auto idle_end = Clock::now() + idle; Clock::now() < idle_end;) {
      }
      const std::uint64_t offset = rng() % blocks_in_file * setup.block;
      const auto start = Clock::now();
      Status done = pool_read(pool, fd, offset, std::span<std::byte>(buffer.get(), setup.block)).get();
      reading += coli::seconds_since(start);
      if (!done) failure = done.error().message;
    }
    return static_cast<double>(setup.block) * reads / reading / 1e9;
  };
  const SampleStats stats = measure_repeatedly(run_once, point_policy(seconds));
  if (!failure.empty()) return make_error(failure);
  return stats;
}

std::uint64_t choose_file_bytes(const DiskBandwidthOptions& options, std::uint64_t free_bytes) {
  const auto derived = static_cast<std::uint64_t>(options.budget_seconds * static_cast<double>(kDerivedFileBytesPerSecond));
  std::uint64_t bytes = options.file_bytes > 0 ? options.file_bytes
                                               : std::clamp(derived, kMinDerivedFileBytes, kMaxDerivedFileBytes);
  bytes = std::min(bytes, free_bytes / 4);  // never crowd the user's disk
  return bytes - bytes % kLargestBlock;     // whole blocks of every size
}

}  // namespace

Result<DiskBandwidth> measure_disk_bandwidth(const std::filesystem::path& directory,
                                             const DiskBandwidthOptions& options, const ProgressFn& progress) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(options.budget_seconds);
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error))
    return make_error("disk bandwidth: directory " + directory.string() + " does not exist or is not a directory" +
                      "; choose another with --disk-dir");
  auto free_space = free_bytes_at(directory);
  if (!free_space) return make_error("disk bandwidth: " + free_space.error().message + where(directory));
  const std::uint64_t free_bytes = *free_space;
  const std::uint64_t file_bytes = choose_file_bytes(options, free_bytes);
  if (file_bytes < kMinFileBytes)
    return make_error("disk bandwidth: only " + format_bytes(free_bytes) + " free; the test needs a file of " +
                      format_bytes(kMinFileBytes) + " and uses at most a quarter of free space" + where(directory));

  DiskBandwidth result;
  result.directory = directory.string();
  result.filesystem = filesystem_name(directory);
  // tmpfs accepts O_DIRECT since Linux 6.6, but its files live in the page
  // cache whatever the flag says: count it as buffered.
  const bool in_memory = result.filesystem == "tmpfs" || result.filesystem == "ramfs";
  TempFile file;
  if (auto opened = file.open(directory, !in_memory); !opened) return make_error("disk bandwidth: " + opened.error().message);
  if (progress) progress("disk bandwidth: writing a " + format_bytes(file_bytes) + " test file in " + result.directory);
  const auto write_start = Clock::now();
  auto written = write_test_file(file, file_bytes, options.budget_seconds * kWriteShareOfBudget, directory);
  if (!written) return make_error("disk bandwidth: " + written.error().message);
  result.file_bytes = *written;
  const double write_seconds = coli::seconds_since(write_start);
  double expected_gb_per_s = static_cast<double>(result.file_bytes) / write_seconds / 1e9;

  // Probe one O_DIRECT read: some filesystems accept the flag at open only.
  if (AlignedBuffer probe = aligned_buffer(kBlockBytes[0]); file.direct() && probe &&
      pread(file.reader(), probe.get(), kBlockBytes[0], 0) < 0 && errno == EINVAL)
    file.drop_direct();
  result.direct_io = file.direct();
  if (in_memory)
    result.note = result.filesystem + " keeps files in memory (the page cache): these figures are memory speed, "
                  "not a storage device's";
  else if (!result.direct_io)
    result.note = "O_DIRECT is not supported on " + result.filesystem +
                  ": reads went through the page cache, so these figures are page-cache (memory) speed, not the device's";

  std::vector<PointSetup> setups;
  for (bool random : {false, true})
    for (auto block : kBlockBytes)
      for (int depth : kQueueDepths) setups.push_back({random, block, depth});
  for (int depth : kQueueDepths) setups.push_back({true, kLatencyBlock, depth});
  for (auto block : kEnginePoolBlocks)
    for (int depth : kQueueDepths) setups.push_back({true, block, depth, true});
  for (double idle : kEnginePoolIdleSeconds) setups.push_back({true, kLatencyBlock, 1, true, idle});
  runtime::IoPool pool(kDefaultIoThreads);
  result.engine_io_threads = kDefaultIoThreads;
  for (std::size_t i = 0; i < setups.size(); ++i) {
    const PointSetup& setup = setups[i];
    const std::string pattern = setup.idle_s > 0 ? kEnginePoolIdlePattern
                                : setup.engine_pool ? kEnginePoolPattern
                                : setup.random      ? "random"
                                                    : "sequential";
    if (progress)
      progress("disk bandwidth: " + pattern + " " + format_bytes(setup.block) + " reads, queue depth " +
               std::to_string(setup.queue_depth) +
               (setup.idle_s > 0 ? ", each after " + format_fixed(setup.idle_s * 1e3, 2) + " ms idle" : ""));
    // What is left of the budget, shared among the points still to run.
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    const double seconds = std::max(0.02, left / static_cast<double>(setups.size() - i));
    const double expected = setup.block == kLatencyBlock
                                ? std::min(expected_gb_per_s, setup.queue_depth * kLatencyBlock / kLatencyBlockSeconds / 1e9)
                                : expected_gb_per_s;
    auto stats = setup.idle_s > 0 ? measure_engine_pool_idle_point(file.reader(), result.file_bytes, setup, pool, seconds)
                 : setup.engine_pool
                     ? measure_engine_pool_point(file.reader(), result.file_bytes, setup, pool, seconds, expected)
                     : measure_point(file.reader(), result.file_bytes, setup, seconds, expected);
    if (!stats) return make_error("disk bandwidth: " + stats.error().message + where(directory));
    if (stats->median > 0 && setup.block != kLatencyBlock && !setup.engine_pool) expected_gb_per_s = stats->median;
    result.points.push_back({pattern, setup.block, setup.queue_depth, *stats, setup.idle_s * 1e6});
  }
  return result;
}

}  // namespace coli::probe
