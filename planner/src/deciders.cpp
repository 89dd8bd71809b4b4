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

// More threads than usable CPUs (or than the cgroup quota) time-slice each
// other: every parallel region then waits for its slowest, descheduled thread.
int usable_thread_limit(const DeviceProfile& profile) {
  int limit = profile.cpu.usable.pus.size();
  if (profile.cpu.usable.quota_cpus) limit = std::min(limit, static_cast<int>(std::ceil(*profile.cpu.usable.quota_cpus)));
  return limit;
}

std::vector<MeasuredThreadSet> measured_thread_sets(const DeviceProfile& profile, int thread_limit) {
  std::vector<MeasuredThreadSet> sets;
  if (!profile.measurements.kernel_tuning) return sets;
  for (const KernelThroughputPoint& p : profile.measurements.kernel_tuning->points) {
    if (p.batch != 1 || p.threads < 1 || p.gb_per_s.median <= 0 || (thread_limit > 0 && p.threads > thread_limit)) continue;
    if (!p.pus.empty() && p.pus.size() != p.threads) continue;  // not one PU per thread: not a set the engine pins
    const MeasuredThreadSet set{p.thread_set, p.threads, p.pus};
    if (std::find(sets.begin(), sets.end(), set) == sets.end()) sets.push_back(set);
  }
  return sets;
}

ThreadChoice threads_on_set(const MeasuredThreadSet& set) {
  ThreadChoice out;
  out.threads = set.threads;
  out.pus = set.pus;
  out.basis = "predicted";
  out.reason = std::to_string(set.threads) + " threads" + (set.pus.empty() ? "" : " on PUs " + set.pus.to_list()) + " (" +
               set.name + ")";
  return out;
}

Result<ThreadChoice> decide_threads(const DeviceProfile& profile, std::optional<int> override_threads) {
  const ThreadRecommendation& rec = profile.threads;
  ThreadChoice out;
  out.basis = rec.rule.rfind("measured", 0) == 0 ? "measured" : "rule";
  const int limit = usable_thread_limit(profile);
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
    // The profile's placement order, cut to t, keeps the threads on its chosen cores.
    if (t <= rec.decode_pus.size()) {
      out.pus = CpuSet(std::vector<int>(rec.decode_pus.cpus().begin(), rec.decode_pus.cpus().begin() + t));
    }
    out.reason = "--threads " + std::to_string(t) + " (the profile recommends " + std::to_string(rec.decode_threads) +
                 " by " + rec.rule + ")";
    return out;
  }
  out.threads = std::max(1, rec.decode_threads);
  if (rec.decode_pus.size() == out.threads) out.pus = rec.decode_pus;
  const std::string on_pus = rec.decode_pus.empty() ? "" : " on PUs " + rec.decode_pus.to_list();
  if (out.basis == "measured") {
    // The tuning phase timed the engine's own kernels per thread set; its figures are in rec.reason.
    out.reason = std::to_string(out.threads) + " threads" + on_pus + ", measured by coli-probe (" + rec.rule + ": " +
                 rec.reason + ")";
    if (rec.prefill_threads > 0 && (rec.prefill_pus != rec.decode_pus || rec.prefill_threads != out.threads)) {
      out.prefill_threads = rec.prefill_threads;
      if (rec.prefill_pus.size() == rec.prefill_threads) out.prefill_pus = rec.prefill_pus;
      out.reason += "; prefill measured best on " + std::to_string(rec.prefill_threads) + " threads" +
                    (rec.prefill_pus.empty() ? "" : " (PUs " + rec.prefill_pus.to_list() + ")") +
                    ": passes of several tokens run there, single tokens on decode's set";
    }
    return out;
  }
  out.reason = std::to_string(out.threads) + " threads from the profile (" + out.basis + ": " + rec.rule + "; " +
               rec.reason + ")";
  return out;
}

KvTypeChoice decide_kv_type(const ModelFootprint& fp, std::optional<KvType> requested, bool gpu_decoder, int ctx) {
  if (gpu_decoder) {
    std::string reason = "the GPU decoder keeps its KV cache in f32 in VRAM (the GPU KV cache line)";
    if (requested && *requested != KvType::f32) {
      reason += "; --kv-type " + std::string(kv_type_name(*requested)) + " applies to the CPU engine and is ignored";
    }
    return {KvType::f32, reason};
  }
  const KvType type = requested.value_or(kDefaultKvType);
  const std::string sizes = format_bytes(kv_cache_bytes(fp.config, ctx, type)) + " at ctx " + std::to_string(ctx) +
                            (type == KvType::f32 ? "" : " (f32: " + format_bytes(kv_cache_bytes(fp.config, ctx, KvType::f32)) + ")");
  if (requested) return {type, "--kv-type " + std::string(kv_type_name(type)) + ": KV cache " + sizes};
  return {type, "f16 by default (as llama.cpp): KV cache " + sizes +
                    ", and half the bytes a decoded token reads at depth; --kv-type f32 keeps K and V exact"};
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

std::optional<RoutingConcentration> routing_concentration(const ModelFootprint& fp,
                                                          const experts::UsageHistory* history) {
  const int layers = static_cast<int>(fp.moe_layer_count());
  if (!history || history->key().n_experts != fp.n_experts || history->key().n_layers != layers ||
      history->total_tokens() <= 0) {
    return std::nullopt;
  }
  RoutingConcentration out;
  out.tokens = history->total_tokens();
  for (int l = 0; l < layers; ++l) {
    std::vector<double> counts(history->layer_counts(l).begin(), history->layer_counts(l).end());
    std::sort(counts.begin(), counts.end(), std::greater<>());
    double total = 0;
    for (double c : counts) total += c;
    std::vector<double> mass(counts.size() + 1, 0.0);
    for (std::size_t i = 0; i < counts.size(); ++i) {
      mass[i + 1] = total > 0 ? mass[i] + counts[i] / total : static_cast<double>(i + 1) / counts.size();
    }
    out.top_mass.push_back(std::move(mass));
  }
  return out;
}

int decide_history_pins(const ModelFootprint& fp, int cap, int most, const RoutingConcentration& routing,
                        std::string& reason) {
  const int n = fp.n_experts;
  auto hit = [&](int p) {
    double sum = 0;
    for (const auto& mass : routing.top_mass) {
      const double rest = n - p > 0 ? std::min(1.0, static_cast<double>(cap - p) / (n - p)) : 1.0;
      sum += mass[static_cast<std::size_t>(p)] + (1.0 - mass[static_cast<std::size_t>(p)]) * rest;
    }
    return routing.top_mass.empty() ? 0.0 : sum / routing.top_mass.size();
  };
  const double none = hit(0);
  int best = 0;
  double best_hit = none;
  for (int p = 1; p <= std::min({most, cap, n}); ++p) {
    if (const double h = hit(p); h > best_hit + 1e-12) best = p, best_hit = h;
  }
  char text[200];
  if (best_hit < none + 0.01) {
    std::snprintf(text, sizeof text, "no pins: the usage history (%.0f tokens) predicts %.1f%% hits with pins, %.1f%% with "
                  "LRU alone (pins must gain a point)", routing.tokens, best_hit * 100, none * 100);
    reason = text;
    return 0;
  }
  std::snprintf(text, sizeof text, "the usage history (%.0f tokens) predicts %.1f%% hits with %d pins vs %.1f%% with LRU alone",
                routing.tokens, best_hit * 100, best, none * 100);
  reason = text;
  return best;
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
  if (cap >= fp.n_experts && pins > 0) {  // a pin keeps an expert from eviction, and nothing is evicted
    out.round_tokens = unpinned_round;
    out.reason = "no pins: every expert is resident (cap " + std::to_string(cap) + " of " + std::to_string(fp.n_experts) +
                 "), so none is ever evicted";
    return out;
  }
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
