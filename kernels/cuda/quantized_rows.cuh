// Device code shared by the kernels: one warp computes the dot products of
// one matrix row with up to kTile tokens' activations. Weights stream in
// 16-byte loads, consecutive lanes reading consecutive chunks (a warp reads
// 512 contiguous bytes per step), each chunk decoded once for all tokens;
// float accumulation, then a butterfly reduction so every lane holds the sums.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernel_launch.h"

namespace coli::kernels::cuda::detail {

inline constexpr unsigned kFullWarp = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullWarp, value, offset);
  return value;
}

__device__ __forceinline__ bool aligned16(const void* pointer) {
  return (reinterpret_cast<std::uintptr_t>(pointer) & 15u) == 0;
}

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// 16 int8 weights of one load (byte i = column i; the GPU is little-endian).
__device__ __forceinline__ void decode_q8(const uint4& chunk, float (&w)[16]) {
  const unsigned words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) w[4 * i + b] = static_cast<float>(static_cast<signed char>(words[i] >> (8 * b)));
  }
}

// 32 int4 weights of one load: byte i holds column 2i in its low nibble and
// 2i+1 in its high one, so nibble n of 32-bit word i is column 8i + n.
__device__ __forceinline__ void decode_q4(const uint4& chunk, float (&w)[32]) {
  const unsigned words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int n = 0; n < 8; ++n) w[8 * i + n] = static_cast<float>(static_cast<int>((words[i] >> (4 * n)) & 15u) - 8);
  }
}

// sum_i w[i] * x[i], x 16-byte aligned.
template <int N>
__device__ __forceinline__ float dot_chunk(const float (&w)[N], const float* x) {
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float sum = 0;
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const float4 v = __ldg(x4 + i);
    sum += w[4 * i] * v.x + w[4 * i + 1] * v.y + w[4 * i + 2] * v.z + w[4 * i + 3] * v.w;
  }
  return sum;
}

// dots[t] = row `row` of a q8_row matrix times x + t * cols, for t < valid
// (dots[t] = 0 beyond). Rows whose bytes are not 16-byte aligned (cols not a
// multiple of 16) take one byte per lane instead.
template <int kTile>
__device__ void q8_row_dots(const MatrixPointers& m, int row, const float* x, int valid, float (&dots)[kTile]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const std::size_t cols = static_cast<std::size_t>(m.cols);
  const auto* weights = reinterpret_cast<const signed char*>(m.weights) + static_cast<std::size_t>(row) * cols;
  float partial[kTile] = {};
  if (cols % 16 == 0 && aligned16(weights) && aligned16(x)) {
    const uint4* chunks = reinterpret_cast<const uint4*>(weights);
    for (std::size_t c = lane; c < cols / 16; c += kWarpSize) {
      float w[16];
      decode_q8(__ldg(chunks + c), w);
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        if (t < valid) partial[t] += dot_chunk(w, x + t * cols + c * 16);
      }
    }
  } else {
    for (std::size_t c = lane; c < cols; c += kWarpSize) {
      const float w = static_cast<float>(weights[c]);
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        if (t < valid) partial[t] += w * x[t * cols + c];
      }
    }
  }
  const float scale = static_cast<const float*>(m.scales)[row];
#pragma unroll
  for (int t = 0; t < kTile; ++t) dots[t] = scale * warp_sum(partial[t]);
}

// The same for q4_g64 (cols a multiple of 64, rows 16-byte aligned: checked
// by the host API). One load is 32 columns, half of one scale group.
template <int kTile>
__device__ void q4_row_dots(const MatrixPointers& m, int row, const float* x, int valid, float (&dots)[kTile]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const std::size_t cols = static_cast<std::size_t>(m.cols);
  const uint4* chunks = reinterpret_cast<const uint4*>(m.weights + static_cast<std::size_t>(row) * (cols / 2));
  const auto* scales = static_cast<const unsigned short*>(m.scales) + static_cast<std::size_t>(row) * (cols / 64);
  float partial[kTile] = {};
  for (std::size_t c = lane; c < cols / 32; c += kWarpSize) {
    float w[32];
    decode_q4(__ldg(chunks + c), w);
    const float scale = __half2float(__ushort_as_half(__ldg(scales + c / 2)));
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t < valid) partial[t] += scale * dot_chunk(w, x + t * cols + c * 32);
    }
  }
#pragma unroll
  for (int t = 0; t < kTile; ++t) dots[t] = warp_sum(partial[t]);
}

template <WeightFormat kFormat, int kTile>
__device__ __forceinline__ void row_dots(const MatrixPointers& m, int row, const float* x, int valid,
                                         float (&dots)[kTile]) {
  if constexpr (kFormat == WeightFormat::q8_row) {
    q8_row_dots<kTile>(m, row, x, valid, dots);
  } else {
    q4_row_dots<kTile>(m, row, x, valid, dots);
  }
}

// The row this warp computes.
__device__ __forceinline__ int warp_row() {
  return static_cast<int>(blockIdx.x) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarpSize;
}
__device__ __forceinline__ bool lane_zero() { return threadIdx.x % kWarpSize == 0; }

}  // namespace coli::kernels::cuda::detail
