#include "coli/experts/aligned_slab.h"

#include <cassert>
#include <limits>
#include <new>
#include <string>
#include <utility>

namespace coli::experts {

Result<AlignedSlab> AlignedSlab::allocate(std::size_t slot_count, std::size_t slot_bytes, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return make_error("expert slab alignment " + std::to_string(alignment) + " is not a power of two");
  if (slot_count == 0 || slot_bytes == 0) return make_error("expert slab needs at least one slot of at least one byte");
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  if (slot_bytes > max - alignment) return make_error("expert slab slot size overflows");
  const std::size_t stride = (slot_bytes + alignment - 1) / alignment * alignment;
  if (stride > max / slot_count) return make_error("expert slab size overflows");
  const std::size_t total = stride * slot_count;

  // WeightMemory starts on a 2 MiB boundary, so every slot is aligned.
  if (alignment > (std::size_t{2} << 20)) return make_error("expert slab alignment " + std::to_string(alignment) + " is above 2 MiB");
  auto memory = WeightMemory::allocate(total, std::to_string(slot_count) + " expert slots (lower the cache cap)");
  if (!memory) return memory.error();
  AlignedSlab slab;
  slab.memory_ = std::move(*memory);
  slab.slot_count_ = slot_count;
  slab.slot_bytes_ = slot_bytes;
  slab.slot_stride_ = stride;
  slab.alignment_ = alignment;
  return slab;
}

std::span<std::byte> AlignedSlab::slot(std::size_t index) {
  assert(index < slot_count_);
  return {memory_.data() + index * slot_stride_, slot_bytes_};
}

std::span<const std::byte> AlignedSlab::slot(std::size_t index) const {
  assert(index < slot_count_);
  return {memory_.data() + index * slot_stride_, slot_bytes_};
}

}  // namespace coli::experts
