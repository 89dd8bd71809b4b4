// The model's weights in device memory: dense tensors packed into one
// buffer (norms and biases widened to f32 there), the planned experts of each
// MoE layer in slots of the container's record stride, and the slot table
// (expert -> slot, -1 when the expert stays on the host) the expert kernels
// read on the device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vulkan/decoder/addressed_buffer.h"
#include "vulkan/decoder/decoder_kernels.h"
#include "vulkan/decoder/vulkan_decoder.h"

namespace coli::vulkan {

struct GpuMatrix {
  WeightFormat format = WeightFormat::f32;
  std::uint32_t rows = 0, cols = 0;
  VkDeviceAddress w = 0, s = 0;  // weights; scales (quantised formats)
  bool present() const { return w != 0; }
};

struct GpuLayer {
  VkDeviceAddress input_norm = 0, post_norm = 0, q_norm = 0, k_norm = 0;  // f32; 0: absent
  GpuMatrix q, k, v, o;
  VkDeviceAddress q_bias = 0, k_bias = 0, v_bias = 0, o_bias = 0;
  int moe = -1;                    // MoE layer index; -1: dense MLP
  GpuMatrix router;
  GpuMatrix mlp_gate, mlp_up, mlp_down;  // dense MLP, or the shared expert
  GpuMatrix shared_gate;           // qwen2_moe's sigmoid gate of the shared expert
  bool has_shared = false;
};

struct GpuExperts {
  WeightFormat format = WeightFormat::f32;
  std::uint32_t stride = 0;        // record stride (bytes between slots)
  std::uint32_t gate_w = 0, gate_s = 0, up_w = 0, up_s = 0, down_w = 0, down_s = 0;
  std::uint32_t width = 0;         // one expert's FFN width
  std::vector<std::unique_ptr<AddressedBuffer>> layers;  // per MoE layer (null when it holds none)
  std::unique_ptr<AddressedBuffer> slot_tables;          // int[moe layers][experts]
  std::vector<std::vector<int>> slot_of;                 // host copy of the tables
  bool all_in_vram(int moe_layer) const;
};

struct GpuWeights {
  std::unique_ptr<AddressedBuffer> dense;
  std::vector<GpuLayer> layers;
  VkDeviceAddress final_norm = 0;
  GpuMatrix lm_head;
  GpuExperts experts;
  std::vector<WeightFormat> dense_formats;  // the matvec formats this model needs
};

// Uploads everything; errors name the tensor and what is wrong with it.
Result<GpuWeights> upload_weights(ComputeContext& context, StagingRing& ring, const DecoderModel& model);

}  // namespace coli::vulkan
