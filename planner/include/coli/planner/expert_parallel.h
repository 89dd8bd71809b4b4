// Expert parallel across the CUDA devices of one host (issue 18): every GPU
// holds a copy of the dense weights and runs attention and the router for
// every token; the routed experts of every MoE layer are spread over the
// GPUs by usage heat and each GPU's VRAM; each MoE layer ends with an
// all-reduce (NCCL) of the GPUs' partial expert outputs. The experts no GPU
// holds stay on the host tiers (RAM cache, disk) as in a one-GPU plan.
// Pure: facts from the profile, no live state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/footprint.h"
#include "coli/planner/gpu_tiers.h"
#include "coli/planner/memory_preview.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

// NCCL's fixed cost per all-reduce on one host, used because no profile
// measures it yet (nccl-tests' small-message all_reduce_perf on NVLink/
// NVSwitch hosts reports ~10-30 us; the middle of that). Printed as an
// assumption wherever it is used.
inline constexpr double kAllReduceLatencySeconds = 20e-6;
inline constexpr const char* kAllReduceLatencySource =
    "assumed 20 us per all-reduce (no profile measures NCCL's latency yet; nccl-tests report 10-30 us on one host)";

// One GPU's share of an expert-parallel plan.
struct GpuShare {
  int ordinal = 0;                   // CUDA ordinal: what expert_gpu holds and --gpus names
  std::string uuid;
  std::string name;
  std::uint64_t budget_bytes = 0;    // free memory at probe time (total without it), or --vram
  std::string budget_source;
  std::uint64_t load_buffer_bytes = 0;  // RAM its weights' upload takes while loading (GpuTier::load_buffer_bytes)
  std::vector<int> experts;          // per MoE layer, the experts it holds
  double load_share = 0;             // expected share of all routed expert reads it serves (mean over layers)
  double peak_layer_share = 0;       // the largest share of one layer's reads it serves
  int numa_node = -1;                // where the host thread that drives it should run (-1: unknown)
  CpuSet local_cpus;
  // Its lines: VRAM (dense copy, experts, KV, activations, rounding, reserve)
  // and the host RAM it adds, each named "GPU <ordinal> ..." as in the plan's memory.
  std::vector<MemoryLine> lines;
  std::string reason;
  std::uint64_t vram_bytes() const;  // its VRAM lines' sum, at most budget_bytes
  int expert_count() const;
  bool operator==(const GpuShare&) const = default;
};

// The all-reduce that ends each MoE layer: every GPU adds its experts'
// partial outputs (hidden x f32 per token). NCCL's ring sends 2(N-1)/N of
// the message per GPU over the ring's slowest link, plus a fixed cost.
struct ExchangeTraffic {
  int gpus = 0;
  int layers = 0;                    // MoE layers: one all-reduce each
  std::uint64_t message_bytes = 0;   // hidden x 4: one token's partial output of one layer
  std::uint64_t bytes_per_token = 0; // each GPU sends (and receives) per token: layers x 2(N-1)/N x message
  double ring_gbs = 0;               // the ring's slowest link, GB/s per direction
  std::string slowest_link;          // which pair, and where its figure came from
  double latency_s = 0;              // per all-reduce
  std::string latency_source;
  double decode_seconds = 0;         // per token: layers x (latency + 2(N-1)/N x message / ring)
  int batch_tokens = 1;              // a prefill batch's tokens: one all-reduce per layer and batch
  double prefill_seconds = 0;        // per prompt token: layers x (latency / batch + 2(N-1)/N x message / ring)
  std::string inputs;
  bool operator==(const ExchangeTraffic&) const = default;
};

struct ExpertParallelPlan {
  std::vector<GpuShare> gpus;        // in ring order (the NCCL rank is the position); empty: not expert parallel
  // The placement the engine takes: expert_gpu[l][e] is the CUDA ordinal of
  // the GPU holding expert e of the l-th MoE layer (footprint.moe_layers
  // order), or -1 when no GPU holds it and the host tiers (RAM cache, disk) serve it.
  std::vector<std::vector<int>> expert_gpu;
  double gpu_share = 0;              // expected share of expert reads the GPUs serve
  std::string share_inputs;
  ExchangeTraffic exchange;
  std::string reason;
  bool active() const { return !gpus.empty(); }
  bool operator==(const ExpertParallelPlan&) const = default;
};

// --gpus: "auto" (every CUDA device when `engine_runs` (this build's
// engine runs expert parallel), the backend is CUDA, --gpu is auto and the
// profile lists 2+; else the one-GPU plan), "all", or a list of CUDA
// ordinals "0,1,3". Returns the ordinals to spread experts over (empty: plan
// one GPU as before) and says why in `reason`.
struct GpuListRequest {
  std::string gpus = "auto";         // --gpus
  std::string gpu = "auto";          // --gpu (one device; not with a --gpus list)
  std::string backend = "vulkan";    // the GPU backend's name: expert parallel is the CUDA decoder's
  bool engine_runs = false;          // this build's engine runs expert-parallel plans
};
Result<std::vector<int>> choose_expert_parallel_gpus(const DeviceProfile& profile, const ModelFootprint& footprint,
                                                     const GpuListRequest& request, std::string& reason);

// The GPUs of `ordinals` whose budget holds what every GPU holds (dense
// copy, KV, activations, reserve) with room for an expert: what --gpus auto
// spreads over; the others are named in `left_out` with their numbers.
std::vector<int> gpus_that_hold_the_dense_copy(const DeviceProfile& profile, const ModelFootprint& footprint,
                                               const GpuTierRequest& request, const std::vector<int>& ordinals,
                                               std::string& left_out);

// The heat of every expert: heat[l][e], the share of layer l's routings
// expert e took in the usage history; uniform (1 / n) without a usable one.
std::vector<std::vector<double>> expert_heat(const ModelFootprint& footprint, const experts::UsageHistory* history);

// The placement alone (pure): the sum(capacity) hottest experts of all
// layers go to GPUs, each to the GPU with the least expected load in its
// layer that still has room (hottest first), so every layer's step waits on
// a balanced slowest GPU; the rest stay on the host (-1).
std::vector<std::vector<int>> place_experts(const std::vector<std::vector<double>>& heat, const std::vector<int>& ordinals,
                                            const std::vector<int>& capacity);

// The all-reduce's price over the profile's links: the ring through
// `ordinals` in order; a pair without a link entry is priced over the host
// PCIe path (the slower of the two GPUs' host_link_gbs) and says so; an error
// when neither is known.
Result<ExchangeTraffic> price_exchange(const GpuFacts& gpus, const std::vector<int>& ordinals,
                                       const ModelFootprint& footprint, int batch_tokens);

// The whole expert-parallel placement: each GPU's budget and lines from the
// CUDA decoder's layout (empty_cuda_tier), the dense copy + KV + activations
// + reserve checked against every GPU (refused with the numbers), experts
// placed by place_experts, the exchange priced.
Result<ExpertParallelPlan> decide_expert_parallel(const DeviceProfile& profile, const ModelFootprint& footprint,
                                                  const GpuTierRequest& request, const std::vector<int>& ordinals);

// The VRAM tier a Plan carries for an expert-parallel placement: the first
// GPU's identity, every GPU's lines, the budgets summed, per layer the
// experts all GPUs hold together (the host cache serves the rest).
GpuTier expert_parallel_tier(const DeviceProfile& profile, const ExpertParallelPlan& ep, bool engine_runs_it);

}  // namespace coli::planner
