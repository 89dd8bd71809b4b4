// The decoder's non-matrix kernels for one token: RMSNorm, the q/k
// preparation (clip, norms, RoPE, KV append), attention over the cache and
// the router's top-k. Positions are read from device memory, so a captured
// graph serves every position.
#include <cuda_runtime.h>

#include "cuda/decoder_batch.h"
#include "cuda/decoder_attention.cuh"
#include "cuda/decoder_q8.cuh"

namespace coli::kernels::cuda::decoder {
namespace {

constexpr int kNormThreads = 256;

// One block per row (decode: one row); with kQuantise (n % kQ8Block == 0)
// each warp writes whole blocks of the row and quantises them into q.
template <bool kQuantise>
__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* x, const float* weight, float* out,
                                                               Q8Activations q, int n, float eps) {
  x += static_cast<std::size_t>(blockIdx.x) * n;
  out += static_cast<std::size_t>(blockIdx.x) * n;
  float sum = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kNormThreads) sum += x[i] * x[i];
  const float scale = rsqrtf(block_sum(sum) / static_cast<float>(n) + eps);
  if constexpr (!kQuantise) {
    for (int i = static_cast<int>(threadIdx.x); i < n; i += kNormThreads) out[i] = x[i] * scale * weight[i];
  } else {
    // kAhead blocks per warp per round, their loads issued before any
    // block's reductions (one round for 2048 values).
    constexpr int kWarps = kNormThreads / kWarpSize, kAhead = 8;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, blocks = n / kQ8Block;
    for (int first = static_cast<int>(threadIdx.x) / kWarpSize; first < blocks; first += kWarps * kAhead) {
      float value[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        const int i = (first + j * kWarps) * kQ8Block + lane;
        value[j] = first + j * kWarps < blocks ? x[i] * scale * weight[i] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        const int b = first + j * kWarps;
        if (b >= blocks) break;  // the same for the whole warp
        out[b * kQ8Block + lane] = value[j];
        quantize_block(value[j], q, static_cast<std::size_t>(blockIdx.x) * blocks + b);
      }
    }
  }
}

__device__ __forceinline__ float clipped(float v, float clip) { return clip > 0 ? fminf(fmaxf(v, -clip), clip) : v; }

// Rotation pair `pair` of head `head` of v (width floats): clipped, normed
// by `scale` and the norm weight (norm_mode 1: the head's, 2: the whole
// projection's), rotated ("rotate half", table: cos, sin per pair at
// `position`) and written back, and to `cache` (k's row) when given.
__device__ __forceinline__ void prepare_pair(float* v, int head, int pair, const QkPrep& p, const float* norm,
                                             float scale, int position, float* cache) {
  const int half = p.head_dim / 2;
  const int first = head * p.head_dim + pair, second = first + half;
  float a = clipped(v[first], p.clip), b = clipped(v[second], p.clip);
  if (p.norm_mode != 0) {
    const int weight_first = p.norm_mode == 1 ? pair : first;
    a *= scale * norm[weight_first];
    b *= scale * norm[weight_first + half];
  }
  const float2 rotation = reinterpret_cast<const float2*>(p.rope)[static_cast<std::size_t>(position) * half + pair];
  const float rotated_a = a * rotation.x - b * rotation.y, rotated_b = b * rotation.x + a * rotation.y;
  v[first] = rotated_a;
  v[second] = rotated_b;
  if (cache != nullptr) {
    cache[first] = rotated_a;
    cache[second] = rotated_b;
  }
}

// Clip, norm and rotate one projection of `heads` heads in place, in two
// passes over it (the norm's sums, then every rotation pair once): a warp
// per head for per-head norms, else the block over all pairs.
__device__ void prepare(float* v, int heads, const QkPrep& p, const float* norm, int position, float* cache) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize, warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int half = p.head_dim / 2;
  if (p.norm_mode == 1) {
    for (int head = warp; head < heads; head += kNormThreads / kWarpSize) {
      float sum = 0;
      for (int d = lane; d < p.head_dim; d += kWarpSize) {
        const float x = clipped(v[head * p.head_dim + d], p.clip);
        sum += x * x;
      }
      const float scale = rsqrtf(warp_sum(sum) / static_cast<float>(p.head_dim) + p.eps);
      __syncwarp();
      for (int pair = lane; pair < half; pair += kWarpSize) prepare_pair(v, head, pair, p, norm, scale, position, cache);
    }
    return;
  }
  float scale = 1;
  if (p.norm_mode == 2) {
    const int width = heads * p.head_dim;
    float sum = 0;
    for (int i = static_cast<int>(threadIdx.x); i < width; i += kNormThreads) {
      const float x = clipped(v[i], p.clip);
      sum += x * x;
    }
    scale = rsqrtf(block_sum(sum) / static_cast<float>(width) + p.eps);
  }
  for (int i = static_cast<int>(threadIdx.x); i < heads * half; i += kNormThreads) {
    prepare_pair(v, i / half, i % half, p, norm, scale, position, cache);
  }
}

// Blocks (token, 0) prepare q, blocks (token, 1) k (into the cache as it
// goes) and copy v, clipped, to the cache; token t is at position
// *p.position + t (decode: one token).
__global__ void __launch_bounds__(kNormThreads) qk_prep_kernel(QkPrep p) {
  const int token = static_cast<int>(blockIdx.x);
  const int position = *p.position + token;
  if (blockIdx.y == 0) {
    prepare(p.q + static_cast<std::size_t>(token) * p.heads * p.head_dim, p.heads, p, p.q_norm, position, nullptr);
    return;
  }
  const int kv_width = p.kv_heads * p.head_dim;
  const std::size_t row = static_cast<std::size_t>(position) * kv_width;
  const float* v = p.v + static_cast<std::size_t>(token) * kv_width;
  for (int i = static_cast<int>(threadIdx.x); i < kv_width; i += kNormThreads) p.v_cache[row + i] = clipped(v[i], p.clip);
  prepare(p.k + static_cast<std::size_t>(token) * kv_width, p.kv_heads, p, p.k_norm, position, p.k_cache + row);
}

// Head `head`'s chunk partials merged in position order by the block (read
// through the L2: other blocks of this launch may have written them).
__device__ void merge_head(const Attention& a, int head) {
  const int positions = *a.position + 1;
  const int used = (positions + kAttentionChunk - 1) / kAttentionChunk;
  const std::size_t chunks = (static_cast<std::size_t>(a.context) + kAttentionChunk - 1) / kAttentionChunk;
  const std::size_t stride = static_cast<std::size_t>(a.head_dim) + 2;
  const float* partials = a.scores + static_cast<std::size_t>(head) * chunks * stride;
  float peak = -3.402823e38f;
  for (int c = 0; c < used; ++c) peak = fmaxf(peak, __ldcg(partials + c * stride));
  float sum = 0.0f;
  for (int c = 0; c < used; ++c) sum += __ldcg(partials + c * stride + 1) * expf(__ldcg(partials + c * stride) - peak);
  const float inv = 1.0f / sum;
  // With out_q (head_dim % kQ8Block == 0), a warp's 32 dims are one block.
  for (int d = static_cast<int>(threadIdx.x); d < a.head_dim; d += kAttentionThreads) {
    float value = 0.0f;
    for (int c = 0; c < used; ++c) {
      value += __ldcg(partials + c * stride + 2 + d) * expf(__ldcg(partials + c * stride) - peak);
    }
    const int at = head * a.head_dim + d;
    a.out[at] = value * inv;
    if (a.out_q.values != nullptr) quantize_block(value * inv, a.out_q, static_cast<std::size_t>(at) / kQ8Block);
  }
}

// One block per head: the chunks' partials merged (attention without arrivals).
__global__ void __launch_bounds__(kAttentionThreads) attention_merge_kernel(Attention a) {
  merge_head(a, static_cast<int>(blockIdx.x));
}

// One block per (head, chunk): the block's warps attend the chunk's
// positions (attend_span), then the block writes its softmax partial.
template <int kLaneDims>
__global__ void __launch_bounds__(kAttentionThreads) attention_chunk_kernel(Attention a) {
  __shared__ float weighted[kMaxHeadDim];
  const int head = static_cast<int>(blockIdx.x), chunk = static_cast<int>(blockIdx.y);
  const int positions = *a.position + 1;
  const int first = chunk * kAttentionChunk;
  if (first >= positions) return;  // the whole block
  const SpanPartial span =
      attend_span<kLaneDims>(a, a.q + head * a.head_dim, head, first, min(first + kAttentionChunk, positions), weighted);
  const std::size_t chunks = (static_cast<std::size_t>(a.context) + kAttentionChunk - 1) / kAttentionChunk;
  float* partial = a.scores + (static_cast<std::size_t>(head) * chunks + chunk) * (a.head_dim + 2);
  if (threadIdx.x == 0) {
    partial[0] = span.peak;
    partial[1] = span.sum;
  }
  for (int d = static_cast<int>(threadIdx.x); d < a.head_dim; d += kAttentionThreads) partial[2 + d] = weighted[d];
  if (a.arrivals == nullptr) return;  // attention_merge_kernel follows
  __shared__ bool last;
  __threadfence();  // this block's partial visible to the last block before it counts itself
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(a.arrivals + head, 1u) == static_cast<unsigned>((positions + kAttentionChunk - 1) / kAttentionChunk) - 1;
  }
  __syncthreads();
  if (!last) return;
  merge_head(a, head);
  if (threadIdx.x == 0) a.arrivals[head] = 0;
}

template <int kLaneDims>
struct AttentionChunkLaunch {
  static void run(cudaStream_t s, const Attention& a, int chunks) {
    attention_chunk_kernel<kLaneDims><<<dim3(a.heads, chunks), dim3(kAttentionThreads), 0, s>>>(a);
  }
};

// True when (p, e) ranks before (best_p, best): probability desc, id asc.
__device__ __forceinline__ bool ranks_before(float p, int e, float best_p, int best) {
  return best < 0 || p > best_p || (p == best_p && e < best);
}


// One warp: lane holds the probabilities of experts lane, lane + 32, ... in
// registers (computed once); each of the top_k rounds is an argmax across
// the warp (probability desc, id asc), and the winner's lane drops it.
// Only probabilities >= 0 compete, so NaN logits choose nothing.
// Called by one warp (lane = its lane); `logits` in global or shared memory.
template <int kRouterSlots>
__device__ void route_warp_slots(const Route& r, const float* logits, int lane) {
  float peak = -3.402823e38f;
  for (int e = lane; e < r.experts; e += kWarpSize) peak = fmaxf(peak, logits[e]);
  peak = warp_max(peak);
  float prob[kRouterSlots];
  float total = 0;
#pragma unroll
  for (int j = 0; j < kRouterSlots; ++j) {
    const int e = lane + j * kWarpSize;
    prob[j] = e < r.experts ? expf(logits[e] - peak) : -1.0f;
    total += e < r.experts ? prob[j] : 0.0f;
  }
  total = warp_sum(total);
#pragma unroll
  for (int j = 0; j < kRouterSlots; ++j) prob[j] = prob[j] >= 0.0f ? prob[j] / total : prob[j];
  // Choice i is kept by lane i % 32 (slot i / 32) and written by it once
  // the sum is known: no lane waits on a global read or write per round.
  constexpr int kKept = (kMaxSelectedExperts + kWarpSize - 1) / kWarpSize;
  int kept[kKept];
  float kept_p[kKept];
  float chosen_sum = 0;
  for (int i = 0; i < r.top_k; ++i) {
    int best = -1;
    float best_p = -1;
#pragma unroll
    for (int j = 0; j < kRouterSlots; ++j) {
      const int e = lane + j * kWarpSize;
      if (prob[j] >= 0.0f && ranks_before(prob[j], e, best_p, best)) {
        best = e;
        best_p = prob[j];
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
#pragma unroll
    for (int k = 0; k < kKept; ++k) {
      if (i == k * kWarpSize + lane) {
        kept[k] = best;  // -1: NaN logits, no expert ranks
        kept_p[k] = best_p;
      }
    }
    if (best < 0) continue;
#pragma unroll
    for (int j = 0; j < kRouterSlots; ++j) {
      if (lane + j * kWarpSize == best) prob[j] = -1.0f;  // every lane holds the same winner
    }
    chosen_sum += best_p;
  }
#pragma unroll
  for (int k = 0; k < kKept; ++k) {
    const int i = k * kWarpSize + lane;
    if (i >= r.top_k) break;
    if (kept[k] < 0) {  // slot -1 makes the layer's output NaN, which shows
      r.choices[i] = ExpertChoice{-1, detail::quiet_nan()};
      if (r.ids != nullptr) r.ids[i] = 0;  // a valid id for the host; the weight is NaN
      continue;
    }
    r.choices[i] = ExpertChoice{r.slot_of[kept[k]], r.renormalize ? kept_p[k] / chosen_sum : kept_p[k]};
    if (r.ids != nullptr) r.ids[i] = kept[k];
    atomicAdd(r.counts + kept[k], 1u);  // a prefill batch routes its tokens in parallel
  }
}

// Over 256 experts: a call of its own, so its registers do not crowd the
// caller's.
__device__ __noinline__ void route_warp_wide(const Route& r, const float* logits, int lane) {
  route_warp_slots<kMaxRoutedExperts / kWarpSize>(r, logits, lane);
}

// route_warp_slots with the fewest probability registers for r.experts
// (each top-k round walks every slot).
__device__ void route_warp(const Route& r, const float* logits, int lane) {
  if (r.experts <= 2 * kWarpSize) return route_warp_slots<2>(r, logits, lane);
  if (r.experts <= 4 * kWarpSize) return route_warp_slots<4>(r, logits, lane);
  if (r.experts <= 8 * kWarpSize) return route_warp_slots<8>(r, logits, lane);
  route_warp_wide(r, logits, lane);
}

// Route r for token blockIdx.x (decode: one token): its logits and choices.
__device__ Route route_of_token(Route r) {
  const int token = static_cast<int>(blockIdx.x);
  r.choices += static_cast<std::size_t>(token) * r.top_k;
  if (token > 0) r.ids = nullptr;  // ids are a hybrid decode step's
  return r;
}

__global__ void __launch_bounds__(kWarpSize) route_topk_kernel(Route r) {
  route_warp(route_of_token(r), r.logits + static_cast<std::size_t>(blockIdx.x) * r.experts,
             static_cast<int>(threadIdx.x));
}

constexpr int kNormRouteThreads = 1024;

// The router's input, by the whole block: h (shared memory) = RMSNorm(x),
// also written to `out` when given (the experts read it from global memory;
// the router reads the shared copy, as a kernel's own writes are not read
// through __ldg).
__device__ void router_input(const NormRoute& r, const float* x, float* h, float* out) {
  const int threads = static_cast<int>(blockDim.x);
  float sum = 0;
  for (int i = static_cast<int>(threadIdx.x); i < r.hidden; i += threads) sum += x[i] * x[i];
  const float scale = rsqrtf(block_sum(sum) / static_cast<float>(r.hidden) + r.eps);
  for (int i = static_cast<int>(threadIdx.x); i < r.hidden; i += threads) {
    const float value = x[i] * scale * r.norm[i];
    h[i] = value;
    if (out != nullptr) out[i] = value;
  }
  __syncthreads();
}

// h (shared memory) quantised into q by the block's warps.
__device__ void quantize_shared(const float* h, int n, const Q8Activations& q) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  for (int b = static_cast<int>(threadIdx.x) / kWarpSize; b < n / kQ8Block; b += blockDim.x / kWarpSize) {
    quantize_block(h[b * kQ8Block + lane], q, b);
  }
}

// logits[row] = the router's row . h for rows first, first + stride, ...:
// a warp per row, this block's warps from `first`.
template <WeightFormat kFormat>
__device__ void router_rows(const Matrix& router, const float* h, float* logits, int first, int stride) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  for (int row = first + static_cast<int>(threadIdx.x) / kWarpSize; row < router.rows; row += stride) {
    const float value = row_dot<kFormat>(router, row, h);
    if (lane == 0) logits[row] = value;
  }
}

// One block per token (decode: one): the router's input, its rows by the
// block's warps, then warp 0 routes.
template <WeightFormat kFormat>
__global__ void __launch_bounds__(kNormRouteThreads) norm_route_kernel(NormRoute r) {
  __shared__ __align__(16) float h[kMaxRouterHidden];
  __shared__ float logits[kMaxRoutedExperts];
  const std::size_t token = static_cast<std::size_t>(blockIdx.x) * r.hidden;
  router_input(r, r.x + token, h, r.h + token);
  router_rows<kFormat>(r.router, h, logits, 0, kNormRouteThreads / kWarpSize);
  __syncthreads();
  if (threadIdx.x < kWarpSize) route_warp(route_of_token(r.route), logits, static_cast<int>(threadIdx.x));
}

constexpr int kSplitRouteThreads = 256;
constexpr int kSplitRouteWarps = kSplitRouteThreads / kWarpSize;

// Router row `row` times RMSNorm(x) without forming it: the row's dot with
// x * norm and x's sum of squares in one pass (the norm's scale is a
// factor of the whole dot), so a warp needs no block-wide sum before its
// loads; every lane holds the logit.
template <WeightFormat kFormat>
__device__ __forceinline__ float normed_router_logit(const NormRoute& r, int row) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const void* weights = float_row<kFormat>(r.router, row);
  float dot = 0, squares = 0;
  if (wide_loads<kFormat>(r.router, weights, r.x, r.norm)) {
    constexpr int kPerLoad = kFloatsPerLoad<kFormat>;
#pragma unroll 4
    for (int c = lane; c < r.hidden / kPerLoad; c += kWarpSize) {
      float w[kPerLoad];
      unpack_float_load<kFormat>(__ldg(static_cast<const uint4*>(weights) + c), w);
#pragma unroll
      for (int j = 0; j < kPerLoad; j += 4) {
        const float4 v = reinterpret_cast<const float4*>(r.x)[(c * kPerLoad + j) / 4];
        const float4 n = __ldg(reinterpret_cast<const float4*>(r.norm) + (c * kPerLoad + j) / 4);
        dot += w[j] * v.x * n.x + w[j + 1] * v.y * n.y + w[j + 2] * v.z * n.z + w[j + 3] * v.w * n.w;
        squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
    }
  } else {
    for (int c = lane; c < r.hidden; c += kWarpSize) {
      const float v = r.x[c];
      dot += float_weight<kFormat>(weights, c) * v * r.norm[c];
      squares += v * v;
    }
  }
  return warp_sum(dot) * rsqrtf(warp_sum(squares) / static_cast<float>(r.hidden) + r.eps);
}

// One token, the router's rows over the grid (a warp per row, each from x
// directly: normed_router_logit); the last block to finish (a fenced
// arrival count) routes over all logits, and block 0, once it has counted
// itself, writes h = RMSNorm(x) and h's int8 copy for the experts.
template <WeightFormat kFormat>
__global__ void __launch_bounds__(kSplitRouteThreads) norm_route_split_kernel(NormRoute r) {
  __shared__ __align__(16) float h[kMaxRouterHidden];
  __shared__ float logits[kMaxRoutedExperts];
  __shared__ bool last;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  for (int row = static_cast<int>(blockIdx.x) * kSplitRouteWarps + warp; row < r.router.rows;
       row += static_cast<int>(gridDim.x) * kSplitRouteWarps) {
    const float logit = normed_router_logit<kFormat>(r, row);
    if (lane_zero()) r.logits[row] = logit;
  }
  __threadfence();  // this block's logits visible to the last block before it counts itself
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(r.arrivals, 1u) == gridDim.x - 1;
  if (blockIdx.x == 0) {
    router_input(r, r.x, h, r.h);
    if (r.h_q.values != nullptr) quantize_shared(h, r.hidden, r.h_q);
  }
  __syncthreads();
  if (!last) return;
  for (int e = static_cast<int>(threadIdx.x); e < r.router.rows; e += kSplitRouteThreads) logits[e] = __ldcg(r.logits + e);
  __syncthreads();
  // One token: r.route as given, not route_of_token (blockIdx is the last block's).
  if (threadIdx.x < kWarpSize) route_warp(r.route, logits, static_cast<int>(threadIdx.x));
  if (threadIdx.x == 0) *r.arrivals = 0;
}

template <WeightFormat kFormat>
struct NormRouteSplitLaunch {
  static void run(cudaStream_t s, const NormRoute& r) {
    const int blocks = (r.router.rows + kSplitRouteWarps - 1) / kSplitRouteWarps;
    norm_route_split_kernel<kFormat><<<dim3(blocks), dim3(kSplitRouteThreads), 0, s>>>(r);
  }
};

template <WeightFormat kFormat>
struct NormRouteLaunch {
  static void run(cudaStream_t s, const NormRoute& r, int tokens) {
    norm_route_kernel<kFormat><<<tokens, kNormRouteThreads, 0, s>>>(r);
  }
};

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int rms_norm(Stream stream, const float* x, const float* weight, float* out, int n, float eps) {
  return rms_norm_rows(stream, x, weight, out, n, 1, eps);
}

int rms_norm_rows(Stream stream, const float* x, const float* weight, float* out, int n, int rows, float eps) {
  if (rows < 1) return static_cast<int>(cudaErrorInvalidValue);
  rms_norm_kernel<false><<<rows, kNormThreads, 0, stream_of(stream)>>>(x, weight, out, Q8Activations{}, n, eps);
  return static_cast<int>(cudaGetLastError());
}

int rms_norm_q8(Stream stream, const float* x, const float* weight, float* out, Q8Activations q, int n, float eps) {
  if (!q.on() || n < kQ8Block || n % kQ8Block != 0) return static_cast<int>(cudaErrorInvalidValue);
  rms_norm_kernel<true><<<dim3(1), dim3(kNormThreads), 0, stream_of(stream)>>>(x, weight, out, q, n, eps);
  return static_cast<int>(cudaGetLastError());
}

int qk_prep(Stream stream, const QkPrep& p) { return qk_prep_rows(stream, p, 1); }

int qk_prep_rows(Stream stream, const QkPrep& p, int tokens) {
  if (tokens < 1) return static_cast<int>(cudaErrorInvalidValue);
  qk_prep_kernel<<<dim3(tokens, 2), kNormThreads, 0, stream_of(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int attention(Stream stream, const Attention& a) {
  if (a.out_q.on() && a.head_dim % kQ8Block != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int chunks = (a.context + kAttentionChunk - 1) / kAttentionChunk;
  for_lane_dims<AttentionChunkLaunch>(a.head_dim, stream_of(stream), a, chunks);
  if (const cudaError_t launched = cudaGetLastError(); launched != cudaSuccess) return static_cast<int>(launched);
  if (a.arrivals != nullptr) return 0;  // merged by each head's last chunk block
  attention_merge_kernel<<<dim3(a.heads), dim3(kAttentionThreads), 0, stream_of(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

bool norm_route_fits(const Matrix& router, int hidden) {
  const bool float_rows = router.format == WeightFormat::f32 || router.format == WeightFormat::bf16 ||
                          router.format == WeightFormat::f16;
  return float_rows && hidden <= kMaxRouterHidden && router.cols == hidden && router.rows <= kMaxRoutedExperts;
}

int norm_route(Stream stream, const NormRoute& r) {
  if (r.arrivals == nullptr || r.logits == nullptr) return norm_route_rows(stream, r, 1);
  if (!norm_route_fits(r.router, r.hidden) || (r.h_q.on() && r.hidden % kQ8Block != 0)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  switch (r.router.format) {
    case WeightFormat::f32: NormRouteSplitLaunch<WeightFormat::f32>::run(stream_of(stream), r); break;
    case WeightFormat::bf16: NormRouteSplitLaunch<WeightFormat::bf16>::run(stream_of(stream), r); break;
    case WeightFormat::f16: NormRouteSplitLaunch<WeightFormat::f16>::run(stream_of(stream), r); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

int norm_route_rows(Stream stream, const NormRoute& r, int tokens) {
  if (!norm_route_fits(r.router, r.hidden) || tokens < 1) return static_cast<int>(cudaErrorInvalidValue);
  switch (r.router.format) {
    case WeightFormat::f32: NormRouteLaunch<WeightFormat::f32>::run(stream_of(stream), r, tokens); break;
    case WeightFormat::bf16: NormRouteLaunch<WeightFormat::bf16>::run(stream_of(stream), r, tokens); break;
    case WeightFormat::f16: NormRouteLaunch<WeightFormat::f16>::run(stream_of(stream), r, tokens); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

int route_topk(Stream stream, const Route& r) { return route_rows(stream, r, 1); }

int route_rows(Stream stream, const Route& r, int tokens) {
  if (tokens < 1) return static_cast<int>(cudaErrorInvalidValue);
  route_topk_kernel<<<tokens, kWarpSize, 0, stream_of(stream)>>>(r);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::decoder
