// Expert parallelism over the GPUs of one host (issue 18): which experts
// each GPU ("rank") holds and computes, and the checks a placement passes
// before anything is allocated. Every rank runs the same attention and
// router for the token(s); a rank computes only the routed choices whose
// expert it holds (rank 0 also those no GPU holds, through the host), the
// others add nothing there, and a sum of each MoE layer's output across the
// ranks (NCCL's all-reduce) leaves every rank the same hidden state.
// Plain C++: tests run it without a device, and the planner may price the
// exchange with it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "coli/base/result.h"

namespace coli::cuda {

// The placement's vocabulary is the planner's (coli/planner/expert_parallel.h):
// devices lists the CUDA ordinals in rank order (rank 0 first: its logits
// are the answer), and expert_gpu[l][e] is the CUDA ordinal of the GPU that
// holds expert e of the l-th MoE layer, or kOnHost.
inline constexpr int kOnHost = -1;  // no GPU holds it: rank 0's host computes it

// What one rank does with each expert of each MoE layer (per layer, ascending ids).
struct RankExperts {
  std::vector<std::vector<int>> vram;    // in its VRAM slab (slot i = vram[l][i])
  std::vector<std::vector<int>> host;    // computed by the host for it: rank 0's are those on no GPU; the others' none
  std::vector<std::vector<int>> remote;  // computed by another rank: they add nothing here
};
RankExperts rank_experts(const std::vector<std::vector<int>>& expert_gpu, std::span<const int> devices, int rank);

// Refuses, naming the field and what to do: no devices, a device named twice
// or outside 0..visible_devices-1 (fewer GPUs here than the placement
// names), a placement of another model's shape (moe_layers x experts), an
// expert on a GPU that `devices` does not list, or a rank that holds no
// expert at all.
Status check_expert_placement(std::span<const int> devices, const std::vector<std::vector<int>>& expert_gpu,
                              int moe_layers, int experts, int visible_devices);

// The floats one MoE layer's all-reduce sums on each rank: the hidden state
// of every token of the submission (1 for a decode step), in place in x.
inline std::uint64_t exchange_floats(std::uint64_t hidden, std::uint64_t tokens) { return hidden * tokens; }

// Bytes each rank sends (and receives) for one all-reduce of `floats` f32
// values in NCCL's ring algorithm: 2 (N-1)/N of the buffer; 0 for one rank.
inline double ring_allreduce_bytes(std::uint64_t floats, int ranks) {
  if (ranks < 2) return 0;
  return 2.0 * (ranks - 1) / ranks * static_cast<double>(floats) * 4.0;
}

}  // namespace coli::cuda
