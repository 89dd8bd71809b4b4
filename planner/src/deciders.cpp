// Threads, safety margin, and pins/round. The cache capacity decider, which
// builds on all three, is in cache_decider.cpp.
#include "coli/planner/deciders.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "coli/experts/round_planner.h"

namespace coli::planner {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr std::uint64_t kMinimumUncertainty = 256 * kMiB;
constexpr double kUncertaintyShare = 0.02;
constexpr std::uint64_t kArenaBytesPerThread = 1 * kMiB;

Result<experts::RoundPlanner> planner_for(const ModelFootprint& fp, int cap, int pins) {
  const experts::CacheShape shape{fp.n_experts, fp.top_k, cap, pins};
  return experts::RoundPlanner::create(std::span(&shape, 1));
}

}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) std::snprintf(text, sizeof text, "%.2f GiB", b / (1ull << 30));
  else if (bytes >= kMiB) std::snprintf(text, sizeof text, "%.1f MiB", b / kMiB);
  else std::snprintf(text, sizeof text, "%.1f KiB", b / 1024);
  return text;
}

Result<ThreadChoice> decide_threads(const DeviceProfile& profile, std::optional<int> override_threads) {
  const ThreadRecommendation& rec = profile.threads;
  ThreadChoice out;
  out.basis = rec.rule.rfind("measured", 0) == 0 ? "measured" : "rule";
  // More threads than usable CPUs (or than the cgroup quota) time-slice each
  // other: every parallel region then waits for its slowest, descheduled thread.
  int limit = profile.cpu.usable.pus.size();
  if (profile.cpu.usable.quota_cpus) limit = std::min(limit, static_cast<int>(std::ceil(*profile.cpu.usable.quota_cpus)));
  if (override_threads) {
    const int t = *override_threads;
    if (t < 1) return make_error("--threads " + std::to_string(t) + " is not a thread count: use 1 or more");
    if (limit > 0 && t > limit) {
      return make_error("--threads " + std::to_string(t) + " exceeds the " + std::to_string(limit) +
                        " usable CPUs (affinity, cpuset and quota of this profile): oversubscribed threads "
                        "stall every parallel region; use --threads " + std::to_string(limit) + " or fewer");
    }
    out.threads = t;
    out.basis = "override";
    out.reason = "--threads " + std::to_string(t) + " (the profile recommends " + std::to_string(rec.decode_threads) +
                 " by " + rec.rule + ")";
    return out;
  }
  out.threads = std::max(1, rec.decode_threads);
  out.reason = std::to_string(out.threads) + " threads from the profile (" + out.basis + ": " + rec.rule + "; " +
               rec.reason + ")";
  return out;
}

SafetyMargin decide_safety_margin(std::uint64_t plan_bytes, int threads, int io_threads) {
  const auto share = static_cast<std::uint64_t>(static_cast<double>(plan_bytes) * kUncertaintyShare);
  const std::uint64_t uncertainty = std::max(share, kMinimumUncertainty);
  const std::uint64_t page_tables = plan_bytes / 4096 * 8;
  const std::uint64_t arenas = static_cast<std::uint64_t>(std::max(0, threads) + std::max(0, io_threads)) * kArenaBytesPerThread;
  SafetyMargin m;
  m.bytes = uncertainty + page_tables + arenas;
  m.reason = format_bytes(m.bytes) + " = max(2% of plan " + format_bytes(plan_bytes) + ", 256 MiB) " +
             format_bytes(uncertainty) + " for fragmentation and lazy allocations + page tables " +
             format_bytes(page_tables) + " (8 B per 4 KiB page) + " + std::to_string(threads + io_threads) +
             " malloc arenas x 1 MiB";
  return m;
}

Result<PinRoundChoice> decide_pins_and_round(const ModelFootprint& fp, int cap, int pins, bool pins_forced,
                                             int requested_round) {
  requested_round = std::max(1, requested_round);
  const std::string where = "cap " + std::to_string(cap) + ", top_k " + std::to_string(fp.top_k) + ", " +
                            std::to_string(fp.n_experts) + " experts";
  PinRoundChoice out;
  if (pins_forced) {
    auto planner = planner_for(fp, cap, pins);
    if (!planner) {
      return make_error("--pin " + std::to_string(pins) + " with " + where + " leaves no room for one token's experts (" +
                        planner.error().message + "); pin at most " + std::to_string(std::max(0, cap - fp.top_k)) +
                        " or raise --cap");
    }
    out.pins = pins;
    out.round_tokens = planner->tokens_per_round(requested_round);
    out.reason = std::to_string(pins) + " pins (forced)";
    if (out.round_tokens < requested_round) {
      out.reason += "; prefill round shrunk from " + std::to_string(requested_round) + " to " +
                    std::to_string(out.round_tokens) + " tokens: " + planner->explain_limit(requested_round);
    }
    return out;
  }
  auto unpinned = planner_for(fp, cap, 0);
  if (!unpinned) return make_error("cache shape " + where + " cannot work: " + unpinned.error().message);
  const int unpinned_round = unpinned->tokens_per_round(requested_round);
  const int floor_round = (unpinned_round + 1) / 2;
  // Each pin is one slot fewer for the round's misses; keep the most pins
  // that still leave at least half of the round the cap alone allows.
  for (int p = std::clamp(pins, 0, cap); p >= 0; --p) {
    auto planner = planner_for(fp, cap, p);
    if (!planner || planner->tokens_per_round(requested_round) < floor_round) continue;
    out.pins = p;
    out.round_tokens = planner->tokens_per_round(requested_round);
    out.reason = std::to_string(p) + " pins";
    if (p < pins) {
      out.reason += " (the usage history suggests " + std::to_string(pins) + "; more would leave cap - pins below " +
                    std::to_string(floor_round) + " tokens x top_k " + std::to_string(fp.top_k) +
                    " distinct experts per round and starve the cache, field note 1)";
    }
    if (out.round_tokens < requested_round) {
      out.reason += "; prefill round " + std::to_string(out.round_tokens) + " of " + std::to_string(requested_round) +
                    " tokens: " + planner->explain_limit(requested_round);
    }
    return out;
  }
  return make_error("no pin count works with " + where);  // unreachable: p = 0 is the unpinned planner
}

}  // namespace coli::planner
