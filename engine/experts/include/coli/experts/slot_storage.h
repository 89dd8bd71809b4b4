// Where an expert cache's slots live. The cache's policy (slot_policy.h)
// decides which expert is in which slot and never touches bytes; a storage
// holds the bytes. HostSlabStorage is host RAM (one aligned slab); a GPU
// backend's storage holds device buffers the host cannot address
// (host_slot() is empty there, and loads go through the backend's upload).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "coli/base/result.h"
#include "coli/experts/aligned_slab.h"

namespace coli::experts {

class SlotStorage {
 public:
  virtual ~SlotStorage() = default;

  virtual std::size_t slot_count() const = 0;
  virtual std::size_t slot_bytes() const = 0;   // usable bytes per slot (at least one expert record)
  virtual std::size_t slot_stride() const = 0;  // distance between slots, what one slot really costs
  virtual std::size_t alignment() const = 0;    // every slot starts on this boundary
  // Bytes the storage holds now: slots not retired times their stride.
  virtual std::uint64_t bytes_held() const = 0;
  // A slot's bytes when the host can address them (the I/O pool reads
  // straight into them); empty for device memory.
  virtual std::span<std::byte> host_slot(std::size_t slot) = 0;
  virtual std::span<const std::byte> host_slot(std::size_t slot) const = 0;
  // Gives a slot's memory back for good (the RSS watchdog's lever); the slot
  // is never used again. Returns the bytes given back.
  virtual std::uint64_t retire(std::size_t slot) = 0;
};

// Slots in host RAM: one aligned slab; retired slots' whole pages go back to
// the OS with madvise(MADV_DONTNEED).
class HostSlabStorage final : public SlotStorage {
 public:
  // Errors: those of AlignedSlab::allocate (alignment, zero sizes, overflow,
  // allocation failure).
  static Result<std::unique_ptr<HostSlabStorage>> create(std::size_t slot_count, std::size_t slot_bytes,
                                                         std::size_t alignment);

  std::size_t slot_count() const override { return slab_.slot_count(); }
  std::size_t slot_bytes() const override { return slab_.slot_bytes(); }
  std::size_t slot_stride() const override { return slab_.slot_stride(); }
  std::size_t alignment() const override { return slab_.alignment(); }
  std::uint64_t bytes_held() const override;
  std::span<std::byte> host_slot(std::size_t slot) override { return slab_.slot(slot); }
  std::span<const std::byte> host_slot(std::size_t slot) const override { return slab_.slot(slot); }
  std::uint64_t retire(std::size_t slot) override;

 private:
  explicit HostSlabStorage(AlignedSlab slab);
  AlignedSlab slab_;
  std::vector<bool> retired_;
  std::size_t retired_count_ = 0;
};

}  // namespace coli::experts
