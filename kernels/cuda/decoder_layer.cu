// The decoder's non-matrix kernels for one token: RMSNorm, the q/k
// preparation (clip, norms, RoPE, KV append), attention over the cache and
// the router's top-k. Positions are read from device memory, so a captured
// graph serves every position.
#include <cuda_runtime.h>

#include "cuda/decoder_common.cuh"

namespace coli::kernels::cuda::decoder {
namespace {

constexpr int kNormThreads = 256;
constexpr int kAttentionThreads = 128;
constexpr int kDimsPerLane = kMaxHeadDim / kAttentionThreads;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* x, const float* weight, float* out, int n,
                                                               float eps) {
  float sum = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kNormThreads) sum += x[i] * x[i];
  const float scale = rsqrtf(block_sum(sum) / static_cast<float>(n) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kNormThreads) out[i] = x[i] * scale * weight[i];
}

// RMSNorm of `groups` slices of `size` floats in place: one warp per slice.
__device__ void norm_slices(float* v, int groups, int size, const float* weight, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  for (int g = static_cast<int>(threadIdx.x) / kWarpSize; g < groups; g += kNormThreads / kWarpSize) {
    float* slice = v + static_cast<std::size_t>(g) * size;
    float sum = 0;
    for (int i = lane; i < size; i += kWarpSize) sum += slice[i] * slice[i];
    const float scale = rsqrtf(warp_sum(sum) / static_cast<float>(size) + eps);
    for (int i = lane; i < size; i += kWarpSize) slice[i] = slice[i] * scale * weight[i];
  }
}

// RMSNorm of the whole of v (n floats) in place, by the block.
__device__ void norm_whole(float* v, int n, const float* weight, float eps) {
  float sum = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kNormThreads) sum += v[i] * v[i];
  const float scale = rsqrtf(block_sum(sum) / static_cast<float>(n) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kNormThreads) v[i] = v[i] * scale * weight[i];
}

// "Rotate half" RoPE of `heads` heads at `position` (table: cos, sin per pair).
__device__ void rotate(float* v, int heads, int head_dim, const float* table, int position) {
  const int half = head_dim / 2;
  for (int i = static_cast<int>(threadIdx.x); i < heads * half; i += kNormThreads) {
    const int head = i / half;
    const int pair = i % half;
    float* at = v + head * head_dim + pair;
    const float c = table[(static_cast<std::size_t>(position) * half + pair) * 2];
    const float s = table[(static_cast<std::size_t>(position) * half + pair) * 2 + 1];
    const float a = at[0];
    const float b = at[half];
    at[0] = a * c - b * s;
    at[half] = b * c + a * s;
  }
}

__global__ void __launch_bounds__(kNormThreads) qk_prep_kernel(QkPrep p) {
  const int q_width = p.heads * p.head_dim;
  const int kv_width = p.kv_heads * p.head_dim;
  if (p.clip > 0) {
    for (int i = static_cast<int>(threadIdx.x); i < q_width; i += kNormThreads) p.q[i] = fminf(fmaxf(p.q[i], -p.clip), p.clip);
    for (int i = static_cast<int>(threadIdx.x); i < kv_width; i += kNormThreads) {
      p.k[i] = fminf(fmaxf(p.k[i], -p.clip), p.clip);
      p.v[i] = fminf(fmaxf(p.v[i], -p.clip), p.clip);
    }
    __syncthreads();
  }
  if (p.norm_mode == 1) {
    norm_slices(p.q, p.heads, p.head_dim, p.q_norm, p.eps);
    norm_slices(p.k, p.kv_heads, p.head_dim, p.k_norm, p.eps);
  } else if (p.norm_mode == 2) {
    norm_whole(p.q, q_width, p.q_norm, p.eps);
    norm_whole(p.k, kv_width, p.k_norm, p.eps);
  }
  __syncthreads();
  const int position = *p.position;
  rotate(p.q, p.heads, p.head_dim, p.rope, position);
  rotate(p.k, p.kv_heads, p.head_dim, p.rope, position);
  __syncthreads();
  const std::size_t row = static_cast<std::size_t>(position) * kv_width;
  for (int i = static_cast<int>(threadIdx.x); i < kv_width; i += kNormThreads) {
    p.k_cache[row + i] = p.k[i];
    p.v_cache[row + i] = p.v[i];
  }
}

// One block per head: this thread scores positions lane, lane + 128, ...
// (into `scores`, which it alone reads back), then the softmax-weighted sum
// of V over tiles of 128 probabilities in shared memory.
__global__ void __launch_bounds__(kAttentionThreads) attention_kernel(Attention a) {
  __shared__ float q[kMaxHeadDim];
  __shared__ float tile[kAttentionThreads];
  const int head = static_cast<int>(blockIdx.x);
  const int lane = static_cast<int>(threadIdx.x);
  const int positions = *a.position + 1;
  const int kv_width = a.kv_heads * a.head_dim;
  const int kv_offset = head / (a.heads / a.kv_heads) * a.head_dim;
  float* scores = a.scores + static_cast<std::size_t>(head) * a.context;
  for (int d = lane; d < a.head_dim; d += kAttentionThreads) q[d] = a.q[head * a.head_dim + d];
  __syncthreads();
  float peak = -3.402823e38f;
  for (int p = lane; p < positions; p += kAttentionThreads) {
    const float* k = a.k_cache + static_cast<std::size_t>(p) * kv_width + kv_offset;
    float dot = 0;
    for (int d = 0; d < a.head_dim; ++d) dot += q[d] * k[d];
    scores[p] = dot * a.scale;
    peak = fmaxf(peak, scores[p]);
  }
  peak = block_max(peak);
  float sum = 0;
  for (int p = lane; p < positions; p += kAttentionThreads) sum += expf(scores[p] - peak);
  const float inv = 1.0f / block_sum(sum);
  float acc[kDimsPerLane] = {};
  for (int first = 0; first < positions; first += kAttentionThreads) {
    const int p = first + lane;  // this thread scored p itself
    tile[lane] = p < positions ? expf(scores[p] - peak) : 0.0f;
    __syncthreads();
    const int count = min(kAttentionThreads, positions - first);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kAttentionThreads;
      if (d >= a.head_dim) break;
      const float* v = a.v_cache + static_cast<std::size_t>(first) * kv_width + kv_offset + d;
      float value = acc[i];
      for (int j = 0; j < count; ++j) value += tile[j] * v[static_cast<std::size_t>(j) * kv_width];
      acc[i] = value;
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + i * kAttentionThreads;
    if (d < a.head_dim) a.out[head * a.head_dim + d] = acc[i] * inv;
  }
}

// True when (p, e) ranks before (best_p, best): probability desc, id asc.
__device__ __forceinline__ bool ranks_before(float p, int e, float best_p, int best) {
  return best < 0 || p > best_p || (p == best_p && e < best);
}

// One warp: each lane holds experts lane, lane + 32, ...; each of the top_k
// rounds is an argmax across the warp among the experts after the previous
// choice (in the same order).
__global__ void __launch_bounds__(kWarpSize) route_topk_kernel(Route r) {
  const int lane = static_cast<int>(threadIdx.x);
  float peak = -3.402823e38f;
  for (int e = lane; e < r.experts; e += kWarpSize) peak = fmaxf(peak, r.logits[e]);
  peak = warp_max(peak);
  float total = 0;
  for (int e = lane; e < r.experts; e += kWarpSize) total += expf(r.logits[e] - peak);
  total = warp_sum(total);
  int previous = -1;
  float previous_p = 3.402823e38f;
  float chosen_sum = 0;
  for (int i = 0; i < r.top_k; ++i) {
    int best = -1;
    float best_p = -1;
    for (int e = lane; e < r.experts; e += kWarpSize) {
      const float p = expf(r.logits[e] - peak) / total;
      const bool after_previous = p < previous_p || (p == previous_p && e > previous);
      if (after_previous && ranks_before(p, e, best_p, best)) {
        best = e;
        best_p = p;
      }
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const int other = __shfl_xor_sync(detail::kFullWarp, best, offset);
      const float other_p = __shfl_xor_sync(detail::kFullWarp, best_p, offset);
      if (other >= 0 && ranks_before(other_p, other, best_p, best)) {
        best = other;
        best_p = other_p;
      }
    }
    if (best < 0) {  // NaN logits: no expert ranks; slot -1 makes the layer's output NaN, which shows
      if (lane == 0) r.choices[i] = ExpertChoice{-1, detail::quiet_nan()};
      if (lane == 0 && r.ids != nullptr) r.ids[i] = 0;  // a valid id for the host; the weight is NaN
      continue;
    }
    previous = best;  // every lane holds the same winner
    previous_p = best_p;
    chosen_sum += best_p;
    if (lane == 0) {
      r.choices[i] = ExpertChoice{r.slot_of[best], best_p};
      if (r.ids != nullptr) r.ids[i] = best;
      r.counts[best] += 1;
    }
  }
  __syncwarp();
  if (r.renormalize && lane == 0) {
    for (int i = 0; i < r.top_k; ++i) r.choices[i].weight /= chosen_sum;
  }
}

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int rms_norm(Stream stream, const float* x, const float* weight, float* out, int n, float eps) {
  rms_norm_kernel<<<1, kNormThreads, 0, stream_of(stream)>>>(x, weight, out, n, eps);
  return static_cast<int>(cudaGetLastError());
}

int qk_prep(Stream stream, const QkPrep& p) {
  qk_prep_kernel<<<1, kNormThreads, 0, stream_of(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int attention(Stream stream, const Attention& a) {
  attention_kernel<<<a.heads, kAttentionThreads, 0, stream_of(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int route_topk(Stream stream, const Route& r) {
  route_topk_kernel<<<1, kWarpSize, 0, stream_of(stream)>>>(r);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::decoder
