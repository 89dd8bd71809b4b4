// Attention's inner loop, shared by decode (a chunk of positions per block,
// decoder_layer.cu) and prefill (all of a query's positions per block,
// decoder_batch.cu).
#pragma once

#include "cuda/decoder_common.cuh"

namespace coli::kernels::cuda::decoder {

inline constexpr int kAttentionThreads = 128;
inline constexpr int kAttentionWarps = kAttentionThreads / kWarpSize;
inline constexpr int kPositionsPerStep = 4;
static_assert(kAttentionChunk % kAttentionWarps == 0, "each warp takes the same number of a chunk's positions");

// A block's softmax partial over its positions: the running max `peak`, the
// sum of exp(score - peak); the weighted sum of V is left in shared memory.
struct SpanPartial {
  float peak;
  float sum;
};

// The block's warps attend q (one head's head_dim floats) to positions
// first..last-1 of the caches: warp w scores positions first + w, first + w
// + 4, ... (a coalesced row of K per position, lanes over the head's dims),
// kPositionsPerStep of them per step, keeping an online softmax; the warps'
// partials are then combined.
// weighted[d] = sum over the positions of exp(score - peak) * v[d] (shared
// memory, kMaxHeadDim floats). Every thread of the block must call it.
// kLaneDims: head dims per lane (d = lane + 32 i), head_dim <= 32 kLaneDims
// (lane_dims_for picks it; registers scale with it).
template <int kLaneDims>
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
  // kPositionsPerStep positions per step (p, p + 4, ... for warp w): their
  // loads and reductions are independent, so their latencies overlap.
  constexpr int kStride = kAttentionWarps;
  for (int p = first + warp; p < last; p += kPositionsPerStep * kStride) {
    float score[kPositionsPerStep];
#pragma unroll
    for (int j = 0; j < kPositionsPerStep; ++j) {
      const int at = p + j * kStride;
      const float* k = a.k_cache + static_cast<std::size_t>(at < last ? at : p) * kv_width + kv_offset;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kLaneDims; ++i) {
        const int d = lane + i * kWarpSize;
        if (d < a.head_dim) dot += q[i] * k[d];
      }
      score[j] = dot;
    }
    float m_new = m;
#pragma unroll
    for (int j = 0; j < kPositionsPerStep; ++j) {
      score[j] = warp_sum(score[j]) * a.scale;
      if (p + j * kStride < last) m_new = fmaxf(m_new, score[j]);
    }
    const float rescale = expf(m - m_new);
    float weight[kPositionsPerStep];
    l *= rescale;
#pragma unroll
    for (int j = 0; j < kPositionsPerStep; ++j) {
      weight[j] = p + j * kStride < last ? expf(score[j] - m_new) : 0.0f;
      l += weight[j];
    }
#pragma unroll
    for (int i = 0; i < kLaneDims; ++i) {
      const int d = lane + i * kWarpSize;
      if (d >= a.head_dim) continue;
      float sum = acc[i] * rescale;
#pragma unroll
      for (int j = 0; j < kPositionsPerStep; ++j) {
        const int at = p + j * kStride;
        if (at < last) sum += weight[j] * a.v_cache[static_cast<std::size_t>(at) * kv_width + kv_offset + d];
      }
      acc[i] = sum;
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

// The launchers' switch from head_dim to attend_span's kLaneDims.
template <template <int> class Launch, typename... Args>
void for_lane_dims(int head_dim, const Args&... args) {
  if (head_dim <= 2 * kWarpSize) {
    Launch<2>::run(args...);
  } else if (head_dim <= 4 * kWarpSize) {
    Launch<4>::run(args...);
  } else if (head_dim <= 8 * kWarpSize) {
    Launch<8>::run(args...);
  } else {
    Launch<kMaxHeadDim / kWarpSize>::run(args...);
  }
}

}  // namespace coli::kernels::cuda::decoder
