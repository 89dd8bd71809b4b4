// One layer's expert cache: the slot policy (slot_policy.h: which expert is
// in which slot, pins, LRU, round leases, retirement) over a slot storage
// (slot_storage.h: the bytes, in host RAM or on a device).
//
//   auto round = cache.begin_round(experts_the_router_chose);  // slots leased
//   for (auto& load : round->loads) read expert load.expert into load.destination;
//   ... compute with cache.expert_data(e) for every needed e ...
//   cache.end_round();                                          // leases released
//
// load.destination is the slot's host bytes; it is empty when the storage is
// device memory, and the load then goes through the backend's upload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "coli/base/result.h"
#include "coli/experts/slot_policy.h"
#include "coli/experts/slot_storage.h"

namespace coli::experts {

class ExpertCache {
 public:
  // The policy over a host slab of its cap slots (config.expert_bytes each,
  // config.alignment aligned). Errors: SlotPolicy::create's, bad alignment,
  // allocation failure.
  static Result<ExpertCache> create(const ExpertCacheConfig& config);
  // The policy over storage a backend made. Errors: fewer slots than the
  // policy's cap, or slots smaller than its experts.
  static Result<ExpertCache> create(SlotPolicy policy, std::unique_ptr<SlotStorage> storage);

  Result<RoundPlan> begin_round(std::span<const int> experts_needed);  // SlotPolicy::begin_round
  void end_round() { policy_.end_round(); }
  void abort_round() { policy_.abort_round(); }
  // SlotPolicy::retire_slots, then the storage gives the slots' memory back
  // (whole pages of a host slab). Returns the bytes released.
  Result<std::uint64_t> retire_slots(int count);

  bool in_round() const { return policy_.in_round(); }
  std::optional<int> slot_of(int expert) const { return policy_.slot_of(expert); }
  // The host bytes of an expert leased by the open round; empty otherwise,
  // and always for device storage.
  std::span<const std::byte> expert_data(int expert) const;
  // A slot's host bytes (empty for device storage).
  std::span<std::byte> slot_data(int slot) { return storage_->host_slot(static_cast<std::size_t>(slot)); }

  bool is_resident(int expert) const { return policy_.is_resident(expert); }
  bool is_pinned(int expert) const { return policy_.is_pinned(expert); }
  std::vector<int> lru_order() const { return policy_.lru_order(); }

  int layer() const { return policy_.layer(); }
  int n_experts() const { return policy_.n_experts(); }
  int cap() const { return policy_.cap(); }
  int n_pins() const { return policy_.n_pins(); }
  int evictable_slots() const { return policy_.evictable_slots(); }
  std::size_t expert_bytes() const { return policy_.expert_bytes(); }
  const ExpertCacheStats& stats() const { return policy_.stats(); }
  const SlotPolicy& policy() const { return policy_; }
  SlotStorage& storage() { return *storage_; }
  const SlotStorage& storage() const { return *storage_; }

 private:
  ExpertCache(SlotPolicy policy, std::unique_ptr<SlotStorage> storage);
  SlotPolicy policy_;
  std::unique_ptr<SlotStorage> storage_;
};

}  // namespace coli::experts
