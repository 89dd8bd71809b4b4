// A backend's memory as plain data, for the planner (which links this
// without any GPU library): the representation it keeps per expert slot on
// the device, the host copies it keeps per device slot, its upload staging
// and its driver's share of host RAM. Field note 4 (a backend keeping an
// unpacked and a packed host copy per slot: 69 GB of RAM for a 23 GB model)
// becomes a priced line instead of an OOM kill. Each backend states its own
// as a function of its props; the planner never keeps a table of them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "coli/backend/backend_props.h"

namespace coli::backend {

// One copy a backend keeps in host RAM for each expert slot it holds in VRAM.
struct HostCopy {
  std::string name;                  // "packed int4 mirror", "unpacked int8 copy"
  double bytes_per_record_byte = 1;  // its size relative to the container record
  bool operator==(const HostCopy&) const = default;
};

struct BackendMemory {
  std::string name;                       // "vulkan"
  bool engine_runs_experts = false;       // this build's `coli run` computes experts on it
  bool engine_runs_expert_parallel = false;  // ... and spreads them over several such GPUs (NCCL; CUDA)
  double vram_bytes_per_record_byte = 1;  // 1: records stay packed in VRAM
  std::vector<HostCopy> host_copies;      // per VRAM slot, in RAM
  int staging_slots = 2;                  // host-visible upload ring, in record strides
  std::uint64_t driver_host_bytes = 0;    // RAM the driver maps into the process (libraries, context)
  std::string driver_host_basis;          // where that number comes from
  // Measured by a running backend (Backend::memory()): bytes of expert slot
  // storage it allocated (before any retire). 0 in a planner's description.
  std::uint64_t slot_bytes_allocated = 0;
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
  // input/output buffers), not just a VRAM tier of experts.
  bool whole_decoder = false;
  std::uint64_t staging_bytes = 0;        // whole_decoder: the fixed upload ring (else staging_slots strides)
  // whole_decoder: a prompt's tokens per submission unless --gpu-batch says
  // (runtime::ModelOptions::gpu_batch_tokens; the plan's GPU tier records it).
  int prefill_batch_tokens = 128;
  bool operator==(const BackendMemory&) const = default;
};

// The CPU backend runs a prompt's expert batch a chunk of its experts at a
// time, each chunk's float rows (gate, up and down) within these bytes, so
// they stay in the caches from step to step. Staged all at once, OLMoE's
// resident 512-token layer (4096 rows) sent its gathered inputs, gates, ups
// and downs (96 MiB) through DRAM. 8 MiB stages 512 of its rows: the probe's
// expert prefill points' own batch (8 experts of 64 tokens), so they time
// what the engine runs. The planner prices the chunks' memory and barriers.
inline constexpr std::uint64_t kCpuExpertStagingBytes = 8ull << 20;
// Rows (token, expert) a chunk stages: their gate and up (`width` floats
// each) and down (`hidden`) within `staging_bytes`, at least one.
inline std::uint64_t cpu_staged_chunk_rows(std::uint64_t staging_bytes, std::uint64_t width, std::uint64_t hidden) {
  return std::max<std::uint64_t>(1, staging_bytes / (sizeof(float) * std::max<std::uint64_t>(1, 2 * width + hidden)));
}

// The CPU: expert slots are the RAM cache itself (one packed record each),
// no host copies, no staging, no driver.
BackendMemory cpu_backend_memory(const BackendProps& props);
// What engine/vulkan/decoder holds: the whole decoder on the device (records
// packed as the container holds them, no host mirror), a fixed upload ring,
// and the driver's host share as measured per driver (256 MiB assumed for a
// driver no run has measured).
BackendMemory vulkan_backend_memory(const BackendProps& props);
// What engine/cuda holds: the whole decoder on the device (its step buffers
// and pinned buffers: engine/cuda/cuda_layout.h), records packed as the
// container holds them, the load's read buffer, and the driver's host share
// measured on an H200. engine_runs_experts only in builds with the CUDA decoder.
BackendMemory cuda_backend_memory(const BackendProps& props);

}  // namespace coli::backend
