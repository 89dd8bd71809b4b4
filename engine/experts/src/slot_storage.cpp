#include "coli/experts/slot_storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cassert>

namespace coli::experts {

Result<std::unique_ptr<HostSlabStorage>> HostSlabStorage::create(std::size_t slot_count, std::size_t slot_bytes,
                                                                 std::size_t alignment) {
  auto slab = AlignedSlab::allocate(slot_count, slot_bytes, alignment);
  if (!slab) return slab.error();
  return std::unique_ptr<HostSlabStorage>(new HostSlabStorage(std::move(*slab)));
}

HostSlabStorage::HostSlabStorage(AlignedSlab slab) : slab_(std::move(slab)), retired_(slab_.slot_count(), false) {}

std::uint64_t HostSlabStorage::bytes_held() const {
  return static_cast<std::uint64_t>(slab_.slot_count() - retired_count_) * slab_.slot_stride();
}

std::uint64_t HostSlabStorage::retire(std::size_t slot) {
  assert(slot < slab_.slot_count());
  if (retired_[slot]) return 0;
  retired_[slot] = true;
  ++retired_count_;
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::span<std::byte> bytes = slab_.slot(slot);
  // Only pages wholly inside the slot: a neighbour may share the edges.
  const auto begin = (reinterpret_cast<std::uintptr_t>(bytes.data()) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  if (end > begin && madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0) return end - begin;
  return 0;
}

}  // namespace coli::experts
