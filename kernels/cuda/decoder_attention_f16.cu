// Prefill attention on the tensor cores (decoder_batch.h's
// AttentionMath::f16_tensor): one block per (head, 64 queries), 4 warps of
// 16 queries each, the cache walked in tiles of 64 positions converted to
// f16 in shared memory. Scores Q K^T and the weighted sum P V are wmma
// products with f32 accumulation.
//
// Two passes over the tiles instead of one online softmax: the first finds
// each query's max score and exp-sum, the second writes the final softmax
// weights P and accumulates P V. The scores are computed twice (cheap on the
// tensor cores), but the output accumulators never need a per-row rescale,
// which wmma's unspecified fragment layout would not allow.
#include <cuda_runtime.h>
#include <mma.h>

#include "cuda/decoder_attention_f16.h"
#include "cuda/decoder_common.cuh"

namespace coli::kernels::cuda::decoder {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = 16;                     // a wmma fragment's rows
constexpr int kQueries = kWarps * kRowsPerWarp;      // per block
constexpr int kPositions = 64;                       // per cache tile
constexpr float kNoScore = -3.402823e38f;

// Shared memory of a block for heads padded to kDims (64 or 128) dims:
// the K and V tile, and per warp its scores (f32) and weights (f16); Q
// (f16, scaled) is staged where the scores go before it moves to
// registers, and the output where K and V were once the tiles are done.
template <int kDims>
struct AttentionShared {
  static constexpr int kHalfPitch = kDims + 8;
  static constexpr int kScorePitch = kPositions + 4;
  static constexpr int kWeightPitch = kPositions + 8;
  static constexpr int kOutPitch = kDims + 4;
  union {
    struct {
      __half k[kPositions][kHalfPitch];
      __half v[kPositions][kHalfPitch];
    } cache;
    float out[kWarps][kRowsPerWarp][kOutPitch];
  };
  union {
    __half q[kQueries][kHalfPitch];
    struct {
      float scores[kWarps][kRowsPerWarp][kScorePitch];
      __half weights[kWarps][kRowsPerWarp][kWeightPitch];
    } softmax;
  };
};

// Rows tile..tile+63 of the head's K (and V) cache as f16, zeros past
// last_position and past the head's dims.
template <int kDims>
__device__ void load_tile(const Attention& a, int tile, int last_position, int kv_offset, bool with_v,
                          AttentionShared<kDims>& s) {
  const int kv_width = a.kv_heads * a.head_dim;
  if (a.head_dim % 4 == 0) {  // rows 16-byte aligned: 4 dims per load
    for (int i = static_cast<int>(threadIdx.x); i < kPositions * kDims / 4; i += kThreads) {
      const int p = i / (kDims / 4), d = i % (kDims / 4) * 4;
      const bool inside = tile + p <= last_position && d < a.head_dim;
      const std::size_t at = static_cast<std::size_t>(tile + p) * kv_width + kv_offset + d;
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float4 k = inside ? *reinterpret_cast<const float4*>(a.k_cache + at) : zero;
      *reinterpret_cast<__half2*>(&s.cache.k[p][d]) = __floats2half2_rn(k.x, k.y);
      *reinterpret_cast<__half2*>(&s.cache.k[p][d + 2]) = __floats2half2_rn(k.z, k.w);
      if (with_v) {
        const float4 v = inside ? *reinterpret_cast<const float4*>(a.v_cache + at) : zero;
        *reinterpret_cast<__half2*>(&s.cache.v[p][d]) = __floats2half2_rn(v.x, v.y);
        *reinterpret_cast<__half2*>(&s.cache.v[p][d + 2]) = __floats2half2_rn(v.z, v.w);
      }
    }
    return;
  }
  for (int i = static_cast<int>(threadIdx.x); i < kPositions * kDims; i += kThreads) {
    const int p = i / kDims, d = i % kDims;
    const bool inside = tile + p <= last_position && d < a.head_dim;
    const std::size_t at = static_cast<std::size_t>(tile + p) * kv_width + kv_offset + d;
    s.cache.k[p][d] = __float2half_rn(inside ? a.k_cache[at] : 0.0f);
    if (with_v) s.cache.v[p][d] = __float2half_rn(inside ? a.v_cache[at] : 0.0f);
  }
}

// This warp's 16 x 64 scores of the tile into its shared score rows.
template <int kDims>
__device__ void score_tile(const wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> (&q)[kDims / 16],
                           AttentionShared<kDims>& s, int warp) {
  for (int j = 0; j < kPositions / 16; ++j) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < kDims / 16; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> k;  // K^T: column p is K row p
      wmma::load_matrix_sync(k, &s.cache.k[16 * j][16 * kk], AttentionShared<kDims>::kHalfPitch);
      wmma::mma_sync(acc, q[kk], k, acc);
    }
    wmma::store_matrix_sync(&s.softmax.scores[warp][0][16 * j], acc, AttentionShared<kDims>::kScorePitch,
                            wmma::mem_row_major);
  }
  __syncwarp();
}

template <int kDims>
__global__ void __launch_bounds__(kThreads) attention_f16_kernel(Attention a, int tokens) {
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  auto& s = *reinterpret_cast<AttentionShared<kDims>*>(shared_bytes);
  const int head = static_cast<int>(blockIdx.x), first_query = static_cast<int>(blockIdx.y) * kQueries;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int queries = min(kQueries, tokens - first_query), start = *a.position, dims = a.head_dim;
  const int q_width = a.heads * dims, kv_offset = head / (a.heads / a.kv_heads) * dims;
  for (int i = static_cast<int>(threadIdx.x); i < kQueries * kDims; i += kThreads) {
    const int query = i / kDims, d = i % kDims;
    const float v = query < queries && d < dims ? a.q[static_cast<std::size_t>(first_query + query) * q_width + head * dims + d] : 0.0f;
    s.q[query][d] = __float2half_rn(v * a.scale);
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> q[kDims / 16];
#pragma unroll
  for (int kk = 0; kk < kDims / 16; ++kk) {
    wmma::load_matrix_sync(q[kk], &s.q[warp * kRowsPerWarp][16 * kk], AttentionShared<kDims>::kHalfPitch);
  }
  // Lanes 2r and 2r + 1 hold row r's softmax, 32 columns each.
  const int row = lane / 2, half = lane % 2;
  const int own = start + first_query + warp * kRowsPerWarp + row;  // the row's query position
  const bool real_row = warp * kRowsPerWarp + row < queries;
  const int warp_last = start + first_query + min(queries - 1, warp * kRowsPerWarp + kRowsPerWarp - 1);
  const int last_position = start + first_query + queries - 1;
  const bool warp_has_rows = warp * kRowsPerWarp < queries;
  float m = kNoScore, l = 0.0f;
  for (int pass = 0; pass < 2; ++pass) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> out[kDims / 16];
#pragma unroll
    for (auto& f : out) wmma::fill_fragment(f, 0.0f);
    for (int tile = 0; tile <= last_position; tile += kPositions) {
      __syncthreads();  // the previous tile (and, the first time, Q's staging) is used up
      load_tile(a, tile, last_position, kv_offset, pass == 1, s);
      __syncthreads();
      if (!warp_has_rows || tile > warp_last) continue;  // every position of the tile is after the warp's queries
      score_tile<kDims>(q, s, warp);
      // The row's lanes take alternate columns (2c + half): neighbouring banks.
      const float* scores = &s.softmax.scores[warp][row][half];
      if (pass == 0) {  // the row's running max and exp-sum
        float peak = kNoScore;
        for (int c = 0; c < 32; ++c) {
          if (real_row && tile + 2 * c + half <= own) peak = fmaxf(peak, scores[2 * c]);
        }
        peak = fmaxf(peak, __shfl_xor_sync(detail::kFullWarp, peak, 1));
        const float m_new = fmaxf(m, peak);
        float sum = 0.0f;
        for (int c = 0; c < 32; ++c) {
          if (real_row && tile + 2 * c + half <= own) sum += expf(scores[2 * c] - m_new);
        }
        sum += __shfl_xor_sync(detail::kFullWarp, sum, 1);
        l = l * expf(m - m_new) + sum;
        m = m_new;
        continue;
      }
      // The final weights (0 for masked positions), then out += P V.
      __half* weights = &s.softmax.weights[warp][row][half];
      const float inv = real_row ? 1.0f / l : 0.0f;
      for (int c = 0; c < 32; ++c) {
        const bool seen = real_row && tile + 2 * c + half <= own;
        weights[2 * c] = __float2half_rn(seen ? expf(scores[2 * c] - m) * inv : 0.0f);
      }
      __syncwarp();
#pragma unroll
      for (int kk = 0; kk < kPositions / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> p;
        wmma::load_matrix_sync(p, &s.softmax.weights[warp][0][16 * kk], AttentionShared<kDims>::kWeightPitch);
#pragma unroll
        for (int n = 0; n < kDims / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> v;
          wmma::load_matrix_sync(v, &s.cache.v[16 * kk][16 * n], AttentionShared<kDims>::kHalfPitch);
          wmma::mma_sync(out[n], p, v, out[n]);
        }
      }
      __syncwarp();
    }
    if (pass == 0) continue;
    __syncthreads();  // K and V are used up: their space takes the output
#pragma unroll
    for (int n = 0; n < kDims / 16; ++n) {
      wmma::store_matrix_sync(&s.out[warp][0][16 * n], out[n], AttentionShared<kDims>::kOutPitch, wmma::mem_row_major);
    }
    __syncwarp();
    for (int i = lane; i < kRowsPerWarp * dims; i += kWarpSize) {
      const int r = i / dims, d = i % dims, query = warp * kRowsPerWarp + r;
      if (query < queries) a.out[static_cast<std::size_t>(first_query + query) * q_width + head * dims + d] = s.out[warp][r][d];
    }
  }
}

template <int kDims>
int launch(cudaStream_t stream, const Attention& a, int tokens) {
  constexpr int kBytes = static_cast<int>(sizeof(AttentionShared<kDims>));
  static const cudaError_t allowed =
      cudaFuncSetAttribute(attention_f16_kernel<kDims>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (allowed != cudaSuccess) return static_cast<int>(allowed);
  attention_f16_kernel<kDims><<<dim3(a.heads, (tokens + kQueries - 1) / kQueries), kThreads, kBytes, stream>>>(a, tokens);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

bool attention_f16_fits(int head_dim) { return head_dim >= 1 && head_dim <= kMaxTensorHeadDim; }

int attention_rows_f16(Stream stream, const Attention& a, int tokens) {
  if (tokens < 1 || !attention_f16_fits(a.head_dim)) return static_cast<int>(cudaErrorInvalidValue);
  const auto s = static_cast<cudaStream_t>(stream);
  return a.head_dim <= 64 ? launch<64>(s, a, tokens) : launch<128>(s, a, tokens);
}

}  // namespace coli::kernels::cuda::decoder
