// The VRAM tier: which GPU holds routed experts, how many, which ones, and
// what that costs in VRAM *and in RAM*. A backend's memory is plain data
// (BackendMemory): the representation it keeps in VRAM per expert slot, the
// host copies it keeps per VRAM slot, and its upload staging. Field note 4
// (a backend keeping an unpacked and a packed host copy per slot: 69 GB of
// RAM for a 23 GB model) becomes a priced line instead of an OOM kill.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/footprint.h"
#include "coli/planner/memory_preview.h"
#include "coli/planner/variant_decider.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

// One copy a backend keeps in host RAM for each expert slot it holds in VRAM.
struct HostCopy {
  std::string name;                  // "packed int4 mirror", "unpacked int8 copy"
  double bytes_per_record_byte = 1;  // its size relative to the container record
  bool operator==(const HostCopy&) const = default;
};

struct BackendMemory {
  std::string name;                       // "vulkan"
  bool engine_runs_experts = false;       // this build's `coli run` computes experts on it
  double vram_bytes_per_record_byte = 1;  // 1: records stay packed in VRAM
  std::vector<HostCopy> host_copies;      // per VRAM slot, in RAM
  int staging_slots = 2;                  // host-visible upload ring, in record strides
  std::uint64_t driver_host_bytes = 0;    // RAM the driver maps into the process (libraries, context)
  std::string driver_host_basis;          // where that number comes from
  // Measured shares of particular drivers, which replace driver_host_bytes
  // for a device they match (a software device such as lavapipe is a
  // compiler and a rasteriser in the process; a vendor driver maps its own).
  struct DriverShare {
    std::uint32_t vendor_id = 0;  // 0: any vendor
    std::string device_type;      // "" any, else VulkanDevice::type ("cpu" for lavapipe)
    std::uint64_t bytes = 0;
    std::string basis;
    bool operator==(const DriverShare&) const = default;
  };
  std::vector<DriverShare> measured_driver_shares;
  // The whole decoder runs on the device (dense weights, KV cache and
  // activations in VRAM; the host keeps the embedding table and mapped
  // input/output buffers), not just the VRAM tier's experts.
  bool whole_decoder = false;
  std::uint64_t staging_bytes = 0;        // whole_decoder: the fixed upload ring (else staging_slots strides)
  bool operator==(const BackendMemory&) const = default;
};

// What engine/vulkan holds: packed records in device-local buffers, no host
// mirror, a two-slot staging ring. The driver's host share is measured for
// lavapipe (44 MiB of LLVM mapped); vendor drivers are taken as 256 MiB
// until a GPU run measures them.
BackendMemory vulkan_backend_memory();

struct GpuTierRequest {
  std::string gpu = "auto";                 // --gpu none|auto|N
  std::optional<std::uint64_t> vram;        // --vram (bytes; at most the device's budget)
  std::string force_variant;                // --gpu-variant: that shader for every expert shape
  BackendMemory backend = vulkan_backend_memory();
  const experts::UsageHistory* history = nullptr;  // ranks experts for the tier; uniform when absent
  int ctx = 4096;                           // KV positions (a whole-decoder backend keeps them in VRAM)
  int batch_tokens = 128;                   // tokens per GPU submission (runtime::ModelOptions::gpu_batch_tokens)
};

struct GpuTier {
  GpuDecision device;                       // device name and shader variants ("" = CPU only)
  std::string backend = "cpu";              // "cpu" or the backend's name
  bool engine_runs_it = true;               // false: a preview the engine of this build cannot run
  std::uint64_t vram_headroom_bytes = 0;
  std::string vram_headroom_source;
  std::uint64_t vram_reserve_bytes = 0;     // VRAM kept free (driver, fragmentation)
  std::vector<int> vram_experts;            // per MoE layer, experts resident in VRAM
  int vram_slots() const;                   // their sum
  bool whole_decoder = false;               // the backend runs every layer (see BackendMemory)
  std::string device_type;                  // VulkanDevice::type ("discrete", "cpu" for lavapipe, ...)
  std::uint32_t vendor_id = 0;              // VulkanDevice::vendor_id (0x10de NVIDIA, ...)
  // Every expert of every layer in VRAM: the host keeps no expert cache.
  bool all_experts_in_vram(int n_experts) const;
  double vram_share = 0;                    // expected share of expert reads served from VRAM
  std::string share_inputs;
  std::vector<MemoryLine> lines;            // VRAM lines and the RAM the backend adds
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

// The same tier cut down to `slots` VRAM slots in all (the RAM decider calls
// this when the backend's host copies do not fit beside the RAM cache).
GpuTier shrink_gpu_tier(const GpuTier& tier, const ModelFootprint& footprint, const GpuTierRequest& request,
                        int slots);

}  // namespace coli::planner
