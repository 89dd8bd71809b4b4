// MoeModel on a GPU (ModelOptions::backend "vulkan" or "cuda"): the whole
// decoder runs there (a gpu::GpuDecoder: engine/vulkan/decoder or
// engine/cuda); experts outside the plan's VRAM tier are computed here from
// the expert store (RAM cache, then disk).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "coli/base/result.h"
#include "coli/container/container.h"
#include "coli/model/model_config.h"
#include "coli/runtime/moe_model.h"
#include "dense_weights.h"
#include "expert_store.h"

namespace coli::runtime {

// What `coli run --backend cuda` says in a build without nvcc.
inline constexpr const char* kNoCudaBackend =
    "this build has no CUDA backend: rebuild with nvcc (-DCOLI_CUDA=ON), or use --backend vulkan";

class GpuRun {
 public:
  // `vram`: per MoE layer, the experts the GPU holds (vram_experts_of);
  // `experts` may be null when that is every expert.
  static Result<std::unique_ptr<GpuRun>> start(const ModelOptions& options, const container::ContainerReader& reader,
                                               const model::ModelConfig& config, const DenseWeights& dense,
                                               std::vector<std::vector<int>> vram, ExpertStore* experts);
  ~GpuRun();
  Status forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                 std::vector<std::vector<std::uint64_t>>& routing_counts);
  // What the device holds, by component, for plan vs actual.
  GpuMemoryStats memory() const;

 private:
  struct State;
  explicit GpuRun(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The experts of each MoE layer the GPU holds: options.vram_experts, or every
// expert when it is empty. Errors name a layer or expert out of range.
Result<std::vector<std::vector<int>>> vram_experts_of(const ModelOptions& options, const container::ExpertLayout& layout);
bool every_expert_in_vram(const std::vector<std::vector<int>>& vram, const container::ExpertLayout& layout);

}  // namespace coli::runtime
