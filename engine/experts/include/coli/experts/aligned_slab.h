// One aligned allocation cut into equal slots (the expert cache's storage).
// Every slot starts on an `alignment` boundary, so a slot can be the target of
// an O_DIRECT read (alignment 4096) or a vector load (64).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "coli/base/result.h"
#include "coli/base/weight_memory.h"

namespace coli::experts {

class AlignedSlab {
 public:
  // Errors: alignment not a power of two, zero slots or bytes, size overflow,
  // alignment above 2 MiB, allocation failure (names the byte count). Memory
  // is not touched here, so pages are committed only when a slot is first
  // filled. It is WeightMemory (huge pages where the kernel grants them).
  static Result<AlignedSlab> allocate(std::size_t slot_count, std::size_t slot_bytes, std::size_t alignment);

  std::size_t slot_count() const { return slot_count_; }
  std::size_t slot_bytes() const { return slot_bytes_; }    // usable bytes per slot
  std::size_t slot_stride() const { return slot_stride_; }  // slot_bytes rounded up to alignment
  std::size_t alignment() const { return alignment_; }
  std::size_t total_bytes() const { return slot_count_ * slot_stride_; }

  std::span<std::byte> slot(std::size_t index);
  std::span<const std::byte> slot(std::size_t index) const;

 private:
  WeightMemory memory_;
  std::size_t slot_count_ = 0;
  std::size_t slot_bytes_ = 0;
  std::size_t slot_stride_ = 0;
  std::size_t alignment_ = 0;
};

}  // namespace coli::experts
