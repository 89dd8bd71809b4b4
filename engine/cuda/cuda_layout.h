// The CUDA decoder's memory from the model's shape, the context and the
// prefill batch: CudaDecoder allocates exactly these buffers (its step
// buffers in VRAM, its pinned host buffers) and coli-plan prices them
// (planner/src/gpu_tiers.cpp), so a plan's CUDA lines are the decoder's own.
// Plain C++: the planner includes it in builds without nvcc.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>

#include "coli/model/model_config.h"

namespace coli::cuda {

using u64 = std::uint64_t;

// Host bytes read from the container per upload while the weights go up
// (a transient buffer, part of the load's peak resident set).
inline constexpr u64 kUploadChunkBytes = 64ull << 20;

// The load's transient host memory (engine/cuda/cuda_weights.cpp): dense
// matrices are read from the container one at a time, then each MoE layer's
// VRAM experts go up in chunks of whole records of at most kUploadChunkBytes,
// while the norms widened to f32 are held until the load ends.
inline u64 load_buffer_bytes(u64 record_stride, u64 most_vram_experts_in_a_layer, u64 largest_dense_matrix,
                             u64 widened_norms) {
  const u64 per_chunk = std::max<u64>(1, kUploadChunkBytes / std::max<u64>(record_stride, 1));
  const u64 experts = std::min(per_chunk, most_vram_experts_in_a_layer) * record_stride;
  return std::max(experts, largest_dense_matrix) + widened_norms;
}

// The CUDA driver backs an allocation of a large page (2 MiB) or more with
// whole large pages; smaller ones share pages. Measured on the H200 (CUDA
// 13): an expert slab of 35.7 MiB took 36 MiB of the device's own count.
// The decoder reports, and the plan prices, what its buffers round up by.
inline constexpr u64 kDeviceLargePage = 2ull << 20;
inline u64 page_rounding(u64 allocation) {
  if (allocation < kDeviceLargePage) return 0;
  return (allocation + kDeviceLargePage - 1) / kDeviceLargePage * kDeviceLargePage - allocation;
}
template <std::size_t N>
u64 page_rounding(const std::array<u64, N>& allocations) {
  return std::accumulate(allocations.begin(), allocations.end(), u64{0},
                         [](u64 sum, u64 bytes) { return sum + page_rounding(bytes); });
}

// Attention's split over positions (kernels/cuda/decoder_kernels.h has the
// kernels' copy; cuda_step.cpp checks that the two agree).
inline constexpr u64 kLayoutAttentionChunk = 32;

// The widest SwiGLU MLP the decoder runs besides the routed experts: dense
// layers' or the shared expert's (at least 1: the buffer always exists).
inline u64 mlp_width_of(const model::ModelConfig& c) {
  u64 width = 1;
  for (u64 l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) width = std::max(width, c.dense_intermediate_size);
  }
  return std::max(width, c.shared_expert_intermediate_size);
}

// Bytes of each step buffer (engine/cuda/cuda_step.h's StepBuffers).
struct StepBufferBytes {
  u64 x, h, q, k, v, attn, scores, mlp_a, router_logits, act, shared_out, shared_gate, final_h, logits, position,
      choices, counts, ids, host_rows, rope, arrivals, h_q, attn_q, act_q, kv;
  std::array<u64, 25> all() const {  // one allocation each
    return {x, h, q, k, v, attn, scores, mlp_a, router_logits, act, shared_out, shared_gate, final_h,
            logits, position, choices, counts, ids, host_rows, rope, arrivals, h_q, attn_q, act_q, kv};
  }
  u64 activations() const {  // everything but the KV cache
    const std::array<u64, 25> a = all();
    return std::accumulate(a.begin(), a.end(), u64{0}) - kv;
  }
  u64 rounding() const;  // page_rounding over all(), below
};

// The int8 copy of n activations (kernels/cuda/decoder_kernels.h's
// Q8Activations: a byte per value, then an 8-byte scale and sum per block of
// 32), n rounded up to whole blocks.
inline u64 q8_copy_bytes(u64 n) {
  const u64 blocks = (n + 31) / 32;
  return blocks * 32 + blocks * 8;
}

inline StepBufferBytes step_buffer_bytes(const model::ModelConfig& c, u64 moe_layers, u64 lm_head_rows, u64 context) {
  const u64 f = sizeof(float);
  const u64 kv_width = c.num_key_value_heads * c.head_dim;
  const u64 q_width = c.num_attention_heads * c.head_dim;
  const u64 chunks = (context + kLayoutAttentionChunk - 1) / kLayoutAttentionChunk;
  const u64 top_k = std::max<u64>(c.num_experts_per_tok, 1);
  StepBufferBytes b{};
  b.x = b.h = b.shared_out = b.final_h = c.hidden_size * f;
  b.q = b.attn = q_width * f;
  b.k = b.v = kv_width * f;
  b.scores = c.num_attention_heads * chunks * (c.head_dim + 2) * f;  // attention's partials per (head, chunk)
  b.mlp_a = mlp_width_of(c) * f;
  b.router_logits = std::max<u64>(c.num_experts, 1) * f;
  b.act = std::max<u64>(c.num_experts_per_tok * c.moe_intermediate_size, 1) * f;
  b.shared_gate = f;
  b.logits = lm_head_rows * f;
  b.position = 4;
  b.choices = std::max<u64>(moe_layers * c.num_experts_per_tok, 1) * 8;  // ExpertChoice {slot, weight}
  b.counts = std::max<u64>(moe_layers * c.num_experts, 1) * 4;
  b.ids = top_k * 4;
  b.host_rows = top_k * c.hidden_size * f;
  b.rope = context * (c.head_dim / 2) * 2 * f;
  b.arrivals = 4 * (1 + c.num_attention_heads);  // norm_route's split blocks, then attention's per head
  b.h_q = q8_copy_bytes(c.hidden_size);  // h and final_h, one at a time
  b.attn_q = q8_copy_bytes(q_width);
  b.act_q = q8_copy_bytes(std::max<u64>(c.num_experts_per_tok * c.moe_intermediate_size, 1));
  b.kv = c.num_hidden_layers * 2 * context * kv_width * f;
  return b;
}

inline u64 StepBufferBytes::rounding() const { return page_rounding(all()); }

// A hybrid prefill batch copies the host's experts that it computes on the
// device into a staging slab, a pass of records at a time (two grouped
// launches per pass, two pinned copies of a pass on the host): 16 records
// keep those launches' grids full, and at most 64 MiB per pass (at least
// one record) keeps large experts (DeepSeek-V3's 23 MB at int4) from
// pinning gigabytes. Fewer when no layer has that many outside VRAM.
inline constexpr u64 kStagingPassRecords = 16;
inline constexpr u64 kStagingPassBytes = 64ull << 20;
inline u64 staging_records(u64 most_host_experts_in_a_layer, u64 record_stride) {
  const u64 by_bytes = std::max<u64>(1, kStagingPassBytes / std::max<u64>(record_stride, 1));
  return std::min({most_host_experts_in_a_layer, kStagingPassRecords, by_bytes});
}

// Bytes of each prefill batch buffer (engine/cuda/cuda_prefill.h's
// BatchBuffers): `batch` tokens' rows of every activation, the batch's
// expert choices grouped by slot, and one row per choice for the experts'
// activations and outputs. None when batch < 2 (the prompt then runs token
// by token). h_half and attn_half are the f16 copies of h and attn that the
// tensor-core GEMMs read; mlp_a and act hold f16 rows in place of f32 ones
// when their matrices are not f32 (half their bytes used). Hybrid plans
// (staging_records > 0) add the staging slab for the host's experts copied
// up and their grouping: staged_order (a choice index per choice) and
// staged_offsets (one per expert + 1).
struct BatchBufferBytes {
  u64 x, h, h_half, q, k, v, attn, attn_half, mlp_a, shared_out, shared_gate, router_logits, choices, offsets, order,
      act, rows, staging, staged_order, staged_offsets;
  std::array<u64, 20> all() const {  // one allocation each
    return {x, h, h_half, q, k, v, attn, attn_half, mlp_a, shared_out, shared_gate, router_logits, choices, offsets, order,
            act, rows, staging, staged_order, staged_offsets};
  }
  u64 total() const {
    const std::array<u64, 20> a = all();
    return std::accumulate(a.begin(), a.end(), u64{0});
  }
};

inline BatchBufferBytes batch_buffer_bytes(const model::ModelConfig& c, u64 batch, u64 staging_records = 0,
                                           u64 record_stride = 0) {
  if (batch < 2) return BatchBufferBytes{};
  const u64 f = sizeof(float);
  const u64 kv_width = c.num_key_value_heads * c.head_dim;
  const u64 q_width = c.num_attention_heads * c.head_dim;
  const u64 choices = batch * std::max<u64>(c.num_experts_per_tok, 1);
  BatchBufferBytes b{};
  b.x = b.h = b.shared_out = batch * c.hidden_size * f;
  b.q = b.attn = batch * q_width * f;
  b.h_half = batch * c.hidden_size * 2;
  b.attn_half = batch * q_width * 2;
  b.k = b.v = batch * kv_width * f;
  b.mlp_a = batch * mlp_width_of(c) * f;
  b.shared_gate = batch * f;
  b.router_logits = batch * std::max<u64>(c.num_experts, 1) * f;
  b.choices = choices * 8;  // ExpertChoice {slot, weight}
  b.offsets = (std::max<u64>(c.num_experts, 1) + 1) * 4;
  b.order = choices * 4;
  b.act = choices * std::max<u64>(c.moe_intermediate_size, 1) * f;
  b.rows = choices * c.hidden_size * f;
  if (staging_records > 0) {
    b.staging = staging_records * record_stride;
    b.staged_order = choices * 4;
    b.staged_offsets = (std::max<u64>(c.num_experts, 1) + 1) * 4;
  }
  return b;
}

// The per-layer expert -> slot tables (int32, every expert of every MoE layer).
inline u64 slot_table_bytes(const model::ModelConfig& c, u64 moe_layers) {
  return std::max<u64>(moe_layers * c.num_experts, 1) * 4;
}

// Page-locked host memory: embedding rows and positions of a prefill batch,
// the logits, the routing counts and a hybrid layer's ids, input and rows.
inline u64 pinned_bytes(const model::ModelConfig& c, u64 moe_layers, u64 lm_head_rows, u64 batch) {
  const u64 f = sizeof(float);
  batch = std::max<u64>(batch, 1);
  return batch * c.hidden_size * f + batch * 4 + lm_head_rows * f + std::max<u64>(moe_layers * c.num_experts, 1) * 4 +
         c.num_experts_per_tok * 4 + c.hidden_size * f + c.num_experts_per_tok * c.hidden_size * f;
}

// And for a hybrid plan's prefill batches (engine/cuda/cuda_hybrid_prefill.h):
// a layer's choices and input rows down, the CPU's rows and the staged
// experts' grouping up, and two passes of records on their way up (one is
// filled while the other is copied).
inline u64 hybrid_batch_pinned_bytes(const model::ModelConfig& c, u64 batch, u64 staging_records, u64 record_stride) {
  if (batch < 2 || staging_records == 0) return 0;
  const u64 f = sizeof(float);
  const u64 choices = batch * std::max<u64>(c.num_experts_per_tok, 1);
  return choices * 8 + batch * c.hidden_size * f + choices * c.hidden_size * f + choices * 4 +
         (std::max<u64>(c.num_experts, 1) + 1) * 4 + 2 * staging_records * record_stride;
}

}  // namespace coli::cuda
