// Anonymous memory for what the engine streams every token (expert slots,
// dense weights): mapped on a 2 MiB boundary and advised MADV_HUGEPAGE, as
// the probe's bandwidth buffer is, so decode reads through the same kind of
// pages the profile's bandwidth was measured on. With the kernel's
// transparent huge pages in "madvise" mode (Ubuntu's default) heap memory
// gets 4 KiB pages, and 16 threads streaming weights miss the TLB every
// 4 KiB. The kernel may decline the advice; the memory works either way.
// COLI_HUGE_PAGES=off leaves the advice out (the named override).
#pragma once

#include <cstddef>
#include <string>

#include "coli/base/result.h"

namespace coli {

class WeightMemory {
 public:
  // `bytes` of zeroed memory, pages committed on first touch. Errors name
  // `what` and the byte count.
  static Result<WeightMemory> allocate(std::size_t bytes, const std::string& what);

  WeightMemory() = default;
  WeightMemory(WeightMemory&& other) noexcept;
  WeightMemory& operator=(WeightMemory&& other) noexcept;
  WeightMemory(const WeightMemory&) = delete;
  WeightMemory& operator=(const WeightMemory&) = delete;
  ~WeightMemory();

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool huge_pages_advised() const { return advised_; }

 private:
  void release();
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;  // size_ rounded up to the page size
  bool advised_ = false;
};

// Whether WeightMemory asks for huge pages: yes unless COLI_HUGE_PAGES is
// "off" (or "0"); read once per process.
bool weight_memory_huge_pages();

// The kernel's transparent huge page mode ("always", "madvise", "never"), or
// "unknown" when /sys/kernel/mm/transparent_hugepage/enabled is unreadable.
std::string transparent_huge_page_mode();

}  // namespace coli
