#include "coli/planner/gpu_tiers.h"

#include <algorithm>
#include <numeric>

#include "coli/planner/deciders.h"

namespace coli::planner {
namespace {

using u64 = std::uint64_t;
constexpr u64 kMiB = 1024 * 1024;
// VRAM kept free beside the tier: the driver's own allocations, pipeline
// caches and fragmentation of many buffers. 5% of the budget, at least 256 MiB.
constexpr double kVramReserveShare = 0.05;
constexpr u64 kVramReserveMinimum = 256 * kMiB;

std::string n(u64 value) { return std::to_string(value); }

// The device-local heap's budget (VK_EXT_memory_budget, else its size).
std::pair<u64, std::string> vram_budget(const VulkanDevice& device) {
  u64 best = 0;
  std::string source;
  for (std::size_t i = 0; i < device.heaps.size(); ++i) {
    const VulkanMemoryHeap& heap = device.heaps[i];
    if (!heap.device_local) continue;
    const u64 bytes = heap.budget_bytes.value_or(heap.size_bytes);
    if (bytes > best) {
      best = bytes;
      source = device.name + " heap " + n(i) + (heap.budget_bytes ? " budget" : " size (no memory budget extension)");
    }
  }
  return {best, source};
}

struct Ranked {
  double share;  // of its layer's expert reads
  int layer, expert;
};

// Every (layer, expert) by expected reads per byte. Records all have one
// stride, so that is the routing share; ties (uniform routing) go round-robin
// over layers so every layer gets the same number of slots.
std::vector<Ranked> rank_experts(const ModelFootprint& fp, const experts::UsageHistory* history) {
  const int layers = static_cast<int>(fp.moe_layer_count()), experts = fp.n_experts;
  const bool usable = history && history->key().n_experts == experts && history->key().n_layers == layers &&
                      history->total_tokens() > 0;
  std::vector<Ranked> all;
  all.reserve(static_cast<std::size_t>(layers) * experts);
  for (int l = 0; l < layers; ++l) {
    std::vector<double> counts(static_cast<std::size_t>(experts), 1.0);
    if (usable) counts.assign(history->layer_counts(l).begin(), history->layer_counts(l).end());
    double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (total <= 0) counts.assign(counts.size(), 1.0), total = experts;
    std::vector<int> order(static_cast<std::size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return counts[a] > counts[b]; });
    for (int rank = 0; rank < experts; ++rank) all.push_back({counts[order[rank]] / total, l, rank});
  }
  std::stable_sort(all.begin(), all.end(), [](const Ranked& a, const Ranked& b) {
    if (a.share != b.share) return a.share > b.share;
    return a.expert != b.expert ? a.expert < b.expert : a.layer < b.layer;
  });
  return all;
}

// Fills the tier's slots, share and lines for `slots` VRAM slots in all.
void place(GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request, int slots) {
  const BackendMemory& b = request.backend;
  const u64 stride = fp.expert().record_stride;
  const int layers = static_cast<int>(fp.moe_layer_count());
  tier.vram_experts.assign(static_cast<std::size_t>(layers), 0);
  double share = 0;
  const auto ranked = rank_experts(fp, request.history);
  for (int i = 0; i < slots && i < static_cast<int>(ranked.size()); ++i) {
    ++tier.vram_experts[static_cast<std::size_t>(ranked[i].layer)];
    share += ranked[i].share;
  }
  tier.vram_share = layers > 0 ? share / layers : 0;
  const bool history = request.history && request.history->total_tokens() > 0;
  tier.share_inputs = std::string(history ? "usage history" : "uniform routing") + ": " + n(static_cast<u64>(slots)) +
                      " experts ranked by expected reads per byte serve " + std::to_string(tier.vram_share * 100).substr(0, 5) +
                      "% of expert reads";
  const u64 placed = static_cast<u64>(slots);
  const auto vram_slot = static_cast<u64>(static_cast<double>(stride) * b.vram_bytes_per_record_byte);
  tier.lines.clear();
  tier.lines.push_back({"expert tier: VRAM slots", Tier::vram, placed * vram_slot,
                        n(placed) + " slots x " + n(vram_slot) + " B (" + b.name + " keeps records packed: x" +
                            std::to_string(b.vram_bytes_per_record_byte).substr(0, 4) + " of the " + n(stride) +
                            " B stride)"});
  const u64 round_bytes = 64 * static_cast<u64>(fp.top_k) *
                          (fp.config.hidden_size + 2 * fp.config.moe_intermediate_size) * 4;
  tier.lines.push_back({"GPU activations", Tier::vram, round_bytes,
                        "64 round tokens x top_k " + n(static_cast<u64>(fp.top_k)) +
                            " x (hidden + 2 x width) x 4 B"});
  tier.lines.push_back({"VRAM reserve", Tier::vram, tier.vram_reserve_bytes,
                        "5% of the VRAM budget, at least 256 MiB (driver allocations, fragmentation)"});
  for (const HostCopy& copy : b.host_copies) {
    const auto bytes = static_cast<u64>(static_cast<double>(placed * stride) * copy.bytes_per_record_byte);
    tier.lines.push_back({"GPU host copy: " + copy.name, Tier::ram, bytes,
                          n(placed) + " VRAM slots x " + n(stride) + " B x " +
                              std::to_string(copy.bytes_per_record_byte).substr(0, 4) + " (" + b.name +
                              " keeps it in RAM per VRAM slot)"});
  }
  tier.lines.push_back({"GPU upload staging", Tier::ram, static_cast<u64>(b.staging_slots) * stride,
                        n(static_cast<u64>(b.staging_slots)) + " host-visible slots x " + n(stride) + " B stride"});
  tier.lines.push_back({"GPU driver (host)", Tier::ram, b.driver_host_bytes, b.driver_host_basis});
}

}  // namespace

int GpuTier::vram_slots() const { return std::accumulate(vram_experts.begin(), vram_experts.end(), 0); }

Result<GpuTier> decide_gpu_tier(const DeviceProfile& profile, const ModelFootprint& fp, const GpuTierRequest& request) {
  GpuTier tier;
  tier.backend = "cpu";
  auto device = decide_gpu(profile, fp.config, fp.expert_format, request.gpu, request.force_variant);
  if (!device) return device.error();
  tier.device = *device;
  if (request.vram && request.gpu == "none") return make_error("--vram needs a GPU: drop --gpu none or --vram");
  if (tier.device.gpu.empty()) {
    tier.reason = tier.device.reason;
    return tier;
  }
  // auto chooses only what this build's engine can run; an explicit --gpu N
  // plans the tier as a preview that `coli run` refuses with the reason.
  if (request.gpu == "auto" && !request.backend.engine_runs_experts) {
    tier.reason = "auto: CPU; " + tier.device.gpu + " fits the " + request.backend.name +
                  " shaders, but this build's engine computes experts on the CPU only (--gpu N previews a VRAM tier)";
    tier.device = GpuDecision{"", {}, tier.reason};
    return tier;
  }
  tier.backend = request.backend.name;
  tier.engine_runs_it = request.backend.engine_runs_experts;
  const VulkanDevice* vk = nullptr;
  for (const VulkanDevice& d : profile.gpus.vulkan) {
    if (d.name == tier.device.gpu) vk = &d;
  }
  auto [budget, source] = vk ? vram_budget(*vk) : std::pair<u64, std::string>{0, ""};
  if (budget == 0) return make_error(tier.device.gpu + " reports no device-local memory: use --gpu none");
  if (request.vram) {
    if (*request.vram > budget) {
      return make_error("--vram " + format_bytes(*request.vram) + " exceeds " + format_bytes(budget) + " (" + source +
                        "): use --vram " + format_bytes(budget) + " or less");
    }
    budget = *request.vram;
    source = "--vram " + format_bytes(*request.vram);
  }
  tier.vram_headroom_bytes = budget;
  tier.vram_headroom_source = source;
  tier.vram_reserve_bytes = std::max(static_cast<u64>(static_cast<double>(budget) * kVramReserveShare), kVramReserveMinimum);
  place(tier, fp, request, 0);
  const u64 fixed = tier.lines[1].bytes + tier.vram_reserve_bytes;  // activations + reserve
  const auto vram_slot =
      static_cast<u64>(static_cast<double>(fp.expert().record_stride) * request.backend.vram_bytes_per_record_byte);
  const u64 all = fp.moe_layer_count() * static_cast<u64>(fp.n_experts);
  const u64 fits = budget > fixed && vram_slot > 0 ? (budget - fixed) / vram_slot : 0;
  if (fits == 0) {
    return make_error(tier.device.gpu + ": " + format_bytes(budget) + " of VRAM (" + source + ") holds no expert of " +
                      format_bytes(vram_slot) + " beside its " + format_bytes(fixed) + " reserve: use --gpu none");
  }
  place(tier, fp, request, static_cast<int>(std::min(fits, all)));
  tier.reason = (request.gpu == "auto" ? "auto: " : "--gpu " + request.gpu + ": ") + tier.device.gpu + " (" +
                request.backend.name + "), " + n(static_cast<u64>(tier.vram_slots())) + " of " + n(all) +
                " experts in VRAM (" + source + "); " + tier.share_inputs;
  if (!tier.engine_runs_it) tier.reason += "; PREVIEW: this build's engine computes experts on the CPU only";
  return tier;
}

GpuTier shrink_gpu_tier(const GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request, int slots) {
  GpuTier out = tier;
  place(out, fp, request, std::max(0, slots));
  return out;
}

}  // namespace coli::planner
