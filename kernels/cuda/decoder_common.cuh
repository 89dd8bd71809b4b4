// Device code the decoder kernels share: a row of any container format
// dotted with float activations by one warp, and block-wide reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/decoder_kernels.h"
#include "cuda/quantized_rows.cuh"

namespace coli::kernels::cuda::decoder {

using detail::kWarpSize;
using detail::kWarpsPerBlock;
using detail::lane_zero;
using detail::warp_row;
using detail::warp_sum;

// Element i of a float-format row (f32, bf16, f16).
template <WeightFormat kFormat>
__device__ __forceinline__ float float_weight(const void* row, int i) {
  if constexpr (kFormat == WeightFormat::f32) {
    return __ldg(static_cast<const float*>(row) + i);
  } else if constexpr (kFormat == WeightFormat::bf16) {
    const unsigned short bits = __ldg(static_cast<const unsigned short*>(row) + i);
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  } else {
    return __half2float(__ushort_as_half(__ldg(static_cast<const unsigned short*>(row) + i)));
  }
}

// Columns per 16-byte load of a float-format row.
template <WeightFormat kFormat>
inline constexpr int kFloatsPerLoad = kFormat == WeightFormat::f32 ? 4 : 8;

// The kFloatsPerLoad weights of one 16-byte load of a float-format row.
template <WeightFormat kFormat>
__device__ __forceinline__ void unpack_float_load(uint4 w, float (&out)[kFloatsPerLoad<kFormat>]) {
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (kFormat == WeightFormat::f32) {
      out[j] = __uint_as_float(words[j]);
    } else if constexpr (kFormat == WeightFormat::bf16) {
      out[2 * j] = __uint_as_float(words[j] << 16);
      out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
    } else {
      out[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(words[j] & 0xffffu)));
      out[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(words[j] >> 16)));
    }
  }
}

// Row `row` of a float-format matrix, and whether it and the vectors given
// can be read 16 bytes at a time (cols whole loads, every pointer aligned).
template <WeightFormat kFormat>
__device__ __forceinline__ const void* float_row(const Matrix& m, int row) {
  constexpr int kBytes = kFormat == WeightFormat::f32 ? 4 : 2;
  return static_cast<const std::uint8_t*>(m.weights) + static_cast<std::size_t>(row) * m.cols * kBytes;
}
template <WeightFormat kFormat>
__device__ __forceinline__ bool wide_loads(const Matrix& m, const void* row, const void* x, const void* y = nullptr) {
  return m.cols % kFloatsPerLoad<kFormat> == 0 && detail::aligned16(row) && detail::aligned16(x) &&
         (y == nullptr || detail::aligned16(y));
}

// This lane's share of a float-format row (f32, bf16, f16) times x, 16
// bytes of the row per load, four loads in flight per lane, when
// wide_loads(): a router row of 2048 bf16 is then 8 loads per lane instead
// of 64 two-byte ones, one after another. Else one element per lane per step.
template <WeightFormat kFormat>
__device__ __forceinline__ float float_row_partial(const Matrix& m, int row, const float* x) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  constexpr int kPerLoad = kFloatsPerLoad<kFormat>;
  const void* weights = float_row<kFormat>(m, row);
  float sum = 0;
  if (wide_loads<kFormat>(m, weights, x)) {
#pragma unroll 4
    for (int c = lane; c < m.cols / kPerLoad; c += kWarpSize) {
      float w[kPerLoad];
      unpack_float_load<kFormat>(__ldg(static_cast<const uint4*>(weights) + c), w);
#pragma unroll
      for (int j = 0; j < kPerLoad; j += 4) {
        const float4 a = reinterpret_cast<const float4*>(x)[(c * kPerLoad + j) / 4];
        sum += w[j] * a.x + w[j + 1] * a.y + w[j + 2] * a.z + w[j + 3] * a.w;
      }
    }
    return sum;
  }
  for (int c = lane; c < m.cols; c += kWarpSize) sum += float_weight<kFormat>(weights, c) * x[c];
  return sum;
}

// This lane's share of (W x)[row] (row_dot sums it over the warp). Quantised
// rows take the loaders of quantized_rows.cuh, float rows float_row_partial.
template <WeightFormat kFormat>
__device__ __forceinline__ float row_partial(const Matrix& m, int row, const float* x) {
  if constexpr (kFormat == WeightFormat::q8_row || kFormat == WeightFormat::q4_g64) {
    const detail::MatrixPointers p{static_cast<const std::uint8_t*>(m.weights), m.scales, m.rows, m.cols};
    float partial[1];
    detail::row_partials<kFormat, 1>(p, row, x, 1, partial);
    return partial[0];
  } else {
    return float_row_partial<kFormat>(m, row, x);
  }
}

// (W x)[row], every lane of the warp holding the sum.
template <WeightFormat kFormat>
__device__ __forceinline__ float row_dot(const Matrix& m, int row, const float* x) {
  return warp_sum(row_partial<kFormat>(m, row, x));
}

// The record of a choice, or null when its slot is outside the slab (the
// output then turns NaN: wrong output that shows, never a stray read).
__device__ __forceinline__ const std::uint8_t* record_of(const Experts& e, int slot) {
  if (slot < 0 || slot >= e.slot_count) return nullptr;
  return e.slab + static_cast<std::size_t>(slot) * e.layout.record_stride;
}

__device__ __forceinline__ Matrix part(const Experts& e, const std::uint8_t* record, std::size_t weights,
                                       std::size_t scales, int rows, int cols) {
  return Matrix{e.layout.format, rows, cols, record + weights, record + scales};
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// f16 of an activation: saturated at the largest finite f16, NaN kept.
__device__ __forceinline__ __half to_half(float v) {
  return __float2half_rn(v != v ? v : fminf(fmaxf(v, -65504.0f), 65504.0f));
}

// silu((gate x)[row]) * (up x)[row], every lane holding it: both rows'
// loads in flight before the two sums (decoder_q8.cuh overloads it for int8
// activations).
template <WeightFormat kFormat>
__device__ __forceinline__ float swiglu_row(const Matrix& gate, const Matrix& up, int row, const float* x) {
  const float g = row_partial<kFormat>(gate, row, x);
  const float u = row_partial<kFormat>(up, row, x);
  return silu(warp_sum(g)) * warp_sum(u);
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(detail::kFullWarp, value, offset));
  }
  return value;
}

// The sum (or max) over the block, returned to every thread; blockDim.x a
// multiple of 32, at most 1024. Every thread of the block must call it.
template <bool kMax>
__device__ float block_reduce(float value) {
  __shared__ float partial[32];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  value = kMax ? warp_max(value) : warp_sum(value);
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    float v = lane < warps ? partial[lane] : (kMax ? -3.402823e38f : 0.0f);
    v = kMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  const float result = partial[0];
  __syncthreads();  // partial is reused by the next call
  return result;
}
__device__ __forceinline__ float block_sum(float value) { return block_reduce<false>(value); }
__device__ __forceinline__ float block_max(float value) { return block_reduce<true>(value); }

inline dim3 row_grid(int rows, int y = 1) { return dim3((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, y); }
inline dim3 row_block() { return dim3(kWarpsPerBlock * kWarpSize); }

// Launch<format>::run(args...) for the runtime format: the one switch from a
// format to a kernel instantiation.
template <template <WeightFormat> class Launch, typename... Args>
void for_format(WeightFormat format, const Args&... args) {
  switch (format) {
    case WeightFormat::f32: Launch<WeightFormat::f32>::run(args...); break;
    case WeightFormat::bf16: Launch<WeightFormat::bf16>::run(args...); break;
    case WeightFormat::f16: Launch<WeightFormat::f16>::run(args...); break;
    case WeightFormat::q8_row: Launch<WeightFormat::q8_row>::run(args...); break;
    case WeightFormat::q4_g64: Launch<WeightFormat::q4_g64>::run(args...); break;
  }
}

}  // namespace coli::kernels::cuda::decoder
