// Device code shared by the kernels: one warp computes the dot products of
// one matrix row with up to kTile tokens' activations. Weights stream in
// 32-bit words, consecutive lanes reading consecutive words, each word
// decoded once for all tokens; float accumulation, then a butterfly
// reduction so every lane holds the sums.
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

__host__ __device__ __forceinline__ bool aligned16(const void* pointer) {
  return (reinterpret_cast<std::uintptr_t>(pointer) & 15u) == 0;
}

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// Lane partials: the lanes of a warp read consecutive 32-bit words of a
// row (a warp reads 128 contiguous bytes per step) and each lane the floats
// of x those columns need, consecutive lanes reading consecutive x (32 B or
// 16 B apart). The first layout, a 16-byte weight chunk per lane, made each
// lane read 128 B of x at a 128 B stride: every x load of a warp touched 32
// cache lines, and the L1, not the HBM, bounded the experts (an OLMoE layer's
// top-8 gate/up took 44 us on the H200). partial[t] is this lane's share of
// row . x_t; row_dots() sums them over the warp.

// 8 int4 weights of one word: nibble n is column 8w + n (byte i holds columns
// 2i and 2i+1, low nibble first; the GPU is little-endian).
__device__ __forceinline__ float dot_q4_word(unsigned word, const float* x) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(x));
  const float4 b = __ldg(reinterpret_cast<const float4*>(x) + 1);
  const auto w = [word](int n) { return static_cast<float>(static_cast<int>((word >> (4 * n)) & 15u) - 8); };
  return w(0) * a.x + w(1) * a.y + w(2) * a.z + w(3) * a.w + w(4) * b.x + w(5) * b.y + w(6) * b.z + w(7) * b.w;
}

// 4 int8 weights of one word (byte i = column 4w + i).
__device__ __forceinline__ float dot_q8_word(unsigned word, const float* x) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(x));
  const auto w = [word](int i) { return static_cast<float>(static_cast<signed char>(word >> (8 * i))); };
  return w(0) * a.x + w(1) * a.y + w(2) * a.z + w(3) * a.w;
}

// q8_row: the row's scale applied to each lane's partial. Rows or x not
// 4-word aligned (cols not a multiple of 4) take one byte per lane instead.
template <int kTile>
__device__ void q8_row_partials(const MatrixPointers& m, int row, const float* x, int valid, float (&partial)[kTile]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const std::size_t cols = static_cast<std::size_t>(m.cols);
  const auto* weights = reinterpret_cast<const signed char*>(m.weights) + static_cast<std::size_t>(row) * cols;
  const float scale = static_cast<const float*>(m.scales)[row];
#pragma unroll
  for (int t = 0; t < kTile; ++t) partial[t] = 0;
  if (cols % 4 == 0 && aligned16(x) && (reinterpret_cast<std::uintptr_t>(weights) & 3u) == 0) {
    const unsigned* words = reinterpret_cast<const unsigned*>(weights);
#pragma unroll 8
    for (std::size_t w = lane; w < cols / 4; w += kWarpSize) {
      const unsigned word = __ldg(words + w);
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        if (t < valid) partial[t] += dot_q8_word(word, x + t * cols + 4 * w);
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
#pragma unroll
  for (int t = 0; t < kTile; ++t) partial[t] *= scale;
}

// q4_g64 (cols a multiple of 64, rows 16-byte aligned: checked by the host
// API): word w's scale is group w / 8.
template <int kTile>
__device__ void q4_row_partials(const MatrixPointers& m, int row, const float* x, int valid, float (&partial)[kTile]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const std::size_t cols = static_cast<std::size_t>(m.cols);
  const auto* words = reinterpret_cast<const unsigned*>(m.weights + static_cast<std::size_t>(row) * (cols / 2));
  const auto* scales = static_cast<const unsigned short*>(m.scales) + static_cast<std::size_t>(row) * (cols / 64);
#pragma unroll
  for (int t = 0; t < kTile; ++t) partial[t] = 0;
#pragma unroll 8
  for (std::size_t w = lane; w < cols / 8; w += kWarpSize) {
    const unsigned word = __ldg(words + w);
    const float scale = __half2float(__ushort_as_half(__ldg(scales + w / 8)));
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t < valid) partial[t] += scale * dot_q4_word(word, x + t * cols + 8 * w);
    }
  }
}

template <WeightFormat kFormat, int kTile>
__device__ __forceinline__ void row_partials(const MatrixPointers& m, int row, const float* x, int valid,
                                             float (&partial)[kTile]) {
  if constexpr (kFormat == WeightFormat::q8_row) {
    q8_row_partials<kTile>(m, row, x, valid, partial);
  } else {
    q4_row_partials<kTile>(m, row, x, valid, partial);
  }
}

// dots[t] = row `row` of a q8_row or q4_g64 matrix times x + t * cols, for
// t < valid (0 beyond), every lane holding the sums.
template <WeightFormat kFormat, int kTile>
__device__ __forceinline__ void row_dots(const MatrixPointers& m, int row, const float* x, int valid,
                                         float (&dots)[kTile]) {
  row_partials<kFormat, kTile>(m, row, x, valid, dots);
#pragma unroll
  for (int t = 0; t < kTile; ++t) dots[t] = warp_sum(dots[t]);
}

// The row this warp computes.
__device__ __forceinline__ int warp_row() {
  return static_cast<int>(blockIdx.x) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarpSize;
}
__device__ __forceinline__ bool lane_zero() { return threadIdx.x % kWarpSize == 0; }

}  // namespace coli::kernels::cuda::detail
