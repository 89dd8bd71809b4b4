#include "coli/planner/expert_parallel.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "coli/base/text.h"
#include "coli/planner/deciders.h"  // format_bytes as the planner writes sizes

namespace coli::planner {
namespace {

using u64 = std::uint64_t;

std::string n(u64 value) { return std::to_string(value); }

std::string ordinal_list(const std::vector<int>& ordinals) {
  std::string out;
  for (int o : ordinals) out += (out.empty() ? "" : ",") + std::to_string(o);
  return out;
}

u64 vram_of(const std::vector<MemoryLine>& lines) {
  u64 total = 0;
  for (const MemoryLine& line : lines) total += line.tier == Tier::vram ? line.bytes : 0;
  return total;
}

// "GPU dense weights" -> "GPU 3 dense weights", "VRAM reserve" -> "GPU 3 VRAM reserve":
// one line per GPU in the plan's memory, each naming its GPU.
std::vector<MemoryLine> name_lines(const std::vector<MemoryLine>& lines, int ordinal) {
  std::vector<MemoryLine> out;
  const std::string prefix = "GPU " + std::to_string(ordinal) + " ";
  for (MemoryLine line : lines) {
    line.component = prefix + (line.component.rfind("GPU ", 0) == 0 ? line.component.substr(4) : line.component);
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace

u64 GpuShare::vram_bytes() const { return vram_of(lines); }

int GpuShare::expert_count() const { return std::accumulate(experts.begin(), experts.end(), 0); }

Result<std::vector<int>> choose_expert_parallel_gpus(const DeviceProfile& profile, const ModelFootprint& fp,
                                                     const GpuListRequest& request, std::string& reason) {
  const std::vector<CudaDevice>& devices = profile.gpus.cuda;
  std::vector<int> all(devices.size());
  std::iota(all.begin(), all.end(), 0);
  reason.clear();
  if (request.gpus == "auto") {
    if (request.backend != "cuda" || request.gpu != "auto" || devices.size() < 2) return std::vector<int>{};
    if (!request.engine_runs || fp.config.planning_only()) {
      reason = "auto: one GPU of " + std::to_string(devices.size()) + " CUDA devices; " +
               (fp.config.planning_only() ? "the CUDA decoder does not run " + fp.config.model_type
                                          : std::string("this build has no CUDA decoder (built without nvcc)")) +
               " (--gpus all previews experts spread over every GPU)";
      return std::vector<int>{};
    }
    reason = "auto: every CUDA device (" + std::to_string(devices.size()) + ")";
    return all;
  }
  if (request.gpu != "auto") {
    return make_error("--gpu " + request.gpu + " picks one device and --gpus " + request.gpus + " a set: give one of them");
  }
  if (request.backend != "cuda") {
    return make_error("--gpus " + request.gpus + " spreads experts over CUDA devices; the " + request.backend +
                      " backend runs one GPU: use --gpu-backend cuda, or --gpu N");
  }
  if (request.gpus == "all") {
    if (devices.empty()) return make_error("--gpus all: the profile lists no CUDA device (" + profile.gpus.cuda_status + ")");
    reason = "--gpus all: every CUDA device (" + std::to_string(devices.size()) + ")";
    return all;
  }
  std::vector<int> chosen;
  for (const std::string_view view : split(request.gpus, ',')) {
    const std::string item(view);
    const auto parsed = parse_int(item);
    if (!parsed || *parsed < 0 || static_cast<std::size_t>(*parsed) >= devices.size()) {
      return make_error("--gpus " + request.gpus + ": '" + item + "' is not a CUDA ordinal of the profile's " +
                        std::to_string(devices.size()) + " device(s) (" + profile.gpus.cuda_status +
                        "); use all or a list such as 0,1");
    }
    if (std::find(chosen.begin(), chosen.end(), *parsed) != chosen.end()) {
      return make_error("--gpus " + request.gpus + " names GPU " + item + " twice: name each once");
    }
    chosen.push_back(static_cast<int>(*parsed));
  }
  reason = "--gpus " + request.gpus;
  return chosen;
}

std::vector<std::vector<double>> expert_heat(const ModelFootprint& fp, const experts::UsageHistory* history) {
  const int layers = static_cast<int>(fp.moe_layer_count()), experts = fp.n_experts;
  const bool usable = history && history->key().n_experts == experts && history->key().n_layers == layers &&
                      history->total_tokens() > 0;
  std::vector<std::vector<double>> heat;
  for (int l = 0; l < layers; ++l) {
    std::vector<double> counts(static_cast<std::size_t>(experts), 1.0);
    if (usable) counts.assign(history->layer_counts(l).begin(), history->layer_counts(l).end());
    double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (total <= 0) counts.assign(counts.size(), 1.0), total = experts;
    for (double& c : counts) c /= total;
    heat.push_back(std::move(counts));
  }
  return heat;
}

std::vector<std::vector<int>> place_experts(const std::vector<std::vector<double>>& heat, const std::vector<int>& ordinals,
                                            const std::vector<int>& capacity) {
  struct Item {
    double heat;
    int layer, expert;
  };
  std::vector<Item> items;
  std::vector<std::vector<int>> out;
  for (std::size_t l = 0; l < heat.size(); ++l) {
    out.emplace_back(heat[l].size(), -1);
    for (std::size_t e = 0; e < heat[l].size(); ++e) items.push_back({heat[l][e], static_cast<int>(l), static_cast<int>(e)});
  }
  // Hottest first; ties (uniform routing) by expert, then layer, so every
  // layer gets its share before any gets more.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.heat != b.heat) return a.heat > b.heat;
    return a.expert != b.expert ? a.expert < b.expert : a.layer < b.layer;
  });
  const std::size_t gpus = std::min(ordinals.size(), capacity.size());
  std::vector<int> left(capacity.begin(), capacity.begin() + static_cast<std::ptrdiff_t>(gpus));
  std::vector<std::vector<double>> load(gpus, std::vector<double>(heat.size(), 0.0));
  for (const Item& item : items) {
    int best = -1;
    for (std::size_t g = 0; g < gpus; ++g) {
      if (left[g] <= 0) continue;
      if (best < 0) {
        best = static_cast<int>(g);
        continue;
      }
      const auto b = static_cast<std::size_t>(best);
      const double lg = load[g][static_cast<std::size_t>(item.layer)], lb = load[b][static_cast<std::size_t>(item.layer)];
      // The least loaded in this layer; then the one with the most room left
      // for its size (unequal VRAM fills in proportion).
      const double rg = static_cast<double>(left[g]) / capacity[g], rb = static_cast<double>(left[b]) / capacity[b];
      if (lg < lb - 1e-12 || (std::abs(lg - lb) <= 1e-12 && rg > rb + 1e-12)) best = static_cast<int>(g);
    }
    if (best < 0) break;  // every GPU full: the rest, colder, stay on the host
    const auto g = static_cast<std::size_t>(best);
    --left[g];
    load[g][static_cast<std::size_t>(item.layer)] += item.heat;
    out[static_cast<std::size_t>(item.layer)][static_cast<std::size_t>(item.expert)] = ordinals[g];
  }
  return out;
}

namespace {

const GpuLink* find_link(const GpuFacts& gpus, int a, int b) {
  for (const GpuLink& link : gpus.links) {
    if ((link.a == a && link.b == b) || (link.a == b && link.b == a)) return &link;
  }
  return nullptr;
}

struct PairRate {
  double gbs = 0;
  std::string basis;
};

// One pair of the ring: the measured peer copy, else the path's
// specification, else (no entry) the host PCIe path both GPUs share.
Result<PairRate> pair_rate(const GpuFacts& gpus, int a, int b) {
  const std::string pair = "GPU " + std::to_string(a) + "-" + std::to_string(b);
  if (const GpuLink* link = find_link(gpus, a, b)) {
    const std::string path = link->path + (link->nvlinks > 0 ? " x" + std::to_string(link->nvlinks) : "");
    if (link->measured_gbs > 0) {
      return PairRate{link->measured_gbs, pair + " " + path + ": measured peer copy " + format_fixed(link->measured_gbs, 1) +
                                              " GB/s (" + link->source + ")"};
    }
    if (link->spec_gbs > 0) {
      return PairRate{link->spec_gbs, pair + " " + path + ": specified " + format_fixed(link->spec_gbs, 1) +
                                          " GB/s, not measured (" + link->source + ")"};
    }
  }
  const double host = std::min(gpus.cuda[static_cast<std::size_t>(a)].host_link_gbs,
                               gpus.cuda[static_cast<std::size_t>(b)].host_link_gbs);
  if (host <= 0) {
    return make_error("expert parallel: the profile has no link between GPU " + std::to_string(a) + " and GPU " +
                      std::to_string(b) + " (gpus.links) and no host link speed for them (gpus.cuda[].host_link_gbs) "
                      "to price the all-reduce: probe that machine again with coli-probe, or leave one out with --gpus");
  }
  return PairRate{host, pair + ": no link entry in the profile, priced over the host PCIe path (the slower host link " +
                            format_fixed(host, 1) + " GB/s)"};
}

}  // namespace

Result<ExchangeTraffic> price_exchange(const GpuFacts& gpus, const std::vector<int>& ordinals, const ModelFootprint& fp,
                                       int batch_tokens) {
  ExchangeTraffic x;
  x.gpus = static_cast<int>(ordinals.size());
  x.layers = static_cast<int>(fp.moe_layer_count());
  x.batch_tokens = std::max(1, batch_tokens);
  if (x.gpus < 2) return make_error("an all-reduce needs 2 or more GPUs, got " + std::to_string(x.gpus));
  for (int o : ordinals) {
    if (o < 0 || static_cast<std::size_t>(o) >= gpus.cuda.size()) {
      return make_error("GPU " + std::to_string(o) + " is not among the profile's " + std::to_string(gpus.cuda.size()) +
                        " CUDA devices");
    }
  }
  x.message_bytes = fp.config.hidden_size * sizeof(float);
  const double share = 2.0 * (x.gpus - 1) / x.gpus;  // NCCL ring: reduce-scatter + all-gather
  const double per_layer = share * static_cast<double>(x.message_bytes);
  x.bytes_per_token = static_cast<u64>(std::llround(per_layer * x.layers));
  // The ring in the order given; two GPUs make one pair.
  const std::size_t pairs = x.gpus == 2 ? 1 : ordinals.size();
  for (std::size_t i = 0; i < pairs; ++i) {
    auto rate = pair_rate(gpus, ordinals[i], ordinals[(i + 1) % ordinals.size()]);
    if (!rate) return rate.error();
    if (x.ring_gbs == 0 || rate->gbs < x.ring_gbs) x.ring_gbs = rate->gbs, x.slowest_link = rate->basis;
  }
  x.latency_s = kAllReduceLatencySeconds;
  x.latency_source = kAllReduceLatencySource;
  const double wire_s = per_layer / (x.ring_gbs * 1e9);
  x.decode_seconds = x.layers * (x.latency_s + wire_s);
  x.prefill_seconds = x.layers * (x.latency_s / x.batch_tokens + wire_s);
  x.inputs = n(static_cast<u64>(x.layers)) + " MoE layers x one all-reduce of hidden " + n(fp.config.hidden_size) +
             " x 4 B = " + n(x.message_bytes) + " B per token; the ring sends 2(N-1)/N = " + format_fixed(share, 3) +
             " of it per GPU: " + format_bytes(x.bytes_per_token) + " per token over the slowest link, " + x.slowest_link +
             "; + " + x.latency_source + " (per token in decode, per batch of " + n(static_cast<u64>(x.batch_tokens)) +
             " in prefill)";
  return x;
}

namespace {

// The refusal when one GPU cannot hold what every GPU holds and one expert
// (the engine runs no rank without an expert).
Error dense_does_not_fit(const GpuTier& tier, const std::vector<int>& ordinals, u64 fixed, u64 slot) {
  std::string items;
  for (const MemoryLine& line : tier.lines) {
    if (line.tier != Tier::vram || line.component == "expert tier: VRAM slots") continue;
    items += (items.empty() ? "" : " + ") + line.component + " " + format_bytes(line.bytes);
  }
  return make_error("expert parallel over GPUs " + ordinal_list(ordinals) +
                    ": every GPU holds the dense weights (it runs attention and the router for every token, so only the "
                    "experts' outputs cross the links), and on " + tier.device.gpu.describe() + " " + items + " = " +
                    format_bytes(fixed) + " and one expert of " + format_bytes(slot) + " exceed its " +
                    format_bytes(tier.vram_headroom_bytes) + " (" +
                    tier.vram_headroom_source + "): use --dense q8_row or q4_g64, a smaller --ctx or --gpu-batch, or "
                    "leave that GPU out with --gpus");
}

struct Sized {
  std::vector<GpuTier> empty;  // per GPU, no expert yet
  std::vector<int> capacity;   // expert slots beside its fixed lines
};

// Rank 0 computes the experts no GPU holds (the engine's hybrid path:
// copied up through its staging slab, or on its host's CPUs); the other
// ranks stage nothing.
GpuTierRequest rank_request(const GpuTierRequest& request, std::size_t rank, int host_experts) {
  GpuTierRequest r = request;
  r.staged_experts = rank == 0 ? host_experts : 0;
  return r;
}

Result<Sized> size_gpus(const DeviceProfile& profile, const ModelFootprint& fp, const GpuTierRequest& request,
                        const std::vector<int>& ordinals, int host_experts) {
  Sized out;
  const auto slot = static_cast<u64>(static_cast<double>(fp.expert().record_stride) * request.backend.vram_bytes_per_record_byte);
  for (std::size_t g = 0; g < ordinals.size(); ++g) {
    const int ordinal = ordinals[g];
    auto tier = empty_cuda_tier(profile, fp, rank_request(request, g, host_experts), ordinal);
    if (!tier) return tier.error();
    const u64 fixed = vram_of(tier->lines);
    if (fixed + slot > tier->vram_headroom_bytes) return dense_does_not_fit(*tier, ordinals, fixed, slot);
    out.capacity.push_back(slot > 0 ? static_cast<int>(std::min<u64>((tier->vram_headroom_bytes - fixed) / slot, 1u << 30)) : 0);
    out.empty.push_back(std::move(*tier));
  }
  return out;
}

int most_host_experts(const std::vector<std::vector<int>>& placement) {
  int most = 0;
  for (const auto& layer : placement) most = std::max(most, static_cast<int>(std::count(layer.begin(), layer.end(), -1)));
  return most;
}

std::vector<int> per_layer_on(const std::vector<std::vector<int>>& placement, int ordinal) {
  std::vector<int> out;
  for (const auto& layer : placement) out.push_back(static_cast<int>(std::count(layer.begin(), layer.end(), ordinal)));
  return out;
}

GpuShare share_of(const DeviceProfile& profile, const GpuTier& tier, int ordinal,
                  const std::vector<std::vector<int>>& placement, const std::vector<std::vector<double>>& heat) {
  const CudaDevice& device = profile.gpus.cuda[static_cast<std::size_t>(ordinal)];
  GpuShare s;
  s.ordinal = ordinal;
  s.uuid = device.uuid;
  s.name = device.name;
  s.budget_bytes = tier.vram_headroom_bytes;
  s.budget_source = tier.vram_headroom_source;
  s.load_buffer_bytes = tier.load_buffer_bytes;
  s.experts = tier.vram_experts;
  s.numa_node = device.numa_node;
  s.local_cpus = device.local_cpus;
  s.lines = name_lines(tier.lines, ordinal);
  double sum = 0;
  for (std::size_t l = 0; l < placement.size(); ++l) {
    double layer = 0;
    for (std::size_t e = 0; e < placement[l].size(); ++e) layer += placement[l][e] == ordinal ? heat[l][e] : 0.0;
    sum += layer;
    s.peak_layer_share = std::max(s.peak_layer_share, layer);
  }
  s.load_share = placement.empty() ? 0 : sum / static_cast<double>(placement.size());
  const auto [fewest, most] = std::minmax_element(s.experts.begin(), s.experts.end());
  s.reason = tier.device.gpu.describe() + ": " + n(static_cast<u64>(s.expert_count())) + " experts (" +
             (s.experts.empty() ? "0" : std::to_string(*fewest) + ".." + std::to_string(*most)) + " per layer) serving " +
             format_fixed(s.load_share * 100, 1) + "% of expert reads (at most " + format_fixed(s.peak_layer_share * 100, 1) +
             "% of a layer's), VRAM " + format_bytes(s.vram_bytes()) + " of " + format_bytes(s.budget_bytes) + " (" +
             s.budget_source + "); its host thread on " +
             (s.numa_node >= 0 ? "NUMA node " + std::to_string(s.numa_node) : std::string("an unknown NUMA node")) +
             (s.local_cpus.empty() ? " (no local CPUs in the profile: not bound)" : ", CPUs " + s.local_cpus.to_list());
  return s;
}

}  // namespace

std::vector<int> gpus_that_hold_the_dense_copy(const DeviceProfile& profile, const ModelFootprint& fp,
                                               const GpuTierRequest& request, const std::vector<int>& ordinals,
                                               std::string& left_out) {
  std::vector<int> kept;
  left_out.clear();
  const auto slot = static_cast<u64>(static_cast<double>(fp.expert().record_stride) * request.backend.vram_bytes_per_record_byte);
  GpuTierRequest r = request;
  r.staged_experts = 0;
  for (int ordinal : ordinals) {
    auto tier = empty_cuda_tier(profile, fp, r, ordinal);
    const u64 fixed = tier ? vram_of(tier->lines) : 0;
    if (tier && fixed + slot <= tier->vram_headroom_bytes) {
      kept.push_back(ordinal);
      continue;
    }
    left_out += (left_out.empty() ? "" : "; ") + std::string("GPU ") + std::to_string(ordinal) + " " +
                (tier ? format_bytes(tier->vram_headroom_bytes) + " holds no expert beside the dense copy, KV, "
                                                                  "activations and reserve (" + format_bytes(fixed) + ")"
                      : tier.error().message);
  }
  return kept;
}

Result<ExpertParallelPlan> decide_expert_parallel(const DeviceProfile& profile, const ModelFootprint& fp,
                                                  const GpuTierRequest& request, const std::vector<int>& ordinals) {
  if (ordinals.size() < 2) return make_error("expert parallel needs 2 or more GPUs, got " + std::to_string(ordinals.size()));
  const std::vector<std::vector<double>> heat = expert_heat(fp, request.history);
  int host = 0;  // nothing on the host unless the GPUs cannot hold every expert
  auto sized = size_gpus(profile, fp, request, ordinals, host);
  if (!sized) return sized.error();
  std::vector<std::vector<int>> placement = place_experts(heat, ordinals, sized->capacity);
  // Experts left on the host: rank 0 keeps a staging slab for them, which
  // takes room from its experts; size again once with that slab.
  if (most_host_experts(placement) > 0) {
    host = most_host_experts(placement);
    sized = size_gpus(profile, fp, request, ordinals, host);
    if (!sized) return sized.error();
    placement = place_experts(heat, ordinals, sized->capacity);
    host = std::max(host, most_host_experts(placement));
  }
  // Large-page rounding of the slabs per layer and the slab above: where a
  // GPU's exact lines pass its budget, it gives up its coldest slot.
  std::vector<GpuTier> tiers(ordinals.size());
  for (int round = 0; round < 64; ++round) {
    bool over = false;
    for (std::size_t g = 0; g < ordinals.size(); ++g) {
      tiers[g] = gpu_tier_with_layers(sized->empty[g], fp, rank_request(request, g, host), per_layer_on(placement, ordinals[g]));
      if (vram_of(tiers[g].lines) > tiers[g].vram_headroom_bytes && sized->capacity[g] > 0) --sized->capacity[g], over = true;
    }
    if (!over) break;
    placement = place_experts(heat, ordinals, sized->capacity);
    host = std::max(host, most_host_experts(placement));
  }
  ExpertParallelPlan ep;
  for (std::size_t g = 0; g < ordinals.size(); ++g) {
    if (vram_of(tiers[g].lines) > tiers[g].vram_headroom_bytes) {
      return dense_does_not_fit(sized->empty[g], ordinals, vram_of(sized->empty[g].lines), fp.expert().record_stride);
    }
    ep.gpus.push_back(share_of(profile, tiers[g], ordinals[g], placement, heat));
    ep.gpu_share += ep.gpus.back().load_share;
  }
  ep.gpu_share = std::min(1.0, ep.gpu_share);  // the shares summed can round past 1 (a plan file refuses that)
  ep.expert_gpu = std::move(placement);
  auto exchange = price_exchange(profile.gpus, ordinals, fp, tiers.front().batch_tokens);
  if (!exchange) return exchange.error();
  ep.exchange = std::move(*exchange);
  const bool history = request.history && request.history->total_tokens() > 0;
  const u64 all = fp.moe_layer_count() * static_cast<u64>(fp.n_experts);
  u64 placed = 0;
  for (const GpuShare& s : ep.gpus) placed += static_cast<u64>(s.expert_count());
  ep.share_inputs = std::string(history ? "usage history" : "uniform routing") + ": the " + n(placed) + " hottest of " +
                    n(all) + " experts on " + std::to_string(ordinals.size()) + " GPUs serve " +
                    format_fixed(ep.gpu_share * 100, 1) + "% of expert reads";
  ep.reason = "expert parallel over GPUs " + ordinal_list(ordinals) + " (NCCL ranks in this order): each holds the dense "
              "weights and runs attention and the router for every token, so only the experts' outputs cross the "
              "links (one all-reduce per MoE layer); experts by usage heat and each GPU's VRAM, balancing every "
              "layer's expected load; " + ep.share_inputs +
              (placed < all ? "; the other " + n(all - placed) + " stay on the host tiers" : std::string());
  return ep;
}

GpuTier expert_parallel_tier(const DeviceProfile& profile, const ExpertParallelPlan& ep, bool engine_runs_it) {
  GpuTier tier;
  if (!ep.active()) return tier;  // no GPU: the CPU tier
  const int first = ep.gpus.front().ordinal;
  const GpuIdentity id = cuda_identity(profile.gpus, first);
  tier.device = GpuDecision{id, {}, ep.reason};
  tier.backend = "cuda";
  tier.engine_runs_it = engine_runs_it;
  tier.whole_decoder = true;
  tier.device_type = "discrete";
  tier.vendor_id = 0x10de;
  tier.batch_tokens = ep.exchange.batch_tokens;
  tier.vram_experts.assign(ep.expert_gpu.size(), 0);
  std::vector<int> ordinals;
  for (const GpuShare& s : ep.gpus) {
    ordinals.push_back(s.ordinal);
    tier.vram_headroom_bytes += s.budget_bytes;
    tier.load_buffer_bytes += s.load_buffer_bytes;
    for (const MemoryLine& line : s.lines) {
      if (line.component.find("VRAM reserve") != std::string::npos) tier.vram_reserve_bytes += line.bytes;
    }
    for (std::size_t l = 0; l < s.experts.size() && l < tier.vram_experts.size(); ++l) tier.vram_experts[l] += s.experts[l];
    tier.lines.insert(tier.lines.end(), s.lines.begin(), s.lines.end());
  }
  tier.vram_headroom_source = std::to_string(ep.gpus.size()) + " CUDA devices (" + ordinal_list(ordinals) +
                              "): their budgets summed; each GPU's own holds its lines";
  tier.vram_share = ep.gpu_share;
  tier.share_inputs = ep.share_inputs;
  tier.reason = ep.reason + (engine_runs_it ? "" : "; PREVIEW: this build's engine does not run it (no CUDA decoder, or a model it does not run)");
  return tier;
}

}  // namespace coli::planner
