// Routed experts of every MoE layer behind per-layer caches: a round leases
// the experts one token (or a prefill round) needs, reads the misses from the
// container with pread, and the FFN runs on the leased bytes.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "coli/container/container.h"
#include "coli/experts/expert_cache.h"
#include "coli/experts/round_planner.h"
#include "cpu/gemv_cpu.h"

namespace coli::runtime {

class ExpertStore {
 public:
  // `capacity` 0 = every expert resident; pins per MoE layer.
  static Result<ExpertStore> create(const container::ContainerReader& reader, int top_k, int capacity,
                                    const std::vector<std::vector<int>>& pins);

  // Leases `experts` of MoE layer `moe_layer` and loads the misses.
  Status begin(int moe_layer, std::span<const int> experts);
  void end(int moe_layer);

  // out += weight * down(silu(gate(x)) * up(x)) for a leased expert.
  void accumulate_ffn(int moe_layer, int expert, float weight, std::span<const float> x, std::span<float> out,
                      const kernels::cpu::GemvOptions& gemv);

  // Tokens one prefill round may hold so that its distinct misses always fit
  // every layer's evictable slots (field note 1); at most `requested`.
  int tokens_per_round(int requested) const { return planner_->tokens_per_round(requested); }

  std::uint64_t hits() const;
  std::uint64_t misses() const;
  std::uint64_t bytes_read() const { return bytes_read_; }
  // Exact: f32 activations with weights de-quantised on the fly (what
  // transformers computes on de-quantised weights); else the SIMD kernels,
  // which quantise activations to int8 for integer dot products.
  void set_exact(bool exact) { exact_ = exact; }

 private:
  void project(const container::ExpertPart& part, const std::byte* record, std::span<const float> x,
               std::span<float> y, const kernels::cpu::GemvOptions& gemv) const;

  const container::ContainerReader* reader_ = nullptr;
  container::ExpertLayout layout_;
  std::vector<experts::ExpertCache> caches_;
  std::optional<experts::RoundPlanner> planner_;  // set by create()
  std::vector<float> gate_, up_, down_;  // scratch: expert width / hidden
  std::uint64_t bytes_read_ = 0;
  bool exact_ = false;
};

}  // namespace coli::runtime
