// Where the GPU decoder keeps its working memory, as a pure function of the
// model's shape and the run's context and batch: DecoderBuffers allocates
// exactly this, and the planner prices exactly this (no Vulkan needed to
// include it), so plan and allocation cannot drift apart.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "coli/model/model_config.h"

namespace coli::vulkan {

struct DecoderShape {
  std::uint64_t hidden = 0, q_width = 0, kv_width = 0, heads = 0, head_dim = 0;
  std::uint64_t layers = 0, moe_layers = 0, experts = 0, top_k = 0, expert_width = 0;
  std::uint64_t mlp_width = 1;  // widest dense MLP or shared expert
  std::uint64_t vocab = 0;
  std::uint64_t context = 0;    // KV positions
  std::uint64_t batch = 1;      // tokens per submission
};

// The shape of `config` for a run of `context` positions and `batch` tokens
// per submission (the dense MLP is the widest of the dense layers' and the
// shared expert's; the decoder checks its tensors against it).
inline DecoderShape decoder_shape(const model::ModelConfig& c, std::uint64_t moe_layers, std::uint64_t context,
                                  std::uint64_t batch) {
  DecoderShape s;
  s.hidden = c.hidden_size;
  s.heads = c.num_attention_heads;
  s.head_dim = c.head_dim;
  s.q_width = c.num_attention_heads * c.head_dim;
  s.kv_width = c.num_key_value_heads * c.head_dim;
  s.layers = c.num_hidden_layers;
  s.moe_layers = moe_layers;
  s.experts = c.num_experts;
  s.top_k = c.num_experts_per_tok;
  s.expert_width = c.moe_intermediate_size;
  s.mlp_width = std::max<std::uint64_t>({1, c.dense_intermediate_size, c.shared_expert_intermediate_size});
  s.vocab = c.vocab_size;
  s.context = context;
  s.batch = std::max<std::uint64_t>(batch, 1);
  return s;
}

// Device scratch regions, by role.
enum DeviceRole { x, h, q, k, v, attn, scores, mlp_a, mlp_b, router_logits, act, y, y_host_copy, shared_out,
                  shared_gate, route_ids, route_weights, group_offsets, group_members, final_h, rope, step_copy, device_roles };
// Host-visible regions: what the host writes before a submission and reads after.
enum HostRole { h_step, h_input, h_logits, h_ids, h_hidden, h_rows, host_roles };

struct DecoderLayout {
  std::array<std::uint64_t, device_roles> device{};  // offsets
  std::uint64_t device_bytes = 0;
  std::array<std::uint64_t, host_roles> host{};
  std::uint64_t host_bytes = 0;
  std::uint64_t kv_layer_bytes = 0;   // K or V of one layer
  std::uint64_t kv_bytes = 0;         // all layers, K and V
  std::uint64_t slot_table_bytes = 0; // int per (MoE layer, expert)
  std::uint64_t choices = 0;          // batch x top_k
};

inline constexpr std::uint64_t kDecoderRegionAlignment = 256;  // any device's storage offset alignment
inline constexpr std::uint64_t kDecoderStagingBytes = 64ull << 20;  // the upload ring (two halves)

inline DecoderLayout layout_decoder(const DecoderShape& s) {
  constexpr std::uint64_t f = 4;
  DecoderLayout out;
  std::uint64_t size = 0;
  auto add = [&](std::uint64_t bytes) {
    const std::uint64_t at = size;
    const std::uint64_t a = kDecoderRegionAlignment;
    size = (size + std::max<std::uint64_t>(bytes, 4) + a - 1) / a * a;
    return at;
  };
  const std::uint64_t t = std::max<std::uint64_t>(s.batch, 1);
  out.choices = t * s.top_k;
  out.device[x] = add(t * s.hidden * f);
  out.device[h] = add(t * s.hidden * f);
  out.device[q] = add(t * s.q_width * f);
  out.device[k] = add(t * s.kv_width * f);
  out.device[v] = add(t * s.kv_width * f);
  out.device[attn] = add(t * s.q_width * f);
  out.device[scores] = add(t * s.heads * s.context * f);
  out.device[mlp_a] = add(t * s.mlp_width * f);
  out.device[mlp_b] = add(t * s.mlp_width * f);
  out.device[router_logits] = add(t * std::max<std::uint64_t>(s.experts, 1) * f);
  out.device[act] = add(out.choices * std::max<std::uint64_t>(s.expert_width, 1) * f);
  out.device[y] = add(out.choices * s.hidden * f);
  out.device[y_host_copy] = add(out.choices * s.hidden * f);
  out.device[shared_out] = add(t * s.hidden * f);
  out.device[shared_gate] = add(t * f);
  out.device[route_ids] = add(s.moe_layers * out.choices * 4);
  out.device[route_weights] = add(s.moe_layers * out.choices * f);
  out.device[group_offsets] = add((s.experts + 1) * 4);
  out.device[group_members] = add(out.choices * 4);
  out.device[final_h] = add(s.hidden * f);
  out.device[rope] = add(s.context * (s.head_dim / 2) * 2 * f);
  out.device[step_copy] = add(16);
  out.device_bytes = size;
  size = 0;
  out.host[h_step] = add(16);
  out.host[h_input] = add(t * s.hidden * f);
  out.host[h_logits] = add(s.vocab * f);
  out.host[h_ids] = add(s.moe_layers * out.choices * 4);
  out.host[h_hidden] = add(t * s.hidden * f);
  out.host[h_rows] = add(out.choices * s.hidden * f);
  out.host_bytes = size;
  out.kv_layer_bytes = s.context * s.kv_width * f;
  out.kv_bytes = s.layers * 2 * out.kv_layer_bytes;
  out.slot_table_bytes = std::max<std::uint64_t>(s.moe_layers * s.experts, 1) * 4;
  return out;
}

}  // namespace coli::vulkan
