// The planner's decisions, each a pure function that returns its choice and
// the reason for it (or, for a choice that cannot work, an error that names
// the numbers and says what to change).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/footprint.h"
#include "coli/planner/memory_preview.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

// ------------------------------------------------------------------ threads

struct ThreadChoice {
  int threads = 1;
  CpuSet pus;          // where the engine pins them; empty = not pinned (the OS places them)
  // Passes of several tokens (prefill), when the tuning phase measured
  // another set best for them; 0 = decode's set for every pass.
  int prefill_threads = 0;
  CpuSet prefill_pus;
  std::string basis;   // "measured" (the profile's rule names a measurement) or "rule"
  std::string reason;
};

// The profile's recommended decode threads (field note 2: tiers are the
// probe's job; the planner trusts its recommendation and says which kind it
// was). An override below 1 or above the usable CPUs is refused.
Result<ThreadChoice> decide_threads(const DeviceProfile& profile, std::optional<int> override_threads);

// The most threads that do not time-slice each other: the usable CPUs,
// at most the cgroup quota (0: the profile lists none).
int usable_thread_limit(const DeviceProfile& profile);

// A thread set the probe's tuning phase timed the engine's kernels on.
struct MeasuredThreadSet {
  std::string name;  // "kind0:8c", "kinds0-1:12c+smt"
  int threads = 0;
  CpuSet pus;
  bool operator==(const MeasuredThreadSet&) const = default;
};

// The sets the tuning phase timed a decode kernel on, in the profile's
// order, without those of more than `thread_limit` threads (0: no limit).
std::vector<MeasuredThreadSet> measured_thread_sets(const DeviceProfile& profile, int thread_limit);

// Decode (and prefill) on one measured set, as the planner's candidate.
ThreadChoice threads_on_set(const MeasuredThreadSet& set);

// ------------------------------------------------------------------ KV type

struct KvTypeChoice {
  KvType type = kDefaultKvType;
  std::string reason;
};

// --kv-type, else f16 (llama.cpp's default too: half of f32's KV memory and
// of the bytes each decoded token reads at depth). The GPU decoder keeps its
// own f32 cache in VRAM: f32 there, a request for another type ignored and said.
KvTypeChoice decide_kv_type(const ModelFootprint& footprint, std::optional<KvType> requested, bool gpu_decoder, int ctx);

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

// How concentrated routing is, from a usage history: per MoE layer, the
// share of reads taken by the 0, 1, 2 ... most used experts (prefix sums of
// the sorted shares). Built once per plan.
struct RoutingConcentration {
  std::vector<std::vector<double>> top_mass;  // [layer][p] = share of the p most used experts
  double tokens = 0;
};
// nullopt when the history is empty or belongs to another shape.
std::optional<RoutingConcentration> routing_concentration(const ModelFootprint& footprint,
                                                          const experts::UsageHistory* history);

// Pins that pay for themselves: the P most used experts pinned, LRU over the
// other cap - P slots (taken as uniform over the remaining experts), gives
//   hit(P) = top_mass[P] + (1 - top_mass[P]) * min(1, (cap - P) / (n - P)),
// averaged over layers. The P <= `most` with the best estimate, but only if
// it beats P = 0 by a point: a short or flat history predicts nothing, and
// pins then only shrink the prefill round (coli-sweep measured that).
int decide_history_pins(const ModelFootprint& footprint, int cap, int most, const RoutingConcentration& routing,
                        std::string& reason);

// ------------------------------------------------------------ cache capacity

struct CacheRequest {
  std::uint64_t headroom_bytes = 0;   // RAM the plan may use (measured headroom or --ram)
  std::string headroom_source;        // for messages
  bool ram_limited_by_user = false;   // --ram set below the measured headroom
  std::optional<int> cap;             // --cap
  int pins = 0;
  bool pins_forced = false;           // --pin
  int requested_round = 512;  // PlanRequest::prefill_round_tokens
  MemoryKnobs knobs;                  // ctx, prompt, threads, io_threads (cap/pins/round are decided here)
  const RoutingConcentration* routing = nullptr;  // suggested pins are kept only where they pay
  std::vector<MemoryLine> extra_lines;  // what other tiers add (the GPU backend's VRAM and host lines)
  std::uint64_t load_phase_bytes = 0;   // RAM held while loading only (GpuTier::load_buffer_bytes)
  int useful_cap = 0;                  // > 0: more RAM slots than this serve nothing (the rest live in VRAM)
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

// Why decide_cache refuses when memory is the reason: the smallest plan it
// tried (the forced cap, else cap = top_k) needs more RAM than the headroom.
struct CacheShortfall {
  int cap = 0;                        // the cap that was tried
  std::uint64_t needed_bytes = 0;     // its RAM lines plus the safety margin
  std::uint64_t headroom_bytes = 0;
  std::string needs;                  // what the needed bytes are made of, for messages
  std::vector<std::string> advice;    // what to change, each with its numbers
};
// nullopt when that plan fits or is refused for another reason (a --cap below top_k).
std::optional<CacheShortfall> cache_shortfall(const ModelFootprint& footprint, const CacheRequest& request);

// "17.3 GiB" for messages.
std::string format_bytes(std::uint64_t bytes);

}  // namespace coli::planner
