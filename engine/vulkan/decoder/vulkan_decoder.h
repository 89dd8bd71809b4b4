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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/gpu/gpu_decoder.h"
#include "vulkan/compute_context.h"

namespace coli::vulkan {

// The backend-neutral types live in the GPU decoder seam (coli/gpu/gpu_decoder.h).
using gpu::DecoderMemory;
using gpu::DecoderModel;
using gpu::DecoderTensor;
using gpu::HostExperts;

class VulkanDecoder final : public gpu::GpuDecoder {
 public:
  // Uploads weights and the planned experts. Errors: a shape or format the
  // kernels cannot take (named), a kernel that does not fit the device, a
  // VRAM budget too small (with numbers).
  static Result<std::unique_ptr<VulkanDecoder>> create(ComputeContext& context, const DecoderModel& model);
  ~VulkanDecoder() override;
  VulkanDecoder(const VulkanDecoder&) = delete;
  VulkanDecoder& operator=(const VulkanDecoder&) = delete;

  // Runs `tokens` at positions start_position.. and writes the last one's
  // logits. `host` computes experts outside VRAM (may be null when every
  // expert is in VRAM).
  Status forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                 HostExperts* host) override;

  const DecoderMemory& memory() const override;
  // Adds the last forward's routing to counts[MoE layer][expert].
  void add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const override;
  // "matvec q4_g64 (256 invocations, 8 rows, 4 tokens) ...": what was created.
  std::vector<std::string> kernel_names() const override;
  bool hybrid() const override;
  std::string device_name() const override;

 private:
  struct State;
  explicit VulkanDecoder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace coli::vulkan
