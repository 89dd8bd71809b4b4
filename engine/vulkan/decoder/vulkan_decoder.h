// The whole MoE decoder on a Vulkan device: embeddings looked up on the host,
// then every layer on the GPU (RMSNorm, q/k/v, q/k norm, RoPE, attention over
// a KV cache in VRAM, the router and its top-k, every selected expert of a
// layer in one gate/up dispatch and one down dispatch that read the routing
// ids on the device, the shared expert, the weighted sum) and the lm_head,
// from command buffers recorded once per batch size and replayed per call.
//
// Experts the plan puts in VRAM are computed there; a layer whose experts
// are not all in VRAM ends its command buffer after the router, the host
// computes the choices whose expert has no VRAM slot (HostExperts: the
// engine's RAM cache and disk), and the next command buffer combines both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"
#include "coli/container/container.h"
#include "coli/model/model_config.h"
#include "vulkan/compute_context.h"

namespace coli::vulkan {

// A dense tensor as the container holds it: in host memory (`bytes`), or
// only in the container file, from which it is read straight into VRAM.
struct DecoderTensor {
  WeightFormat dtype = WeightFormat::f32;  // as the container holds it
  std::vector<std::uint64_t> shape;
  std::span<const std::byte> bytes;  // empty: read it from the container
  std::uint64_t file_offset = 0;
  std::uint64_t file_bytes = 0;
};

// Experts without a VRAM slot, computed by the host (hybrid plans).
class HostExperts {
 public:
  virtual ~HostExperts() = default;
  // For every choice c whose on_gpu[c] is 0: y[c] = expert ids[c] of MoE layer
  // `moe_layer` applied to x[c / top_k] (x: tokens x hidden, y: choices x hidden).
  virtual Status run(int moe_layer, std::span<const int> ids, std::span<const std::uint8_t> on_gpu,
                     std::span<const float> x, std::span<float> y) = 0;
};

struct DecoderModel {
  const model::ModelConfig* config = nullptr;
  // Dense tensors by Hugging Face name; nullptr when absent.
  std::function<const DecoderTensor*(const std::string&)> tensor;
  const container::ContainerReader* container = nullptr;  // routed experts are read from it
  // Per MoE layer, the experts held in VRAM (the plan's VRAM tier); a layer
  // listing every expert needs no host work.
  std::vector<std::vector<int>> vram_experts;
  int max_context = 4096;
  int max_batch_tokens = 128;  // tokens per submission (prefill runs in such chunks)
};

// Device memory by component, as allocated (plan vs actual).
struct DecoderMemory {
  std::uint64_t dense = 0;        // attention, norms, routers, shared experts, lm_head
  std::uint64_t experts = 0;      // expert slots of every MoE layer
  std::uint64_t kv_cache = 0;
  std::uint64_t activations = 0;  // per-batch scratch, rope table, slot tables
  std::uint64_t host_visible = 0; // mapped host memory: staging ring, per-call input/output, routing
  std::uint64_t vram() const { return dense + experts + kv_cache + activations; }
};

class VulkanDecoder {
 public:
  // Uploads weights and the planned experts. Errors: a shape or format the
  // kernels cannot take (named), a kernel that does not fit the device, a
  // VRAM budget too small (with numbers).
  static Result<std::unique_ptr<VulkanDecoder>> create(ComputeContext& context, const DecoderModel& model);
  ~VulkanDecoder();
  VulkanDecoder(const VulkanDecoder&) = delete;
  VulkanDecoder& operator=(const VulkanDecoder&) = delete;

  // Runs `tokens` at positions start_position.. and writes the last one's
  // logits. `host` computes experts outside VRAM (may be null when every
  // expert is in VRAM).
  Status forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits, HostExperts* host);

  const DecoderMemory& memory() const;
  // Adds the last forward's routing to counts[MoE layer][expert].
  void add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const;
  // "matvec q4_g64 (256 invocations, 8 rows, 4 tokens) ...": what was created.
  std::vector<std::string> kernel_names() const;
  bool hybrid() const;

 private:
  struct State;
  explicit VulkanDecoder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace coli::vulkan
