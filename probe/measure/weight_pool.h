// The tuning phase's test weights: bytes in one anonymous mapping, larger
// than the last-level cache, handed out round robin so consecutive kernel
// calls read different memory and stream from RAM as decode does.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

inline constexpr std::uint64_t kMinPool = 128ull << 20, kMaxPool = 1024ull << 20, kSmallestPool = 32ull << 20;

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
  // Touches chunk by chunk until done or the deadline, at least kSmallestPool.
  void fill(std::chrono::steady_clock::time_point deadline) {
    std::uint32_t state = 12345;
    for (std::uint64_t chunk = 0; used_ < mapped_ && (used_ < kSmallestPool || std::chrono::steady_clock::now() < deadline); used_ += chunk) {
      chunk = std::min<std::uint64_t>(8ull << 20, mapped_ - used_);
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

// The test weights' size: twice the last-level cache (so decode streams
// from RAM) within [kMinPool, kMaxPool] unless given (coli-probe
// --tuning-pool), at most an eighth of the memory headroom; an error when
// that leaves less than kSmallestPool. The H100 box (300 MiB L3) probed
// with 600 MiB and with 1200 MiB timed its decode points alike: the larger
// pool 3-10% faster, its prefill points and RAM read faster too (the
// machine moved between the probes), so twice holds no L3 share to speak of.
Result<std::uint64_t> tuning_pool_bytes(const CpuFacts& facts, const MemoryFacts& memory, std::uint64_t requested);

}  // namespace coli::probe
