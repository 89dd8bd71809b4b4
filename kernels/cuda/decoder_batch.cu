// The prefill's non-matrix kernels (decoder_batch.h): causal attention of
// a batch of queries, the grouping of the batch's expert choices by slot,
// and the weighted sum of each token's expert rows.
#include <cuda_runtime.h>

#include "cuda/decoder_attention.cuh"
#include "cuda/decoder_attention_f16.h"
#include "cuda/decoder_batch.h"

namespace coli::kernels::cuda::decoder {
namespace {

// One block per (head, token): the token's query over positions 0..its own.
template <int kLaneDims>
__global__ void __launch_bounds__(kAttentionThreads) attention_rows_kernel(Attention a) {
  __shared__ float weighted[kMaxHeadDim];
  const int head = static_cast<int>(blockIdx.x), token = static_cast<int>(blockIdx.y);
  const std::size_t row = static_cast<std::size_t>(token) * a.heads * a.head_dim + static_cast<std::size_t>(head) * a.head_dim;
  const int positions = *a.position + token + 1;
  const SpanPartial span = attend_span<kLaneDims>(a, a.q + row, head, 0, positions, weighted);
  const float inv = 1.0f / span.sum;
  for (int d = static_cast<int>(threadIdx.x); d < a.head_dim; d += kAttentionThreads) a.out[row + d] = weighted[d] * inv;
}

// Heads of at most 128 dims: one block per (head, kQueryTile consecutive
// queries) walks the cache in tiles of kPositionTile positions, each K and
// V tile read once into shared memory for all of the block's queries (the
// per-query kernel above reads it once per query). Scores with lanes over
// positions (K rows padded: no bank conflicts), an online softmax per query
// tile step, the weighted V sum with lanes over dims.
constexpr int kQueryTile = 16;
constexpr int kPositionTile = kWarpSize;
constexpr int kTiledHeadDim = 128;
constexpr int kQueriesPerWarp = kQueryTile / kAttentionWarps;

// The K and V rows of positions tile..tile+31 into shared memory (zeros
// past last_position). With dims a multiple of 4 (rows 16-byte aligned),
// warp w takes rows w, w + 4, ... and its lanes 4 dims each: no index
// division per element, every row's loads in flight together (the
// per-element loop with i / dims was most of a tile's instructions).
__device__ __forceinline__ void load_kv_tile(const Attention& a, int tile, int last_position, int kv_width,
                                             int kv_offset, int dims, float (*k_tile)[kTiledHeadDim + 1],
                                             float (*v_tile)[kTiledHeadDim]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  if (dims % 4 == 0) {
#pragma unroll
    for (int p = warp; p < kPositionTile; p += kAttentionWarps) {
      const bool inside = tile + p <= last_position;
      const std::size_t row = static_cast<std::size_t>(tile + p) * kv_width + kv_offset;
      for (int c = lane; c < dims / 4; c += kWarpSize) {
        const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float4 k = inside ? *reinterpret_cast<const float4*>(a.k_cache + row + 4 * c) : zero;
        const float4 v = inside ? *reinterpret_cast<const float4*>(a.v_cache + row + 4 * c) : zero;
        k_tile[p][4 * c] = k.x, k_tile[p][4 * c + 1] = k.y, k_tile[p][4 * c + 2] = k.z, k_tile[p][4 * c + 3] = k.w;
        v_tile[p][4 * c] = v.x, v_tile[p][4 * c + 1] = v.y, v_tile[p][4 * c + 2] = v.z, v_tile[p][4 * c + 3] = v.w;
      }
    }
    return;
  }
  for (int i = static_cast<int>(threadIdx.x); i < kPositionTile * dims; i += kAttentionThreads) {
    const int p = i / dims, d = i % dims;
    const bool inside = tile + p <= last_position;
    const std::size_t at = static_cast<std::size_t>(tile + p) * kv_width + kv_offset + d;
    k_tile[p][d] = inside ? a.k_cache[at] : 0.0f;
    v_tile[p][d] = inside ? a.v_cache[at] : 0.0f;
  }
}

__global__ void __launch_bounds__(kAttentionThreads) attention_tiles_kernel(Attention a, int tokens) {
  __shared__ float k_tile[kPositionTile][kTiledHeadDim + 1];
  __shared__ float v_tile[kPositionTile][kTiledHeadDim];
  __shared__ __align__(16) float q_tile[kQueryTile][kTiledHeadDim];
  const int head = static_cast<int>(blockIdx.x), first_query = static_cast<int>(blockIdx.y) * kQueryTile;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int queries = min(kQueryTile, tokens - first_query), start = *a.position, dims = a.head_dim;
  const int q_width = a.heads * dims, kv_width = a.kv_heads * dims;
  const int kv_offset = head / (a.heads / a.kv_heads) * dims;
  for (int i = static_cast<int>(threadIdx.x); i < kQueryTile * dims; i += kAttentionThreads) {
    const int query = i / dims, d = i % dims;
    q_tile[query][d] = query < queries ? a.q[static_cast<std::size_t>(first_query + query) * q_width + head * dims + d] : 0.0f;
  }
  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kTiledHeadDim / kWarpSize];
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    m[j] = -3.402823e38f, l[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kTiledHeadDim / kWarpSize; ++i) acc[j][i] = 0.0f;
  }
  const int last_position = start + first_query + queries - 1;
  for (int tile = 0; tile <= last_position; tile += kPositionTile) {
    __syncthreads();  // the previous tile is used up (and q_tile written, the first time)
    load_kv_tile(a, tile, last_position, kv_width, kv_offset, dims, k_tile, v_tile);
    __syncthreads();
    // Lane p scores position tile + p against the warp's queries: each K
    // value read once for all of them (q values are broadcasts).
    float score[kQueriesPerWarp] = {};
    if (dims % 4 == 0) {  // each query's 4 dims in one shared load
#pragma unroll 4
      for (int d = 0; d < kTiledHeadDim; d += 4) {
        if (d >= dims) break;
        const float k0 = k_tile[lane][d], k1 = k_tile[lane][d + 1], k2 = k_tile[lane][d + 2], k3 = k_tile[lane][d + 3];
#pragma unroll
        for (int j = 0; j < kQueriesPerWarp; ++j) {
          const float4 q = *reinterpret_cast<const float4*>(&q_tile[warp * kQueriesPerWarp + j][d]);
          score[j] += q.x * k0 + q.y * k1 + q.z * k2 + q.w * k3;
        }
      }
    } else {
#pragma unroll 8
      for (int d = 0; d < kTiledHeadDim; ++d) {
        if (d >= dims) break;
        const float key = k_tile[lane][d];
#pragma unroll
        for (int j = 0; j < kQueriesPerWarp; ++j) score[j] += q_tile[warp * kQueriesPerWarp + j][d] * key;
      }
    }
    // Per query: the online softmax's step (masked positions weigh 0).
    float weight[kQueriesPerWarp];
    const int warp_queries = min(kQueriesPerWarp, queries - warp * kQueriesPerWarp);  // may be <= 0
#pragma unroll
    for (int j = 0; j < kQueriesPerWarp; ++j) {
      weight[j] = 0.0f;
      if (j >= warp_queries) continue;  // the whole warp
      const int own = start + first_query + warp * kQueriesPerWarp + j;
      const bool seen = tile + lane <= own;
      const float scaled = seen ? score[j] * a.scale : -3.402823e38f;
      const float m_new = fmaxf(m[j], warp_max(scaled));
      const float rescale = expf(m[j] - m_new);
      weight[j] = seen ? expf(scaled - m_new) : 0.0f;
      l[j] = l[j] * rescale + warp_sum(weight[j]);
#pragma unroll
      for (int i = 0; i < kTiledHeadDim / kWarpSize; ++i) acc[j][i] *= rescale;
      m[j] = m_new;
    }
    // The weighted V rows, each read once for all of the warp's queries;
    // positions past the warp's last query are skipped.
    const int seen_positions =
        warp_queries > 0 ? min(kPositionTile, start + first_query + warp * kQueriesPerWarp + warp_queries - tile) : 0;
    for (int p = 0; p < seen_positions; ++p) {
      float w[kQueriesPerWarp];
#pragma unroll
      for (int j = 0; j < kQueriesPerWarp; ++j) w[j] = __shfl_sync(detail::kFullWarp, weight[j], p);
#pragma unroll
      for (int i = 0; i < kTiledHeadDim / kWarpSize; ++i) {
        const int d = lane + i * kWarpSize;
        if (d >= dims) continue;
        const float value = v_tile[p][d];
#pragma unroll
        for (int j = 0; j < kQueriesPerWarp; ++j) acc[j][i] += w[j] * value;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    const int query = warp * kQueriesPerWarp + j;
    if (query >= queries) continue;
    float* out = a.out + static_cast<std::size_t>(first_query + query) * q_width + head * dims;
#pragma unroll
    for (int i = 0; i < kTiledHeadDim / kWarpSize; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < dims) out[d] = acc[j][i] / l[j];
    }
  }
}

template <int kLaneDims>
struct AttentionRowsLaunch {
  static void run(cudaStream_t s, const Attention& a, int tokens) {
    attention_rows_kernel<kLaneDims><<<dim3(a.heads, tokens), kAttentionThreads, 0, s>>>(a);
  }
};

constexpr int kGroupThreads = 1024;

// One block: counts per slot (shared atomics), exclusive prefix sums by
// thread 0 (at most kMaxRoutedExperts slots), then each choice takes the
// next place of its slot.
__global__ void __launch_bounds__(kGroupThreads)
    group_by_slot_kernel(const ExpertChoice* choices, int count, int slots, int* offsets, int* order) {
  __shared__ int slot_count[kMaxRoutedExperts];
  __shared__ int next[kMaxRoutedExperts];
  for (int s = static_cast<int>(threadIdx.x); s < slots; s += kGroupThreads) slot_count[s] = 0;
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.x); c < count; c += kGroupThreads) {
    const int slot = choices[c].slot;
    if (slot >= 0 && slot < slots) atomicAdd(&slot_count[slot], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int s = 0; s < slots; ++s) {
      offsets[s] = next[s] = sum;
      sum += slot_count[s];
    }
    offsets[slots] = sum;
  }
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.x); c < count; c += kGroupThreads) {
    const int slot = choices[c].slot;
    if (slot >= 0 && slot < slots) order[atomicAdd(&next[slot], 1)] = c;
  }
}

// One thread per (token, column): the k rows in routing order, then the
// shared expert.
__global__ void combine_experts_kernel(ExpertCombine c) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(c.tokens) * c.hidden) return;
  const std::size_t token = i / c.hidden, column = i % c.hidden;
  float sum = 0;
  for (int j = 0; j < c.k; ++j) {
    const std::size_t choice = token * c.k + j;
    const ExpertChoice e = c.choices[choice];
    if (e.slot < 0 || e.slot >= c.slots) {
      sum = detail::quiet_nan();  // wrong output that shows (no VRAM slot in an all-VRAM batch)
      break;
    }
    sum += e.weight * c.rows[choice * c.hidden + column];
  }
  if (c.shared != nullptr) {
    const float gate = c.shared_gate != nullptr ? 1.0f / (1.0f + expf(-c.shared_gate[token])) : 1.0f;
    sum += gate * c.shared[i];
  }
  c.x[i] += sum;
}

__global__ void to_half_kernel(const float* x, __half* out, std::size_t count) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = to_half(x[i]);
}

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int attention_rows(Stream stream, const Attention& a, int tokens, AttentionMath math) {
  if (tokens < 1 || a.head_dim > kMaxHeadDim) return static_cast<int>(cudaErrorInvalidValue);
  if (math == AttentionMath::f16_tensor && attention_f16_fits(a.head_dim)) return attention_rows_f16(stream, a, tokens);
  if (a.head_dim <= kTiledHeadDim) {
    attention_tiles_kernel<<<dim3(a.heads, (tokens + kQueryTile - 1) / kQueryTile), kAttentionThreads, 0,
                             stream_of(stream)>>>(a, tokens);
  } else {
    for_lane_dims<AttentionRowsLaunch>(a.head_dim, stream_of(stream), a, tokens);
  }
  return static_cast<int>(cudaGetLastError());
}

int to_half_rows(Stream stream, const float* x, std::uint16_t* out, std::size_t count) {
  if (count == 0 || x == nullptr || out == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  constexpr int kThreads = 256;
  to_half_kernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream_of(stream)>>>(
      x, reinterpret_cast<__half*>(out), count);
  return static_cast<int>(cudaGetLastError());
}

int group_by_slot(Stream stream, const ExpertChoice* choices, int count, int slots, int* offsets, int* order) {
  if (count < 1 || slots < 1 || slots > kMaxRoutedExperts) return static_cast<int>(cudaErrorInvalidValue);
  group_by_slot_kernel<<<1, kGroupThreads, 0, stream_of(stream)>>>(choices, count, slots, offsets, order);
  return static_cast<int>(cudaGetLastError());
}

int combine_experts(Stream stream, const ExpertCombine& c) {
  if (c.tokens < 1 || c.k < 1 || c.hidden < 1) return static_cast<int>(cudaErrorInvalidValue);
  constexpr int kThreads = 256;
  const std::size_t n = static_cast<std::size_t>(c.tokens) * c.hidden;
  combine_experts_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream_of(stream)>>>(c);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::decoder
