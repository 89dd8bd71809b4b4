// The VRAM tier: which GPU holds routed experts, how many, which ones, and
// what that costs in VRAM *and in RAM*, priced from the backend's own memory
// description (BackendMemory, coli/backend/backend_memory.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coli/backend/backend_memory.h"
#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/footprint.h"
#include "coli/planner/memory_preview.h"
#include "coli/planner/variant_decider.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

// Backends describe their own memory (coli/backend/backend_memory.h).
using backend::BackendMemory;
using backend::HostCopy;

// The most tokens one GPU submission (--gpu-batch) may take.
inline constexpr int kMaxGpuBatchTokens = 65536;

struct GpuTierRequest {
  std::string gpu = "auto";                 // --gpu none|auto|N
  std::optional<std::uint64_t> vram;        // --vram (bytes; at most the device's budget)
  std::string force_variant;                // --gpu-variant: that shader for every expert shape
  // The planner reads a backend's memory from the backend, never from a
  // table of its own: by default the Vulkan backend's description.
  BackendMemory backend = backend::vulkan_backend_memory({.kind = backend::BackendKind::vulkan, .name = "vulkan"});
  const experts::UsageHistory* history = nullptr;  // ranks experts for the tier; uniform when absent
  int ctx = 4096;                           // KV positions (a whole-decoder backend keeps them in VRAM)
  std::optional<int> batch_tokens;          // --gpu-batch; default: the backend's prefill_batch_tokens
  // Experts of a layer the CUDA decoder may stage from the host (its
  // staging slab); default: those outside VRAM of the layer with fewest in
  // VRAM. Expert parallel sets the host tier's (the other GPUs' are not staged).
  std::optional<int> staged_experts;
};

// --gpu-backend: "vulkan", "cuda", or "auto" = cuda when this build has the
// CUDA decoder and the profile lists a CUDA device, else vulkan. The
// memory description comes from the backend (engine/backend).
BackendMemory gpu_backend_memory(const std::string& choice, const DeviceProfile& profile);

struct GpuTier {
  GpuDecision device;                       // device name and shader variants ("" = CPU only)
  std::string backend = "cpu";              // "cpu" or the backend's name
  bool engine_runs_it = true;               // false: a preview the engine of this build cannot run
  std::uint64_t vram_headroom_bytes = 0;
  std::string vram_headroom_source;
  std::uint64_t vram_reserve_bytes = 0;     // VRAM kept free (driver, fragmentation)
  std::vector<int> vram_experts;            // per MoE layer, experts resident in VRAM
  int batch_tokens = 128;                   // whole decoder: a prompt's tokens per submission (--gpu-batch)
  int vram_slots() const;                   // their sum
  bool whole_decoder = false;               // the backend runs every layer (see BackendMemory)
  std::string device_type;                  // VulkanDevice::type ("discrete", "cpu" for lavapipe, ...)
  std::uint32_t vendor_id = 0;              // VulkanDevice::vendor_id (0x10de NVIDIA, ...)
  // Every expert of every layer in VRAM: the host keeps no expert cache.
  bool all_experts_in_vram(int n_experts) const;
  // What the host holds beside this tier (MemoryKnobs::gpu_decoder and host_experts): a whole-decoder
  // backend on a chosen GPU leaves it the embedding table, and an expert cache only for the experts
  // outside VRAM.
  void set_host_holders(MemoryKnobs& knobs, int n_experts) const;
  double vram_share = 0;                    // expected share of expert reads served from VRAM
  std::string share_inputs;
  std::vector<MemoryLine> lines;            // VRAM lines and the RAM the backend adds
  // RAM the backend holds while loading only (the CUDA decoder's upload
  // buffers): freed before the host's expert cache fills, so the RAM decider
  // prices what it adds to the peak (load_phase_line), not its sum.
  std::uint64_t load_buffer_bytes = 0;
  std::string reason;
  bool operator==(const GpuTier&) const = default;
};

// The largest VRAM tier that fits the device's budget, before RAM is checked.
// Experts are ranked by expected reads per byte (usage history, else
// uniform), so a layer with concentrated routing gets more VRAM slots.
Result<GpuTier> decide_gpu_tier(const DeviceProfile& profile, const ModelFootprint& footprint,
                                const GpuTierRequest& request);

// The expert ids of each layer's VRAM slots: the first vram_experts[l] of
// the layer's ranking (usage history counts, ties and no history by id), the
// same ranking decide_gpu_tier placed them by.
std::vector<std::vector<int>> vram_expert_ids(const std::vector<int>& vram_experts, int n_experts,
                                              const experts::UsageHistory* history);

// One CUDA device's tier with no expert in VRAM yet: its identity, budget
// (free memory at probe time, else total; --vram below it), reserve and the
// decoder's lines beside the slots (dense weights, KV, activations, reserve,
// host buffers). Expert parallel sizes every GPU from it.
Result<GpuTier> empty_cuda_tier(const DeviceProfile& profile, const ModelFootprint& footprint,
                                const GpuTierRequest& request, int ordinal);

// `tier` with exactly per_layer[l] experts of MoE layer l in VRAM and its
// lines priced for them (vram_share and share_inputs are the caller's).
GpuTier gpu_tier_with_layers(const GpuTier& tier, const ModelFootprint& footprint, const GpuTierRequest& request,
                             const std::vector<int>& per_layer);

// The same tier cut down to `slots` VRAM slots in all (the RAM decider calls
// this when the backend's host copies do not fit beside the RAM cache).
GpuTier shrink_gpu_tier(const GpuTier& tier, const ModelFootprint& footprint, const GpuTierRequest& request,
                        int slots);

}  // namespace coli::planner
