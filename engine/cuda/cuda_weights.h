// The model's weights in CUDA device memory, for the CUDA decoder: dense
// tensors packed into one buffer (norms and biases widened to f32 there), the
// routed experts of each MoE layer in slots of the container's record stride,
// and per MoE layer the slot table (expert -> slot) the router reads on the
// device (-1: no VRAM slot; a hybrid plan's host computes that expert).
#pragma once

#include <cstdint>
#include <vector>

#include "coli/base/result.h"
#include "coli/gpu/gpu_decoder.h"
#include "cuda/cuda_kernels.h"
#include "cuda/decoder_kernels.h"

namespace coli::cuda {

using kernels::cuda::DeviceBuffer;
using Matrix = kernels::cuda::decoder::Matrix;

struct CudaLayer {
  const float* input_norm = nullptr;  // f32; null: absent
  const float* post_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  Matrix q, k, v, o;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* o_bias = nullptr;
  int moe = -1;                        // MoE layer index; -1: dense MLP
  Matrix router;
  Matrix mlp_gate, mlp_up, mlp_down;   // dense MLP, or the shared expert
  Matrix shared_gate;                  // qwen2_moe's sigmoid gate of the shared expert
  bool has_shared = false;
};

// Every expert of a MoE layer has a slot number: the plan's VRAM experts
// 0..slot_counts-1 (their record in the slab), then the host's experts
// after them in expert order ("host slots": no record in the slab, so a
// decode step leaves them to the host, and a prefill batch groups their
// choices by expert as it groups the VRAM slots'), then, on a GPU of an
// expert-parallel decoder, the experts another GPU computes ("remote
// slots": their rows are zero here, and the all-reduce brings their sum).
struct CudaExperts {
  kernels::cuda::ExpertRecordLayout layout;
  std::vector<DeviceBuffer> slabs;     // per MoE layer: the plan's VRAM experts, slot i = its i-th
  DeviceBuffer slot_tables;            // int[moe layers][experts]: each expert's slot
  std::vector<int> slot_counts;        // per MoE layer: its VRAM slots
  std::vector<std::vector<int>> slot_of;       // host copy of the tables
  std::vector<std::vector<int>> host_experts;  // per MoE layer: host slot slot_counts + i is expert host_experts[i]
  std::vector<int> remote_counts;              // per MoE layer: its remote slots (after the host's)
  bool in_vram(std::size_t moe_layer, int expert) const {
    return slot_of[moe_layer][static_cast<std::size_t>(expert)] < slot_counts[moe_layer];
  }
  // Computed by this GPU's host: neither in its slab nor another GPU's.
  bool on_host(std::size_t moe_layer, int expert) const {
    const int slot = slot_of[moe_layer][static_cast<std::size_t>(expert)];
    return slot >= slot_counts[moe_layer] && slot < slot_counts[moe_layer] + static_cast<int>(host_experts[moe_layer].size());
  }
  bool hybrid(std::size_t moe_layer) const { return !host_experts[moe_layer].empty(); }
  bool remote(std::size_t moe_layer) const { return remote_counts[moe_layer] > 0; }
  std::uint64_t bytes() const;
  std::uint64_t page_rounding() const;  // cuda_layout.h's, over the slabs and the slot tables
};

struct CudaWeights {
  DeviceBuffer dense;
  std::vector<CudaLayer> layers;
  const float* final_norm = nullptr;
  Matrix lm_head;
  CudaExperts experts;
  std::vector<WeightFormat> dense_formats;  // the matvec formats this model uses
};

// Uploads everything on the current device; errors name the tensor and what
// is wrong with it, or the CUDA call that failed. `remote` (per MoE layer,
// experts another GPU computes; empty: none) leaves those to the others.
Result<CudaWeights> upload_cuda_weights(const gpu::DecoderModel& model,
                                        const std::vector<std::vector<int>>& remote = {});

}  // namespace coli::cuda
