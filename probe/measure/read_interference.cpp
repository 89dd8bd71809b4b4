#include "measure/read_interference.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <random>
#include <thread>
#include <utility>

#include "coli/base/clock.h"
#include "coli/base/text.h"
#include "cpu/gemv_cpu.h"
#include "cpu/thread_placement.h"
#include "io_pool.h"
#include "measure/engine_expert_batch.h"
#include "measure/stats.h"
#include "measure/test_file.h"
#include "measure/weight_pool.h"

namespace coli::probe {

namespace cpu = kernels::cpu;
using Clock = std::chrono::steady_clock;

struct BackgroundReads::State {
  TempFile file;
  std::uint64_t file_bytes = 0, block_bytes = 0;
  AlignedBuffer buffer;
  std::mt19937_64 offsets{0x5EAD};
  std::mutex mutex;
  std::condition_variable landed;
  bool running = false, in_flight = false;
  std::uint64_t done = 0;
  std::string error;
  runtime::IoPool pool;  // last: its destructor drains the chain before the rest goes
  explicit State(int io_threads) : pool(std::max(1, io_threads)) {}

  // One read, then the next while running (the chain never waits on the caller).
  void submit_next() {
    const std::uint64_t offset = offsets() % (file_bytes / block_bytes) * block_bytes;
    pool.submit([this, offset] {
      Status read = runtime::pread_full(file.reader(), offset, std::span(buffer.get(), block_bytes), block_bytes, "the test file");
      std::lock_guard lock(mutex);
      ++done;
      if (!read && error.empty()) error = read.error().message;
      if (running && error.empty()) {
        submit_next();
      } else {
        in_flight = false;
        landed.notify_all();
      }
      return Ok{};
    });
  }
};

BackgroundReads::BackgroundReads(std::unique_ptr<State> state) : state_(std::move(state)) {}

BackgroundReads::~BackgroundReads() { (void)stop(); }

Result<std::unique_ptr<BackgroundReads>> BackgroundReads::open(const std::filesystem::path& directory, std::uint64_t file_bytes,
                                                               double write_seconds, std::uint64_t block_bytes,
                                                               int io_threads) {
  if (block_bytes == 0 || block_bytes % kAlignment != 0 || block_bytes > kTestFileChunk)
    return make_error("background reads: a read of " + std::to_string(block_bytes) + " bytes must be a multiple of " +
                      std::to_string(kAlignment) + " up to " + format_bytes(kTestFileChunk));
  auto state = std::make_unique<State>(io_threads);
  if (Status opened = state->file.open(directory, true); !opened) return make_error("background reads: " + opened.error().message);
  auto written = write_test_file(state->file, std::max(file_bytes, kMinTestFileBytes), write_seconds, directory);
  if (!written) return make_error("background reads: " + written.error().message);
  state->file_bytes = *written, state->block_bytes = block_bytes;
  state->buffer = aligned_buffer(block_bytes);
  if (!state->buffer) return make_error("background reads: out of memory for a " + format_bytes(block_bytes) + " read buffer");
  // Some filesystems accept O_DIRECT at open and refuse the reads.
  if (state->file.direct() && pread(state->file.reader(), state->buffer.get(), block_bytes, 0) < 0 && errno == EINVAL)
    state->file.drop_direct();
  return std::unique_ptr<BackgroundReads>(new BackgroundReads(std::move(state)));
}

void BackgroundReads::start() {
  std::lock_guard lock(state_->mutex);
  state_->running = true;
  if (state_->in_flight) return;
  state_->in_flight = true;
  state_->submit_next();
}

Status BackgroundReads::stop() {
  std::unique_lock lock(state_->mutex);
  state_->running = false;
  state_->landed.wait(lock, [&] { return !state_->in_flight; });
  if (!state_->error.empty()) return make_error("background reads: " + state_->error);
  return Ok{};
}

std::uint64_t BackgroundReads::block_bytes() const { return state_->block_bytes; }
int BackgroundReads::io_threads() const { return state_->pool.threads(); }
bool BackgroundReads::direct() const { return state_->file.direct(); }
std::uint64_t BackgroundReads::reads_done() const {
  std::lock_guard lock(state_->mutex);
  return state_->done;
}

namespace {

// expert_q4_decode's call (kernel_timing.cpp): one token on the top-k of
// OLMoE-shaped experts, each call on the pool's next records.
class DecodeBatch {
 public:
  explicit DecodeBatch(EngineExpertBatch batch) : batch_(std::move(batch)), xs_(kOlmoeHidden) {
    std::mt19937 random(3);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& v : xs_) v = uniform(random);
    distinct_ = static_cast<int>(std::min<std::size_t>(kOlmoeTopK, batch_.slots()));
    for (int e = 0; e < kOlmoeTopK; ++e) tasks_.emplace_back(0, e % distinct_);
  }
  // Calls for `seconds` (at least 3, after one untimed): their median GB/s.
  double slice(double seconds) {
    call();
    std::vector<double> samples;
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    do samples.push_back(call());
    while (Clock::now() < end || samples.size() < 3);
    return summarize(std::move(samples)).median;
  }

 private:
  double call() {
    const auto start = Clock::now();
    batch_.run(tasks_, distinct_, xs_, 1);
    const double bytes = static_cast<double>(distinct_) * static_cast<double>(batch_.record_bytes());
    return bytes / coli::seconds_since(start) / 1e9;
  }
  EngineExpertBatch batch_;
  std::vector<float> xs_;
  std::vector<std::pair<int, int>> tasks_;
  int distinct_ = 0;
};

// Reads per second landed while `during` runs (the reads started before it, stopped after).
Result<double> reads_per_second(BackgroundReads& reads, const std::function<void()>& during) {
  reads.start();
  const std::uint64_t before = reads.reads_done();
  const auto start = Clock::now();
  during();
  const double seconds = coli::seconds_since(start);
  const std::uint64_t landed = reads.reads_done() - before;
  if (Status stopped = reads.stop(); !stopped) return stopped.error();
  return static_cast<double>(landed) / seconds;
}

// Each pair: the kernel alone, the kernel beside the reads and the reads
// alone (the calling thread asleep, as a waiting layer's), the order
// rotating so the machine's drift touches all three alike.
Result<ReadInterferencePoint> time_set(const ThreadCandidate& set, DecodeBatch& batch, BackgroundReads& reads,
                                       const ReadInterferenceOptions& options) {
  ReadInterferencePoint point{set.name, set.pus.size(), set.pus, options.pairs, 0, 0, 0, 0, 0, 0};
  std::vector<double> alone, beside, slowdowns, reads_alone, reads_beside, progress;
  for (int pair = 0; pair < options.pairs; ++pair) {
    double kernel_alone = 0, kernel_beside = 0, read_alone = 0, read_beside = 0;
    for (int step = 0; step < 3; ++step) {
      switch ((step + pair) % 3) {
        case 0: kernel_alone = batch.slice(options.slice_seconds); break;
        case 1: {
          auto rate = reads_per_second(reads, [&] { kernel_beside = batch.slice(options.slice_seconds); });
          if (!rate) return rate.error();
          read_beside = *rate;
          break;
        }
        default: {
          auto rate = reads_per_second(reads, [&] { std::this_thread::sleep_for(std::chrono::duration<double>(options.slice_seconds)); });
          if (!rate) return rate.error();
          read_alone = *rate;
        }
      }
    }
    alone.push_back(kernel_alone), beside.push_back(kernel_beside);
    reads_alone.push_back(read_alone), reads_beside.push_back(read_beside);
    if (kernel_beside > 0) slowdowns.push_back(kernel_alone / kernel_beside);
    if (read_alone > 0) progress.push_back(read_beside / read_alone);
  }
  point.alone_gb_per_s = summarize(std::move(alone)).median;
  point.with_reads_gb_per_s = summarize(std::move(beside)).median;
  point.slowdown = slowdowns.empty() ? 0.0 : summarize(std::move(slowdowns)).median - 1.0;
  point.reads_alone_per_s = summarize(std::move(reads_alone)).median;
  point.reads_beside_per_s = summarize(std::move(reads_beside)).median;
  point.read_progress = progress.empty() ? 1.0 : summarize(std::move(progress)).median;
  return point;
}

}  // namespace

ReadInterferenceOptions read_interference_options(double budget_seconds, std::size_t sets) {
  ReadInterferenceOptions options;
  const double slices = static_cast<double>(std::max<std::size_t>(1, sets)) * options.pairs * 3;
  options.slice_seconds = std::clamp(0.1 * budget_seconds / slices, 0.01, 0.05);
  options.fill_seconds = std::min(2.0, 0.05 * budget_seconds);
  return options;
}

Result<ReadInterference> measure_read_interference(const CpuFacts& cpu, const MemoryFacts& memory,
                                                   const std::vector<ThreadCandidate>& sets, BackgroundReads& reads,
                                                   const ReadInterferenceOptions& options, const ProgressFn& progress) {
  if (options.pairs < 1 || !(options.slice_seconds > 0))
    return make_error("read interference: pairs must be >= 1 and slices > 0 s");
  auto variant = cpu::selected_variant();
  if (!variant) return variant.error();
  auto pool_bytes = tuning_pool_bytes(cpu, memory, options.pool_bytes);
  if (!pool_bytes) return pool_bytes.error();
  WeightPool pool(*pool_bytes);
  if (!pool.mapped()) return make_error("read interference: could not map " + format_bytes(*pool_bytes) + " of test weights");
  pool.fill(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.fill_seconds)));

  ReadInterference out{"expert_q4_decode", reads.block_bytes(), reads.io_threads(), reads.direct(), "", {}};
  cpu::TeamRelease release;
  for (const ThreadCandidate& set : sets) {
    if (Status pinned = cpu::pin_openmp_team(set.pus); !pinned) {
      out.note += (out.note.empty() ? "" : "; ") + set.name + " skipped: " + pinned.error().message;
      continue;
    }
    if (progress) progress("read interference: " + set.name + " beside " + format_bytes(reads.block_bytes()) + " reads");
    auto batch = EngineExpertBatch::create(WeightFormat::q4_g64, kOlmoeHidden, kOlmoeWidth, std::string(cpu::variant_name(*variant)),
                                           set.pus.size(), pool.filled());
    if (!batch) return batch.error();
    DecodeBatch decode(std::move(*batch));
    auto point = time_set(set, decode, reads, options);
    if (!point) return make_error("read interference on " + set.name + ": " + point.error().message);
    out.points.push_back(std::move(*point));
  }
  return out;
}

Result<ReadInterference> measure_reads_beside_compute(const std::filesystem::path& directory, std::uint64_t block_bytes,
                                                      int io_threads, const CpuFacts& cpu, const MemoryFacts& memory,
                                                      const std::vector<ThreadCandidate>& sets,
                                                      const ReadInterferenceOptions& options, const ProgressFn& progress) {
  auto reads = BackgroundReads::open(directory, kInterferenceFileBytes, 1.0, block_bytes, io_threads);
  if (!reads) return reads.error();
  return measure_read_interference(cpu, memory, sets, **reads, options, progress);
}

}  // namespace coli::probe
