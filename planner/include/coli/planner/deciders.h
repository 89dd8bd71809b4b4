// The planner's decisions, each a pure function that returns its choice and
// the reason for it (or, for a choice that cannot work, an error that names
// the numbers and says what to change).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "coli/base/result.h"
#include "coli/planner/footprint.h"
#include "coli/planner/memory_preview.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

// ------------------------------------------------------------------ threads

struct ThreadChoice {
  int threads = 1;
  std::string basis;   // "measured" (the profile's rule names a measurement) or "rule"
  std::string reason;
};

// The profile's recommended decode threads (field note 2: tiers are the
// probe's job; the planner trusts its recommendation and says which kind it
// was). An override below 1 or above the usable CPUs is refused.
Result<ThreadChoice> decide_threads(const DeviceProfile& profile, std::optional<int> override_threads);

// ------------------------------------------------------------ safety margin

struct SafetyMargin {
  std::uint64_t bytes = 0;
  std::string reason;
  bool operator==(const SafetyMargin&) const = default;
};

// RAM kept free beyond the itemised plan. Not a flat constant:
//  - max(2% of the plan, 256 MiB) for what the estimates cannot see (heap
//    fragmentation of small allocations, libraries' lazy allocations); the
//    2% is the drift left once large buffers are single mmap-served
//    allocations (field note 5 saw 15% when they piled up in malloc arenas);
//  - page tables: 8 B per 4 KiB page of the plan (0.2%);
//  - one malloc arena per thread that allocates (glibc: 1 MiB touched each).
SafetyMargin decide_safety_margin(std::uint64_t plan_bytes, int threads, int io_threads);

// ------------------------------------------------------- pins and the round

struct PinRoundChoice {
  int pins = 0;
  int round_tokens = 1;
  std::string reason;
};

// Pins and prefill round for one cap, keeping cap - pins >= the distinct
// unpinned experts a round can touch (experts::RoundPlanner, field note 1).
// Forced pins (--pin) are kept and the round shrinks; pins that leave no
// room for even one token are refused. Suggested pins (usage history) shrink
// so the round keeps at least half the size it would have without pins.
Result<PinRoundChoice> decide_pins_and_round(const ModelFootprint& footprint, int cap, int pins, bool pins_forced,
                                             int requested_round);

// ------------------------------------------------------------ cache capacity

struct CacheRequest {
  std::uint64_t headroom_bytes = 0;   // RAM the plan may use (measured headroom or --ram)
  std::string headroom_source;        // for messages
  bool ram_limited_by_user = false;   // --ram set below the measured headroom
  std::optional<int> cap;             // --cap
  int pins = 0;
  bool pins_forced = false;           // --pin
  int requested_round = 64;
  MemoryKnobs knobs;                  // ctx, prompt, threads, io_threads (cap/pins/round are decided here)
};

struct CacheChoice {
  int cap = 0;
  PinRoundChoice pins_round;
  MemoryPreview memory;
  SafetyMargin margin;
  std::string reason;
};

// The largest cap in [top_k, n_experts] whose plan plus margin fits the
// headroom (or the forced cap, checked). When even cap = top_k does not fit,
// the error names needed vs headroom and what to change.
Result<CacheChoice> decide_cache(const ModelFootprint& footprint, const CacheRequest& request);

// "17.3 GiB" for messages.
std::string format_bytes(std::uint64_t bytes);

}  // namespace coli::planner
