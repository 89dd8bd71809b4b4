// Which expert is in which slot of one layer's cache: `cap` slots, some held
// by pinned experts for the whole run, the rest recycled least-recently-used,
// leased by the open round. Bytes are not its business: the storage
// (slot_storage.h) holds them and ExpertCache (expert_cache.h) joins the two.
//
// Work happens in rounds (one prefill chunk or one decode step):
//   auto round = policy.begin_round(experts_the_router_chose);  // slots leased
//   ... the caller loads round->loads into their slots and computes ...
//   policy.end_round();                                          // leases released
// While a round is open, every slot it uses is leased and cannot be recycled
// (field-notes.md failure #1). A round whose distinct misses exceed the
// evictable slots is refused with an error; RoundPlanner sizes rounds so that
// never happens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "coli/base/result.h"
#include "coli/experts/detail/slot_lru.h"

namespace coli::experts {

struct ExpertCacheConfig {
  int layer = 0;                    // for messages only
  int n_experts = 0;
  int top_k = 0;
  int cap = 0;                      // slots; clamped to n_experts (see validate_cache_shape)
  std::vector<int> pins;            // experts that keep a slot for the whole run
  std::size_t expert_bytes = 0;     // bytes of one expert (all its matrices)
  std::size_t alignment = 64;       // 4096 when slots are O_DIRECT targets
};

// An expert the caller must load into a slot before using it this round.
// `destination` is the slot's host bytes when its storage has them (filled
// by ExpertCache); empty from the policy alone and for device storage.
struct SlotLoad {
  int expert = -1;
  int slot = -1;
  std::span<std::byte> destination;
};

struct RoundPlan {
  std::vector<SlotLoad> loads;  // misses, one per distinct expert not resident
  int distinct = 0;             // distinct experts the round touches
  int hits = 0;                 // of those, already resident
};

struct ExpertCacheStats {
  std::uint64_t rounds = 0;
  std::uint64_t hits = 0;          // distinct experts per round found resident
  std::uint64_t misses = 0;        // distinct experts per round that needed a load
  std::uint64_t evictions = 0;     // resident experts dropped to make room
  std::uint64_t bytes_loaded = 0;  // expert bytes of loads completed by end_round
};

class SlotPolicy {
 public:
  // Errors: any validate_cache_shape error, a pin out of range or repeated,
  // expert_bytes 0. Pinned experts start unloaded: the first round that
  // needs them (or a warm-up round begin_round(pins)) loads them into their
  // own slots, which are the first n_pins slots.
  static Result<SlotPolicy> create(const ExpertCacheConfig& config);

  // Leases a slot for every distinct expert in `experts_needed` and says which
  // must be loaded where. Errors (state unchanged): a round already open, an
  // expert id out of range, or more distinct misses than evictable slots
  // (names cap, pins, distinct and what to change).
  Result<RoundPlan> begin_round(std::span<const int> experts_needed);
  // Closes the round: the loads are taken as done, leases are released and
  // the round's unpinned experts become the most recently used.
  void end_round();
  // Closes the round after a failed load: slots that were being filled this
  // round are emptied (never served as hits later), the rest as end_round.
  void abort_round();
  // Takes `count` evictable slots out of use for good, least recently used
  // first (empty ones before loaded ones), evicting their experts; returns
  // the slots, whose memory the storage may give back. Errors: a round is
  // open, or fewer than top_k evictable slots would remain.
  Result<std::vector<int>> retire_slots(int count);

  bool in_round() const { return in_round_; }
  // The slot of an expert leased by the open round; nullopt otherwise
  // (a slot index is only meaningful while its lease holds).
  std::optional<int> slot_of(int expert) const;
  bool is_resident(int expert) const;  // loaded and not evicted
  bool is_pinned(int expert) const;
  // Unpinned resident experts, least recently used first (the eviction order).
  std::vector<int> lru_order() const;

  int layer() const { return layer_; }
  int n_experts() const { return n_experts_; }
  int cap() const { return cap_; }
  int n_pins() const { return n_pins_; }
  int evictable_slots() const { return cap_ - n_pins_; }
  std::size_t expert_bytes() const { return expert_bytes_; }
  const ExpertCacheStats& stats() const { return stats_; }

 private:
  struct Slot {
    int expert = -1;       // -1: empty
    bool pinned = false;   // never in the LRU, never reassigned
    bool leased = false;   // used by the open round
    bool loaded = false;   // bytes valid (false while a load is pending)
  };

  SlotPolicy(const ExpertCacheConfig& config, int cap);
  Status check_round_fits(const std::vector<int>& distinct) const;
  int take_victim();
  void close_round(bool loads_succeeded);

  int layer_ = 0;
  int n_experts_ = 0;
  int top_k_ = 0;
  int cap_ = 0;
  int n_pins_ = 0;
  std::size_t expert_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<int> slot_of_expert_;        // -1 when not assigned
  std::vector<std::uint64_t> seen_in_round_;  // last begin_round stamp per expert, for the distinct set
  std::uint64_t round_stamp_ = 0;
  detail::SlotLru evictable_;              // unpinned, unleased slots only
  std::vector<int> leased_;                // slots leased by the open round
  bool in_round_ = false;
  ExpertCacheStats stats_;
};

}  // namespace coli::experts
