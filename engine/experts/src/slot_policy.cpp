#include "coli/experts/slot_policy.h"

#include <cassert>
#include <string>

#include "coli/experts/round_planner.h"

namespace coli::experts {
namespace {

size_t at(int index) { return static_cast<size_t>(index); }

}  // namespace

Result<SlotPolicy> SlotPolicy::create(const ExpertCacheConfig& config) {
  const std::string where = "layer " + std::to_string(config.layer) + " ";
  const CacheShape shape{config.n_experts, config.top_k, config.cap, static_cast<int>(config.pins.size())};
  auto valid = validate_cache_shape(shape);
  if (!valid) return make_error(where + valid.error().message);

  std::vector<bool> pinned(at(config.n_experts), false);
  for (const int expert : config.pins) {
    if (expert < 0 || expert >= config.n_experts)
      return make_error(where + "pin " + std::to_string(expert) + " is not an expert id (0.." +
                        std::to_string(config.n_experts - 1) + "); the pin list belongs to another model");
    if (pinned[at(expert)]) return make_error(where + "expert " + std::to_string(expert) + " is pinned twice");
    pinned[at(expert)] = true;
  }
  if (config.expert_bytes == 0) return make_error(where + "expert cache needs expert_bytes > 0");
  return SlotPolicy(config, valid->shape.cap);
}

SlotPolicy::SlotPolicy(const ExpertCacheConfig& config, int cap)
    : layer_(config.layer),
      n_experts_(config.n_experts),
      top_k_(config.top_k),
      cap_(cap),
      n_pins_(static_cast<int>(config.pins.size())),
      expert_bytes_(config.expert_bytes),
      slots_(at(cap)),
      slot_of_expert_(at(config.n_experts), -1),
      seen_in_round_(at(config.n_experts), 0),
      evictable_(cap) {
  // Pinned experts own the first slots for the whole run; the rest start
  // empty and evictable.
  for (int slot = 0; slot < n_pins_; ++slot) {
    const int expert = config.pins[at(slot)];
    slots_[at(slot)] = Slot{expert, /*pinned=*/true, /*leased=*/false, /*loaded=*/false};
    slot_of_expert_[at(expert)] = slot;
  }
  for (int slot = n_pins_; slot < cap_; ++slot) evictable_.push_back(slot);
}

Status SlotPolicy::check_round_fits(const std::vector<int>& distinct) const {
  int unpinned_hits = 0;  // resident, unpinned: will leave the evictable list
  int misses = 0;         // need an evictable slot
  for (const int expert : distinct) {
    const int slot = slot_of_expert_[at(expert)];
    if (slot < 0) ++misses;
    else if (!slots_[at(slot)].pinned) ++unpinned_hits;
  }
  const int available = evictable_.size() - unpinned_hits;
  if (misses <= available) return Ok{};
  return make_error("layer " + std::to_string(layer_) + " expert cache: a round touches " +
                    std::to_string(distinct.size()) + " distinct experts, " + std::to_string(misses) +
                    " of them not cached, but only " + std::to_string(available) + " of cap " +
                    std::to_string(cap_) + " slots can be recycled (" + std::to_string(n_pins_) + " pinned, " +
                    std::to_string(unpinned_hits) +
                    " held by this round's hits); size prefill rounds with RoundPlanner (at most (cap - pins) / "
                    "top_k tokens), raise cap, or pin fewer experts");
}

Result<RoundPlan> SlotPolicy::begin_round(std::span<const int> experts_needed) {
  if (in_round_) return make_error("layer " + std::to_string(layer_) + " expert cache: begin_round while a round is open");
  const std::uint64_t stamp = ++round_stamp_;  // every attempt gets a fresh mark, refused or not
  std::vector<int> distinct;
  for (const int expert : experts_needed) {
    if (expert < 0 || expert >= n_experts_)
      return make_error("layer " + std::to_string(layer_) + " expert cache: router chose expert " +
                        std::to_string(expert) + " but the layer has " + std::to_string(n_experts_));
    if (seen_in_round_[at(expert)] == stamp) continue;
    seen_in_round_[at(expert)] = stamp;
    distinct.push_back(expert);
  }
  if (Status fits = check_round_fits(distinct); !fits) return fits.error();

  RoundPlan plan;
  plan.distinct = static_cast<int>(distinct.size());
  // Pass 1: lease every slot the round already has, taking it out of the
  // evictable list, *before* any victim is chosen. Choosing victims while
  // later hits were still evictable is exactly field failure #1.
  std::vector<int> misses;
  for (const int expert : distinct) {
    const int slot = slot_of_expert_[at(expert)];
    if (slot < 0) {
      misses.push_back(expert);
      continue;
    }
    Slot& s = slots_[at(slot)];
    if (!s.pinned) evictable_.remove(slot);
    s.leased = true;
    leased_.push_back(slot);
    if (s.loaded) ++plan.hits;
    else plan.loads.push_back({expert, slot, {}});  // a pinned expert's first use
  }
  // Pass 2: misses take the least recently used slots still evictable.
  assert(evictable_.size() >= static_cast<int>(misses.size()));
  for (const int expert : misses) {
    const int slot = take_victim();
    slots_[at(slot)] = Slot{expert, /*pinned=*/false, /*leased=*/true, /*loaded=*/false};
    slot_of_expert_[at(expert)] = slot;
    leased_.push_back(slot);
    plan.loads.push_back({expert, slot, {}});
  }
  in_round_ = true;
  ++stats_.rounds;
  stats_.hits += static_cast<std::uint64_t>(plan.hits);
  stats_.misses += plan.loads.size();
  return plan;
}

int SlotPolicy::take_victim() {
  const int slot = evictable_.front();
  Slot& victim = slots_[at(slot)];
  // Structurally impossible (pinned slots never enter the list, leased ones
  // left it in pass 1); checked anyway in debug builds.
  assert(!victim.pinned && !victim.leased);
  evictable_.remove(slot);
  if (victim.expert >= 0) {
    slot_of_expert_[at(victim.expert)] = -1;
    ++stats_.evictions;
  }
  victim = Slot{};
  return slot;
}

void SlotPolicy::end_round() { close_round(/*loads_succeeded=*/true); }
void SlotPolicy::abort_round() { close_round(/*loads_succeeded=*/false); }

void SlotPolicy::close_round(bool loads_succeeded) {
  for (const int slot : leased_) {
    Slot& s = slots_[at(slot)];
    s.leased = false;
    if (!s.loaded && loads_succeeded) {
      s.loaded = true;
      stats_.bytes_loaded += expert_bytes_;
    } else if (!s.loaded && !s.pinned) {
      slot_of_expert_[at(s.expert)] = -1;  // half-filled: forget it
      s.expert = -1;
    }
    if (s.pinned) continue;
    if (s.expert >= 0) evictable_.push_back(slot);  // most recently used
    else evictable_.push_front(slot);               // empty: reuse first
  }
  leased_.clear();
  in_round_ = false;
}

Result<std::vector<int>> SlotPolicy::retire_slots(int count) {
  const std::string where = "layer " + std::to_string(layer_) + " expert cache: ";
  if (in_round_) return make_error(where + "cannot retire slots while a round is open");
  if (count < 0 || evictable_.size() - count < top_k_) {
    return make_error(where + "retiring " + std::to_string(count) + " of " + std::to_string(evictable_.size()) +
                      " evictable slots would leave fewer than top_k " + std::to_string(top_k_));
  }
  std::vector<int> retired;
  for (int i = 0; i < count; ++i) {
    // Empty slots sit at the front of the LRU after loaded ones were used,
    // so the front is always the cheapest slot to give up.
    const int slot = take_victim();
    slots_[at(slot)] = Slot{};  // empty, and no longer in the evictable list: never used again
    retired.push_back(slot);
  }
  cap_ -= count;
  return retired;
}

std::optional<int> SlotPolicy::slot_of(int expert) const {
  if (!in_round_ || expert < 0 || expert >= n_experts_) return std::nullopt;
  const int slot = slot_of_expert_[at(expert)];
  if (slot < 0 || !slots_[at(slot)].leased) return std::nullopt;
  return slot;
}

bool SlotPolicy::is_resident(int expert) const {
  if (expert < 0 || expert >= n_experts_) return false;
  const int slot = slot_of_expert_[at(expert)];
  return slot >= 0 && slots_[at(slot)].loaded;
}

bool SlotPolicy::is_pinned(int expert) const {
  if (expert < 0 || expert >= n_experts_) return false;
  const int slot = slot_of_expert_[at(expert)];
  return slot >= 0 && slots_[at(slot)].pinned;
}

std::vector<int> SlotPolicy::lru_order() const {
  std::vector<int> experts;
  for (const int slot : evictable_.in_order())
    if (slots_[at(slot)].expert >= 0) experts.push_back(slots_[at(slot)].expert);
  return experts;
}

}  // namespace coli::experts
