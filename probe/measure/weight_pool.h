// The tuning phase's test weights: bytes in one anonymous mapping, larger
// than the last-level cache, handed out round robin so consecutive kernel
// calls read different memory and stream from RAM as decode does.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

inline constexpr std::uint64_t kSmallestPool = 32ull << 20;

// Weight bytes in one anonymous mapping, handed out round robin so
// consecutive calls read different memory.
class WeightPool {
 public:
  explicit WeightPool(std::uint64_t bytes) : mapped_(bytes) {
    void* address = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (address == MAP_FAILED) return;
#ifdef MADV_HUGEPAGE
    madvise(address, bytes, MADV_HUGEPAGE);
#endif
    base_ = static_cast<std::byte*>(address);
  }
  ~WeightPool() { if (base_) munmap(base_, mapped_); }
  WeightPool(const WeightPool&) = delete;
  bool mapped() const { return base_ != nullptr; }
  std::uint64_t size() const { return used_; }
  std::span<std::byte> filled() const { return {base_, used_}; }

  // Bytes 0x30..0x3f: as int8 small weights, as nibbles any value, and as
  // binary16 or float32 scales always normal numbers (no denormal slow paths).
  // The first 8 MiB chunk is drawn, the others copy it: a kernel's timing
  // does not depend on the values, and a byte a step filled ~140 MB/s on the
  // 2-core VM, cutting a 2.5 GiB pool to 1.1 GiB at the deadline (the VM's
  // first touch alone runs ~0.8 GB/s). Touches chunk by chunk until done or
  // the deadline, at least kSmallestPool.
  void fill(std::chrono::steady_clock::time_point deadline) {
    constexpr std::uint64_t kChunk = 8ull << 20;
    std::uint32_t state = 12345;
    for (std::uint64_t chunk = 0; used_ < mapped_ && (used_ < kSmallestPool || std::chrono::steady_clock::now() < deadline); used_ += chunk) {
      chunk = std::min(kChunk, mapped_ - used_);
      if (used_ >= kChunk) {
        std::memcpy(base_ + used_, base_, chunk);
        continue;
      }
      for (std::uint64_t i = 0; i < chunk; ++i) {
        state = state * 1664525u + 1013904223u;
        base_[used_ + i] = static_cast<std::byte>(0x30 | (state >> 28));
      }
    }
  }
  // What take(bytes) hands out: whole 64-byte cache lines.
  static std::uint64_t taken_bytes(std::uint64_t bytes) { return (bytes + 63) / 64 * 64; }
  const std::byte* take(std::uint64_t bytes) {
    bytes = taken_bytes(bytes);
    if (cursor_ + bytes > used_) cursor_ = 0;
    const std::byte* out = base_ + cursor_;
    cursor_ += bytes;
    return out;
  }

 private:
  std::byte* base_ = nullptr;
  std::uint64_t mapped_ = 0, used_ = 0, cursor_ = 0;
};

// The test weights' size: default_tuning_pool_bytes (16 times the
// last-level cache within 1..4 GiB) unless given (coli-probe
// --tuning-pool), at most an eighth of the memory headroom; an error when
// that leaves less than kSmallestPool. A model's decode streams gigabytes a
// token from RAM; a pool the cache partly keeps between cycles times the
// kernels too fast. The 2-core VM (32 MiB L3) timed its decode points
// 10-15% faster over 128 MiB than over 1 GiB or more in interleaved probes
// (medians at two threads: expert_q4_decode 32.2 against 27.3 GB/s,
// dense_q8_decode 42.5 against 35.9; docs/benchmarks.md, session 37), and
// the decode the H100 box's 600 MiB pool (twice its 300 MiB L3) priced ran
// 8-13% slower on every OLMoE and Qwen3 point. An L3 that resists streaming
// (adaptive insertion) may keep up to its own size of a cycled pool, so at
// 16 times at most a sixteenth of the reads hit.
Result<std::uint64_t> tuning_pool_bytes(const CpuFacts& facts, const MemoryFacts& memory, std::uint64_t requested);

}  // namespace coli::probe
