// The decoder's working memory (activations for a batch of tokens, the KV
// cache, host-visible input/output) and the recording of one forward pass
// into command buffers: one, or one per MoE layer with experts outside VRAM
// (the host computes those between two command buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "vulkan/decoder/decoder_layout.h"
#include "vulkan/decoder/decoder_weights.h"
#include "vulkan/decoder/kernel_profile.h"

namespace coli::vulkan {

class DecoderBuffers {
 public:
  static Result<DecoderBuffers> create(ComputeContext& context, StagingRing& ring, const model::ModelConfig& config,
                                       const DecoderModel& model, const GpuWeights& weights);

  // Device scratch, by role (addresses); the layout is decoder_layout.h's.
  using Role = DeviceRole;
  VkDeviceAddress at(Role role) const { return scratch_->address() + layout_.device[role]; }
  std::size_t offset(Role role) const { return layout_.device[role]; }
  VkDeviceAddress route_ids_of(int moe_layer) const;
  std::size_t route_stride_bytes() const { return layout_.choices * 4; }  // one MoE layer's ids (or weights)
  VkDeviceAddress route_weights_of(int moe_layer) const;
  VkDeviceAddress k_cache(int layer) const;
  VkDeviceAddress v_cache(int layer) const;

  // Host-visible: what the host writes before and reads after a submission.
  std::span<std::uint32_t> step() const;          // [0] = position of the first token
  std::span<float> host_input() const;            // tokens x hidden (embeddings)
  std::span<float> host_logits() const;           // vocab
  std::span<const int> host_ids(int moe_layer) const;  // choices of the last batch
  std::span<float> host_hidden() const;           // the MoE input of a hybrid layer
  std::span<float> host_expert_rows() const;      // choices x hidden, computed by the host

  AddressedBuffer& scratch() const { return *scratch_; }
  AddressedBuffer& host() const { return *host_; }
  std::size_t host_offset(HostRole role) const { return layout_.host[role]; }

  std::uint64_t kv_bytes() const { return kv_->size(); }
  std::uint64_t scratch_bytes() const { return scratch_->size(); }
  std::uint64_t host_bytes() const { return host_->size(); }
  int context() const { return context_; }

 private:
  std::unique_ptr<AddressedBuffer> scratch_, kv_, host_;
  DecoderLayout layout_;
  int context_ = 0;
};

struct RecordedForward {
  std::vector<VkCommandBuffer> segments;
  std::vector<int> host_layer_after;  // per segment: the MoE layer the host computes after it, or -1
  std::vector<std::pair<std::uint32_t, std::uint32_t>> queries;  // per segment: its timestamps (profiling)
};

class DecoderRecorder {
 public:
  DecoderRecorder(ComputeContext& context, VkCommandPool pool, const model::ModelConfig& config,
                  const GpuWeights& weights, const KernelSet& kernels, const DecoderBuffers& buffers,
                  KernelProfile* profile)
      : context_(context), pool_(pool), c_(config), w_(weights), k_(kernels), b_(buffers), profile_(profile) {}
  Result<RecordedForward> record(int tokens);

 private:
  Status begin_segment();
  Status end_segment(int host_layer);
  void matvec(const char* role, const GpuMatrix& m, VkDeviceAddress x, std::uint32_t x_stride, VkDeviceAddress y, std::uint32_t y_stride,
              std::uint32_t tokens, VkDeviceAddress bias = 0, bool accumulate = false);
  void rms_norm(VkDeviceAddress x, VkDeviceAddress out, VkDeviceAddress weight, std::uint32_t tokens,
                std::uint32_t x_stride);
  void attention_block(const GpuLayer& layer, int index);
  void mlp_block(const GpuLayer& layer);
  Status moe_block(const GpuLayer& layer);
  void silu_mul(VkDeviceAddress a, VkDeviceAddress b, std::uint32_t n);
  void copy(VkBuffer from, std::size_t from_offset, VkBuffer to, std::size_t to_offset, std::size_t bytes);
  void barrier();
  void dispatch(const Kernel& kernel, const void* push, std::uint32_t x, std::uint32_t y = 1, const char* role = "");

  ComputeContext& context_;
  VkCommandPool pool_;
  const model::ModelConfig& c_;
  const GpuWeights& w_;
  const KernelSet& k_;
  const DecoderBuffers& b_;
  KernelProfile* profile_;
  std::uint32_t segment_first_query_ = 0;
  RecordedForward out_;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  std::uint32_t tokens_ = 0;
};

}  // namespace coli::vulkan
