#include "coli/planner/gpu_tiers.h"

#include <algorithm>
#include <numeric>

#include "coli/base/text.h"
#include "coli/planner/deciders.h"
#include "coli/shaders/decoder_modules.h"
#include "cuda/cuda_layout.h"
#include "vulkan/decoder/decoder_layout.h"

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

// One layer's experts, most read first (ties, and no usable history, by id),
// with their read counts.
std::vector<int> layer_order(const experts::UsageHistory* history, int layers, int experts, int layer,
                             std::vector<double>& counts) {
  const bool usable = history && history->key().n_experts == experts && history->key().n_layers == layers &&
                      history->total_tokens() > 0;
  counts.assign(static_cast<std::size_t>(experts), 1.0);
  if (usable) counts.assign(history->layer_counts(layer).begin(), history->layer_counts(layer).end());
  std::vector<int> order(static_cast<std::size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return counts[a] > counts[b]; });
  return order;
}

// Every (layer, expert) by expected reads per byte. Records all have one
// stride, so that is the routing share; ties (uniform routing) go round-robin
// over layers so every layer gets the same number of slots.
std::vector<Ranked> rank_experts(const ModelFootprint& fp, const experts::UsageHistory* history) {
  const int layers = static_cast<int>(fp.moe_layer_count()), experts = fp.n_experts;
  std::vector<Ranked> all;
  all.reserve(static_cast<std::size_t>(layers) * experts);
  for (int l = 0; l < layers; ++l) {
    std::vector<double> counts;
    const std::vector<int> order = layer_order(history, layers, experts, l, counts);
    double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (total <= 0) counts.assign(counts.size(), 1.0), total = experts;
    for (int rank = 0; rank < experts; ++rank) all.push_back({counts[order[rank]] / total, l, rank});
  }
  std::stable_sort(all.begin(), all.end(), [](const Ranked& a, const Ranked& b) {
    if (a.share != b.share) return a.share > b.share;
    return a.expert != b.expert ? a.expert < b.expert : a.layer < b.layer;
  });
  return all;
}

// What the whole-decoder backend holds beside the expert slots: dense
// weights, KV cache and activations in VRAM; mapped buffers in RAM.
// The CUDA decoder's own layout (engine/cuda/cuda_layout.h).
void add_cuda_decoder_lines(GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request) {
  const model::ModelConfig& c = fp.config;
  const u64 moe_layers = fp.moe_layer_count(), ctx = static_cast<u64>(request.ctx);
  const cuda::StepBufferBytes step = cuda::step_buffer_bytes(c, moe_layers, c.vocab_size, ctx);
  const u64 batch_tokens = static_cast<u64>(tier.batch_tokens), stride = fp.expert().record_stride;
  const int fewest_slots = tier.vram_experts.empty() ? fp.n_experts : *std::min_element(tier.vram_experts.begin(), tier.vram_experts.end());
  // A hybrid batch stages the host's experts it copies up: at most the widest layer's host share per pass
  // (expert parallel: the host tier's, not the experts the other GPUs hold).
  const int host_experts = request.staged_experts.value_or(fp.n_experts - fewest_slots);
  const u64 staging = host_experts > 0 ? cuda::staging_records(static_cast<u64>(host_experts), stride) : 0;
  const u64 pinned = cuda::pinned_bytes(c, moe_layers, c.vocab_size, batch_tokens) +
                     cuda::hybrid_batch_pinned_bytes(c, batch_tokens, staging, stride);
  tier.lines.push_back({"GPU dense weights", Tier::vram, fp.gpu_dense_bytes,
                        n(fp.dense_tensor_count) + " dense tensors but the embedding, vectors as f32, 256-aligned"});
  tier.lines.push_back({"GPU KV cache", Tier::vram, step.kv,
                        n(c.num_hidden_layers) + " layers x 2 (K,V) x ctx " + n(ctx) + " x kv width " +
                            n(c.num_key_value_heads * c.head_dim) + " x 4 B"});
  const cuda::BatchBufferBytes batch_buffers = cuda::batch_buffer_bytes(c, batch_tokens, staging, stride);
  const u64 batch = batch_buffers.total();
  tier.lines.push_back({"GPU activations", Tier::vram, step.activations() + batch + cuda::slot_table_bytes(c, moe_layers),
                        "one token's step buffers (hidden, q/k/v, attention partials over ctx, expert rows, logits) + "
                        "rope table + slot tables + " +
                            (batch > 0 ? format_bytes(batch) + " for prefill batches of " + n(batch_tokens) + " tokens" +
                                             (staging > 0 ? " (a staging slab of " + n(staging) +
                                                                " records for the host's experts copied up)"
                                                          : std::string())
                                       : std::string("no prefill batch (prompts run token by token)"))});
  u64 slabs_rounding = 0;
  for (int slots : tier.vram_experts) slabs_rounding += cuda::page_rounding(static_cast<u64>(slots) * fp.expert().record_stride);
  const u64 rounding = cuda::page_rounding(fp.gpu_dense_bytes) + slabs_rounding + step.rounding() +
                       cuda::page_rounding(batch_buffers.all()) +
                       cuda::page_rounding(cuda::slot_table_bytes(c, moe_layers));
  tier.lines.push_back({"GPU large-page rounding", Tier::vram, rounding,
                        "each buffer of 2 MiB or more takes whole 2 MiB pages: dense weights, " +
                            n(static_cast<u64>(tier.vram_experts.size())) + " expert slabs (" +
                            format_bytes(slabs_rounding) + "), KV cache, activations"});
  tier.load_buffer_bytes = cuda::load_buffer_bytes(
      fp.expert().record_stride,
      tier.vram_experts.empty() ? 0 : static_cast<u64>(*std::max_element(tier.vram_experts.begin(), tier.vram_experts.end())),
      fp.largest_gpu_dense_matrix_bytes, fp.norm_f32_copy_bytes);
  tier.lines.push_back({"GPU host-visible buffers", Tier::ram, pinned,
                        "pinned: a batch of " + n(static_cast<u64>(tier.batch_tokens)) +
                            " embedding rows, logits, routing and hybrid rows" +
                            (staging > 0 ? "; a hybrid batch's choices, input and CPU rows, and 2 x " + n(staging) +
                                               " records on their way up"
                                         : std::string())});
}

void add_whole_decoder_lines(GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request) {
  if (request.backend.name == "cuda") return add_cuda_decoder_lines(tier, fp, request);
  const vulkan::DecoderLayout layout = vulkan::layout_decoder(vulkan::decoder_shape(
      fp.config, fp.moe_layer_count(), static_cast<u64>(request.ctx), static_cast<u64>(tier.batch_tokens)));
  const BackendMemory& b = request.backend;
  tier.lines.push_back({"GPU dense weights", Tier::vram, fp.gpu_dense_bytes,
                        n(fp.dense_tensor_count) + " dense tensors but the embedding, vectors as f32, 256-aligned"});
  tier.lines.push_back({"GPU KV cache", Tier::vram, layout.kv_bytes,
                        n(fp.config.num_hidden_layers) + " layers x 2 (K,V) x ctx " + n(static_cast<u64>(request.ctx)) +
                            " x kv width " + n(fp.config.num_key_value_heads * fp.config.head_dim) + " x 4 B"});
  tier.lines.push_back({"GPU activations", Tier::vram, layout.device_bytes + layout.slot_table_bytes,
                        "batch " + n(static_cast<u64>(tier.batch_tokens)) +
                            " tokens (hidden, q/k/v, attention scores over ctx, expert rows) + rope table + slot tables"});
  tier.lines.push_back({"GPU host-visible buffers", Tier::ram, b.staging_bytes + layout.host_bytes,
                        format_bytes(b.staging_bytes) + " upload ring + per-batch input, logits, routing and hybrid rows"});
}

// The tier's lines for the experts per layer in tier.vram_experts.
void fill_lines(GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request) {
  const BackendMemory& b = request.backend;
  const u64 stride = fp.expert().record_stride;
  const u64 placed = static_cast<u64>(tier.vram_slots());
  const auto vram_slot = static_cast<u64>(static_cast<double>(stride) * b.vram_bytes_per_record_byte);
  tier.lines.clear();
  tier.load_buffer_bytes = 0;
  tier.lines.push_back({"expert tier: VRAM slots", Tier::vram, placed * vram_slot,
                        n(placed) + " slots x " + n(vram_slot) + " B (" + b.name + " keeps records packed: x" +
                            std::to_string(b.vram_bytes_per_record_byte).substr(0, 4) + " of the " + n(stride) +
                            " B stride)"});
  if (b.whole_decoder) {
    add_whole_decoder_lines(tier, fp, request);
  } else {
    const u64 round_bytes = 64 * static_cast<u64>(fp.top_k) *
                            (fp.config.hidden_size + 2 * fp.config.moe_intermediate_size) * 4;
    tier.lines.push_back({"GPU activations", Tier::vram, round_bytes,
                          "64 round tokens x top_k " + n(static_cast<u64>(fp.top_k)) + " x (hidden + 2 x width) x 4 B"});
  }
  tier.lines.push_back({"VRAM reserve", Tier::vram, tier.vram_reserve_bytes,
                        "5% of the VRAM budget, at least 256 MiB (driver allocations, fragmentation)"});
  for (const HostCopy& copy : b.host_copies) {
    const auto bytes = static_cast<u64>(static_cast<double>(placed * stride) * copy.bytes_per_record_byte);
    tier.lines.push_back({"GPU host copy: " + copy.name, Tier::ram, bytes,
                          n(placed) + " VRAM slots x " + n(stride) + " B x " +
                              std::to_string(copy.bytes_per_record_byte).substr(0, 4) + " (" + b.name +
                              " keeps it in RAM per VRAM slot)"});
  }
  if (!b.whole_decoder) {
    tier.lines.push_back({"GPU upload staging", Tier::ram, static_cast<u64>(b.staging_slots) * stride,
                          n(static_cast<u64>(b.staging_slots)) + " host-visible slots x " + n(stride) + " B stride"});
  }
  u64 driver = b.driver_host_bytes;
  std::string basis = b.driver_host_basis;
  for (const BackendMemory::DriverShare& measured : b.measured_driver_shares) {
    if ((measured.vendor_id == 0 || measured.vendor_id == tier.vendor_id) &&
        (measured.device_type.empty() || measured.device_type == tier.device_type)) {
      driver = measured.bytes;
      basis = measured.basis;
      break;
    }
  }
  tier.lines.push_back({"GPU driver (host)", Tier::ram, driver, basis});
}

// Fills the tier's slots, share and lines for `slots` VRAM slots in all.
void place(GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request, int slots) {
  const int layers = static_cast<int>(fp.moe_layer_count());
  tier.vram_experts.assign(static_cast<std::size_t>(layers), 0);
  double share = 0;
  const auto ranked = rank_experts(fp, request.history);
  for (int i = 0; i < slots && i < static_cast<int>(ranked.size()); ++i) {
    ++tier.vram_experts[static_cast<std::size_t>(ranked[i].layer)];
    share += ranked[i].share;
  }
  // At most 1: every expert's share summed can round past it (a plan file's range check refuses 1 + 1 ulp).
  tier.vram_share = layers > 0 ? std::min(1.0, share / layers) : 0;
  const bool history = request.history && request.history->total_tokens() > 0;
  tier.share_inputs = std::string(history ? "usage history" : "uniform routing") + ": " + n(static_cast<u64>(slots)) +
                      " experts ranked by expected reads per byte serve " + std::to_string(tier.vram_share * 100).substr(0, 5) +
                      "% of expert reads";
  fill_lines(tier, fp, request);
}

u64 tier_vram(const GpuTier& tier) {
  u64 total = 0;
  for (const MemoryLine& line : tier.lines) total += line.tier == Tier::vram ? line.bytes : 0;
  return total;
}

// --gpu auto takes the GPU only when measurements say it streams weights
// faster than the CPU reads RAM (decode is bandwidth-bound on both): the
// GPU's best passing self-test GEMV against the CPU's best read bandwidth.
// nullopt: take the GPU; else the reason the CPU stays.
std::optional<std::string> auto_prefers_cpu(const DeviceProfile& profile, const std::string& gpu,
                                            const std::string& backend) {
  double gpu_gb_s = 0, cpu_gb_s = 0;
  for (const GpuKernelResult& r : profile.measurements.gpu_kernels) {
    if (r.device == gpu && r.backend == backend && r.passed) gpu_gb_s = std::max(gpu_gb_s, r.gb_per_s.median);
  }
  if (profile.measurements.memory) {
    for (const auto& point : profile.measurements.memory->points) cpu_gb_s = std::max(cpu_gb_s, point.gb_per_s.median);
  }
  const std::string both = " (GPU GEMV " + std::to_string(static_cast<int>(gpu_gb_s)) + " GB/s measured by the self-test, CPU read " +
                           std::to_string(static_cast<int>(cpu_gb_s)) + " GB/s)";
  if (gpu_gb_s <= 0) {
    return "auto: CPU; " + gpu + " runs the " + backend + " decoder, but the profile has no measured GPU speed to show "
           "it is faster (coli-probe --gpu-selftest measures it; --gpu N plans it anyway)";
  }
  if (cpu_gb_s > 0 && gpu_gb_s <= cpu_gb_s) return "auto: CPU; it streams weights faster than " + gpu + both;
  return std::nullopt;
}

}  // namespace

BackendMemory gpu_backend_memory(const std::string& choice, const DeviceProfile& profile) {
  const BackendMemory cuda = backend::cuda_backend_memory({.kind = backend::BackendKind::cuda, .name = "cuda"});
  if (choice == "cuda" || (choice == "auto" && cuda.engine_runs_experts && !profile.gpus.cuda.empty())) return cuda;
  return backend::vulkan_backend_memory({.kind = backend::BackendKind::vulkan, .name = "vulkan"});
}

int GpuTier::vram_slots() const { return std::accumulate(vram_experts.begin(), vram_experts.end(), 0); }

bool GpuTier::all_experts_in_vram(int n_experts) const {
  return !vram_experts.empty() &&
         std::all_of(vram_experts.begin(), vram_experts.end(), [&](int count) { return count >= n_experts; });
}

void GpuTier::set_host_holders(MemoryKnobs& knobs, int n_experts) const {
  knobs.gpu_decoder = whole_decoder && device.gpu.chosen();
  knobs.host_experts = !knobs.gpu_decoder || !all_experts_in_vram(n_experts);
}

std::vector<std::vector<int>> vram_expert_ids(const std::vector<int>& vram_experts, int n_experts,
                                              const experts::UsageHistory* history) {
  std::vector<std::vector<int>> out;
  const int layers = static_cast<int>(vram_experts.size());
  for (int l = 0; l < layers; ++l) {
    std::vector<double> counts;
    std::vector<int> order = layer_order(history, layers, n_experts, l, counts);
    order.resize(static_cast<std::size_t>(std::clamp(vram_experts[static_cast<std::size_t>(l)], 0, n_experts)));
    out.push_back(std::move(order));
  }
  return out;
}

namespace {

// The tier's budget (the device's, or --vram below it), its reserve and batch.
Status size_tier(GpuTier& tier, const GpuTierRequest& request, u64 budget, std::string source) {
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
  tier.whole_decoder = request.backend.whole_decoder;
  tier.batch_tokens = request.batch_tokens.value_or(request.backend.prefill_batch_tokens);
  if (tier.batch_tokens < 1 || tier.batch_tokens > kMaxGpuBatchTokens) {
    return make_error("--gpu-batch " + std::to_string(tier.batch_tokens) + " is outside 1.." +
                      std::to_string(kMaxGpuBatchTokens) + ": give a prompt's tokens per GPU submission, e.g. 512");
  }
  return Ok{};
}

// The sized tier with as many VRAM slots as fit beside everything else the
// backend holds there.
Status fill_tier(GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request, u64 device_budget,
                 const std::string& device_source) {
  if (Status s = size_tier(tier, request, device_budget, device_source); !s) return s;
  const u64 budget = tier.vram_headroom_bytes;
  place(tier, fp, request, 0);
  const u64 fixed = tier_vram(tier);  // everything in VRAM but expert slots, and the reserve
  const auto vram_slot =
      static_cast<u64>(static_cast<double>(fp.expert().record_stride) * request.backend.vram_bytes_per_record_byte);
  const u64 all = fp.moe_layer_count() * static_cast<u64>(fp.n_experts);
  const u64 fits = budget > fixed && vram_slot > 0 ? (budget - fixed) / vram_slot : 0;
  if (fits == 0) {
    return make_error(tier.device.gpu.describe() + ": " + format_bytes(budget) + " of VRAM (" + tier.vram_headroom_source + ") holds no expert of " +
                      format_bytes(vram_slot) + " beside its " + format_bytes(fixed) + " reserve: use --gpu none");
  }
  int slots = static_cast<int>(std::min(fits, all));
  place(tier, fp, request, slots);
  // What changes with the slots beyond them: a hybrid plan's staging slab
  // (cuda_layout.h's staging_records) and the slabs' large-page rounding
  // (CUDA). Where those do not fit too, experts stay out.
  while (slots > 1 && tier_vram(tier) > budget) place(tier, fp, request, --slots);
  tier.reason = (request.gpu == "auto" ? "auto: " : "--gpu " + request.gpu + ": ") + tier.device.gpu.describe() + " (" +
                request.backend.name + "), " + n(static_cast<u64>(tier.vram_slots())) + " of " + n(all) +
                " experts in VRAM (" + tier.vram_headroom_source + "); " + tier.share_inputs;
  return Ok{};
}

// --gpu none|auto|N over the profile's CUDA devices (the CUDA decoder: no
// shader variants; the budget is the device's free memory at probe time).
Result<GpuTier> decide_cuda_tier(const DeviceProfile& profile, const ModelFootprint& fp, const GpuTierRequest& request) {
  GpuTier tier;
  tier.backend = "cpu";
  if (request.vram && request.gpu == "none") return make_error("--vram needs a GPU: drop --gpu none or --vram");
  if (!request.force_variant.empty()) {
    return make_error("--gpu-variant " + request.force_variant + " picks a Vulkan shader; the CUDA decoder has none: drop "
                      "--gpu-variant or use --gpu-backend vulkan");
  }
  const auto cpu_only = [&](const std::string& reason) {
    tier.reason = reason;
    tier.device = GpuDecision{{}, {}, reason};
    return tier;
  };
  if (request.gpu == "none") return cpu_only("--gpu none: experts run on the CPU");
  const std::vector<CudaDevice>& devices = profile.gpus.cuda;
  int index = 0;
  if (request.gpu == "auto") {
    if (devices.empty()) return cpu_only("auto: CPU; the profile lists no CUDA device (" + profile.gpus.cuda_status + ")");
    for (int i = 1; i < static_cast<int>(devices.size()); ++i) {
      if (devices[i].free_memory_bytes > devices[index].free_memory_bytes) index = i;
    }
  } else {
    const auto parsed = parse_int(request.gpu);
    if (!parsed || *parsed < 0 || static_cast<std::size_t>(*parsed) >= devices.size()) {
      return make_error("--gpu " + request.gpu + ": the profile has " + std::to_string(devices.size()) + " CUDA device(s) (" +
                        profile.gpus.cuda_status + "); use none, auto or a CUDA ordinal, or --gpu-backend vulkan");
    }
    index = static_cast<int>(*parsed);
  }
  const GpuIdentity id = cuda_identity(profile.gpus, index);
  const bool engine_runs = request.backend.engine_runs_experts && !fp.config.planning_only();
  if (request.gpu == "auto") {
    if (!engine_runs) {
      return cpu_only("auto: CPU; " + id.describe() + " fits, but " +
                      (request.backend.engine_runs_experts ? "the CUDA decoder does not run " + fp.config.model_type
                                                           : std::string("this build has no CUDA decoder (rebuild with nvcc)")) +
                      " (--gpu N previews a VRAM tier)");
    }
    if (auto cpu = auto_prefers_cpu(profile, devices[static_cast<std::size_t>(index)].name, "cuda")) return cpu_only(*cpu);
  }
  auto sized = empty_cuda_tier(profile, fp, request, index);
  if (!sized) return sized.error();
  tier = std::move(*sized);
  tier.device.reason = (request.gpu == "auto" ? "auto: " : "--gpu " + request.gpu + ": ") + id.describe();
  if (Status s = fill_tier(tier, fp, request, tier.vram_headroom_bytes, tier.vram_headroom_source); !s) return s.error();
  if (!tier.engine_runs_it) tier.reason += "; PREVIEW: this build's engine does not run this tier";
  return tier;
}

}  // namespace

Result<GpuTier> decide_gpu_tier(const DeviceProfile& profile, const ModelFootprint& fp, const GpuTierRequest& request) {
  if (request.backend.name == "cuda") return decide_cuda_tier(profile, fp, request);
  GpuTier tier;
  tier.backend = "cpu";
  auto device = decide_gpu(profile, fp.config, fp.expert_format, request.gpu, request.force_variant);
  if (!device) return device.error();
  tier.device = *device;
  if (request.vram && request.gpu == "none") return make_error("--vram needs a GPU: drop --gpu none or --vram");
  if (!tier.device.gpu.chosen()) {
    tier.reason = tier.device.reason;
    return tier;
  }
  // auto chooses only what this build's engine can run; an explicit --gpu N
  // plans the tier as a preview that `coli run` refuses with the reason.
  if (request.gpu == "auto" && !request.backend.engine_runs_experts) {
    tier.reason = "auto: CPU; " + tier.device.gpu.describe() + " fits the " + request.backend.name +
                  " shaders, but this build's engine computes experts on the CPU only (--gpu N previews a VRAM tier)";
    tier.device = GpuDecision{{}, {}, tier.reason};
    return tier;
  }
  // By index: of two identical GPUs, the one decided, not the last of that name.
  const VulkanDevice* vk = &profile.gpus.vulkan.at(static_cast<std::size_t>(tier.device.gpu.index));
  // The GPU decoder runs what the CPU engine runs: a planning-only
  // architecture (MLA) stays a preview there.
  const bool engine_runs = request.backend.engine_runs_experts && !fp.config.planning_only();
  if (request.gpu == "auto" && request.backend.whole_decoder) {
    if (!engine_runs) {
      tier.reason = "auto: CPU; " + tier.device.gpu.describe() + " fits, but the " + request.backend.name +
                    " decoder does not run " + fp.config.model_type + " (planning only; --gpu N previews a VRAM tier)";
      tier.device = GpuDecision{{}, {}, tier.reason};
      return tier;
    }
    if (auto cpu = auto_prefers_cpu(profile, vk->name, request.backend.name)) {
      tier.reason = *cpu;
      tier.device = GpuDecision{{}, {}, tier.reason};
      return tier;
    }
  }
  tier.backend = request.backend.name;
  tier.engine_runs_it = engine_runs;
  tier.device_type = vk->type;
  tier.vendor_id = vk->vendor_id;
  auto [budget, source] = vram_budget(*vk);
  if (budget == 0) return make_error(tier.device.gpu.describe() + " reports no device-local memory: use --gpu none");
  if (Status s = fill_tier(tier, fp, request, budget, source); !s) return s.error();
  if (request.backend.whole_decoder && vk) {
    const shaders::DecoderRowShape shape =
        shaders::decoder_row_shape(vk->max_workgroup_invocations, vk->max_compute_shared_memory_bytes);
    tier.reason += "; decoder row kernels " + n(shape.workgroup_size) + " invocations x " + n(shape.rows) + " rows, " +
                   n(shape.batch_tokens) + " tokens per prefill weight pass" +
                   (shape.grouped_experts ? ", experts grouped by expert" : ", experts per choice") + " (at most " +
                   n(shaders::decoder_shared_memory_bytes(shaders::DecoderModule::expert_gate_up_grouped,
                                                          shape.workgroup_size)) +
                   " B of " + n(vk->max_compute_shared_memory_bytes) + " B shared memory)";
  }
  if (!tier.engine_runs_it) tier.reason += "; PREVIEW: this build's engine does not run this tier";
  return tier;
}

Result<GpuTier> empty_cuda_tier(const DeviceProfile& profile, const ModelFootprint& fp, const GpuTierRequest& request,
                                int ordinal) {
  const std::vector<CudaDevice>& devices = profile.gpus.cuda;
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= devices.size()) {
    return make_error("CUDA device " + std::to_string(ordinal) + ": the profile has " + std::to_string(devices.size()) +
                      " (" + profile.gpus.cuda_status + ")");
  }
  const CudaDevice& device = devices[static_cast<std::size_t>(ordinal)];
  GpuTier tier;
  const GpuIdentity id = cuda_identity(profile.gpus, ordinal);
  tier.device = GpuDecision{id, {}, id.describe()};
  tier.backend = "cuda";
  tier.engine_runs_it = request.backend.engine_runs_experts && !fp.config.planning_only();
  tier.device_type = "discrete";
  tier.vendor_id = 0x10de;
  const u64 budget = device.free_memory_bytes > 0 ? device.free_memory_bytes : device.total_memory_bytes;
  if (budget == 0) return make_error(id.describe() + " reports no memory: use --gpu none");
  const std::string source =
      "CUDA device " + std::to_string(ordinal) + (device.free_memory_bytes > 0 ? " free memory at probe time" : " total memory");
  if (Status s = size_tier(tier, request, budget, source); !s) return s.error();
  tier.vram_experts.assign(fp.moe_layer_count(), 0);
  fill_lines(tier, fp, request);
  return tier;
}

GpuTier gpu_tier_with_layers(const GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request,
                             const std::vector<int>& per_layer) {
  GpuTier out = tier;
  out.vram_experts = per_layer;
  fill_lines(out, fp, request);
  return out;
}

GpuTier shrink_gpu_tier(const GpuTier& tier, const ModelFootprint& fp, const GpuTierRequest& request, int slots) {
  GpuTier out = tier;
  place(out, fp, request, std::max(0, slots));
  return out;
}

}  // namespace coli::planner
