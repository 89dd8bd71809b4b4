// Attention's inner loop, shared by decode (a chunk of positions per block,
// decoder_layer.cu) and prefill (all of a query's positions per block,
// decoder_batch.cu).
#pragma once

#include "cuda/decoder_common.cuh"

namespace coli::kernels::cuda::decoder {

inline constexpr int kAttentionThreads = 128;
inline constexpr int kAttentionWarps = kAttentionThreads / kWarpSize;
inline constexpr int kLaneDims = kMaxHeadDim / kWarpSize;  // dims per lane: d = lane + 32 i
static_assert(kAttentionChunk % kAttentionWarps == 0, "each warp takes the same number of a chunk's positions");

// A block's softmax partial over its positions: the running max `peak`, the
// sum of exp(score - peak); the weighted sum of V is left in shared memory.
struct SpanPartial {
  float peak;
  float sum;
};

// The block's warps attend q (one head's head_dim floats) to positions
// first..last-1 of the caches: warp w scores positions first + w, first + w
// + 4, ... (a coalesced row of K per position, lanes over the head's dims)
// keeping an online softmax; the warps' partials are then combined.
// weighted[d] = sum over the positions of exp(score - peak) * v[d] (shared
// memory, kMaxHeadDim floats). Every thread of the block must call it.
__device__ inline SpanPartial attend_span(const Attention& a, const float* q_head, int head, int first, int last,
                                          float* weighted) {
  __shared__ float warp_m[kAttentionWarps], warp_l[kAttentionWarps];
  __shared__ float warp_acc[kAttentionWarps][kMaxHeadDim];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int kv_width = a.kv_heads * a.head_dim;
  const int kv_offset = head / (a.heads / a.kv_heads) * a.head_dim;
  float q[kLaneDims], acc[kLaneDims];
#pragma unroll
  for (int i = 0; i < kLaneDims; ++i) {
    const int d = lane + i * kWarpSize;
    q[i] = d < a.head_dim ? q_head[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -3.402823e38f, l = 0.0f;
  for (int p = first + warp; p < last; p += kAttentionWarps) {
    const float* k = a.k_cache + static_cast<std::size_t>(p) * kv_width + kv_offset;
    const float* v = a.v_cache + static_cast<std::size_t>(p) * kv_width + kv_offset;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneDims; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < a.head_dim) dot += q[i] * k[d];
    }
    const float score = warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, score);
    const float rescale = expf(m - m_new), weight = expf(score - m_new);
    l = l * rescale + weight;
#pragma unroll
    for (int i = 0; i < kLaneDims; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < a.head_dim) acc[i] = acc[i] * rescale + weight * v[d];
    }
    m = m_new;
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kLaneDims; ++i) {
    const int d = lane + i * kWarpSize;
    if (d < a.head_dim) warp_acc[warp][d] = acc[i];
  }
  __syncthreads();
  float peak = warp_m[0];
  for (int w = 1; w < kAttentionWarps; ++w) peak = fmaxf(peak, warp_m[w]);
  float sum = 0.0f;
  for (int w = 0; w < kAttentionWarps; ++w) sum += warp_l[w] * expf(warp_m[w] - peak);
  for (int d = static_cast<int>(threadIdx.x); d < a.head_dim; d += kAttentionThreads) {
    float value = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w) value += warp_acc[w][d] * expf(warp_m[w] - peak);
    weighted[d] = value;
  }
  __syncthreads();
  return {peak, sum};
}

}  // namespace coli::kernels::cuda::decoder
