// Device code for int8 activations (decoder_kernels.h's Q8Activations):
// quantising a block of 32 values held one per lane, and a lane's share of
// a q8_row or q4_g64 row dotted with them through dp4a, 16 weight bytes per
// load (a q4 chunk is one activation block; a q8 chunk half of one).
#pragma once

#include "cuda/decoder_common.cuh"

namespace coli::kernels::cuda::decoder {

static_assert(kQ8Block == kWarpSize, "a warp quantises one block, a value per lane");

__device__ __forceinline__ int warp_sum_int(int value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(detail::kFullWarp, value, offset);
  return value;
}

// Every lane of the warp, lane i holding element i of block `block` of q:
// writes the block's int8 values (round to nearest, as the CPU's
// quantize_block_reference), its scale and its sum.
__device__ __forceinline__ void quantize_block(float value, const Q8Activations& q, std::size_t block) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  // A NaN or inf counts as an infinite peak (fmaxf alone would drop a NaN).
  const float peak = warp_max(isfinite(value) ? fabsf(value) : __int_as_float(0x7f800000));
  const bool broken = isinf(peak);
  int level = 0;
  if (peak > 0 && !broken) level = max(-127, min(127, __float2int_rn(value * (127.0f / peak))));
  q.values[block * kQ8Block + lane] = static_cast<std::int8_t>(level);
  const int sum = warp_sum_int(level);
  if (lane == 0) q.blocks[block] = Q8Block{broken ? detail::quiet_nan() : peak / 127.0f, sum};
}

// Block b's scale and sum (read-only in the kernels that call this).
__device__ __forceinline__ Q8Block q8_block(const Q8Activations& x, int b) {
  const float2 raw = __ldg(reinterpret_cast<const float2*>(x.blocks) + b);
  return Q8Block{raw.x, __float_as_int(raw.y)};
}

// Word j of a q4 chunk holds columns 8j..8j+7, nibble n column 8j + n
// (stored + 8): the low nibbles are the even columns, the high the odd ones,
// so two byte permutes put columns 8j..8j+3 and 8j+4..8j+7 in order for
// the activations' two words.
__device__ __forceinline__ int dot_q4_word_i8(unsigned word, int x_low, int x_high, int acc) {
  const unsigned even = word & 0x0F0F0F0Fu, odd = (word >> 4) & 0x0F0F0F0Fu;
  acc = __dp4a(static_cast<int>(__byte_perm(even, odd, 0x5140)), x_low, acc);
  return __dp4a(static_cast<int>(__byte_perm(even, odd, 0x7362)), x_high, acc);
}

// One row of a q8_row or q4_g64 matrix: its first weight byte and scales.
struct RowRef {
  const std::uint8_t* weights;
  const void* scales;  // float (q8_row: the row's) or binary16 per 64 columns (q4_g64)
};

template <WeightFormat kFormat>
__device__ __forceinline__ RowRef row_ref(const Matrix& m, int row) {
  if constexpr (kFormat == WeightFormat::q4_g64) {
    return RowRef{static_cast<const std::uint8_t*>(m.weights) + static_cast<std::size_t>(row) * (m.cols / 2),
                  static_cast<const unsigned short*>(m.scales) + static_cast<std::size_t>(row) * (m.cols / 64)};
  } else {
    return RowRef{static_cast<const std::uint8_t*>(m.weights) + static_cast<std::size_t>(row) * m.cols,
                  static_cast<const float*>(m.scales) + row};
  }
}

// Columns per 16-byte chunk of a row.
template <WeightFormat kFormat>
inline constexpr int kChunkCols = kFormat == WeightFormat::q4_g64 ? 32 : 16;

// Chunk c of the row dotted with the matching activations, scaled.
template <WeightFormat kFormat>
__device__ __forceinline__ float chunk_dot_q8(const RowRef& row, int c, const Q8Activations& x) {
  const int4* xv = reinterpret_cast<const int4*>(x.values);
  if constexpr (kFormat == WeightFormat::q4_g64) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(row.weights) + c);
    const int4 a = __ldg(xv + 2 * c), b = __ldg(xv + 2 * c + 1);
    int acc = dot_q4_word_i8(w.x, a.x, a.y, 0);
    acc = dot_q4_word_i8(w.y, a.z, a.w, acc);
    acc = dot_q4_word_i8(w.z, b.x, b.y, acc);
    acc = dot_q4_word_i8(w.w, b.z, b.w, acc);
    const Q8Block block = q8_block(x, c);
    const float scale = __half2float(__ushort_as_half(__ldg(static_cast<const unsigned short*>(row.scales) + c / 2)));
    return scale * block.scale * static_cast<float>(acc - 8 * block.sum);
  } else {
    const int4 w = __ldg(reinterpret_cast<const int4*>(row.weights) + c);
    const int4 a = __ldg(xv + c);
    int acc = __dp4a(w.x, a.x, 0);
    acc = __dp4a(w.y, a.y, acc);
    acc = __dp4a(w.z, a.z, acc);
    acc = __dp4a(w.w, a.w, acc);
    const float scale = __ldg(static_cast<const float*>(row.scales));
    return scale * q8_block(x, c / 2).scale * static_cast<float>(acc);
  }
}

// This lane's shares of kRows rows of `cols` columns: the rows' loads of
// one step are independent, so a warp keeps kRows x 16 bytes per lane in
// flight.
template <WeightFormat kFormat, int kRows>
__device__ __forceinline__ void rows_partial_q8(const RowRef (&rows)[kRows], int cols, const Q8Activations& x,
                                                float (&partial)[kRows]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
#pragma unroll
  for (int i = 0; i < kRows; ++i) partial[i] = 0;
  const int chunks = cols / kChunkCols<kFormat>;
  constexpr int kUnroll = kRows >= 4 ? 1 : 4;  // one row: 4 steps' loads in flight
#pragma unroll kUnroll
  for (int c = lane; c < chunks; c += kWarpSize) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) partial[i] += chunk_dot_q8<kFormat>(rows[i], c, x);
  }
}

// (W x)[row] on x's int8 copy, every lane holding the sum (decoder_common.cuh's
// row_dot for int8 activations, so a kernel serves both through its x's type).
template <WeightFormat kFormat>
__device__ __forceinline__ float row_dot(const Matrix& m, int row, const Q8Activations& x) {
  static_assert(kFormat == WeightFormat::q8_row || kFormat == WeightFormat::q4_g64, "int8 activations meet q8_row or q4_g64 rows");
  const RowRef rows[1] = {row_ref<kFormat>(m, row)};
  float partial[1];
  rows_partial_q8<kFormat, 1>(rows, m.cols, x, partial);
  return warp_sum(partial[0]);
}

// swiglu_row on x's int8 copy: the gate and up rows' loads in flight together.
template <WeightFormat kFormat>
__device__ __forceinline__ float swiglu_row(const Matrix& gate, const Matrix& up, int row, const Q8Activations& x) {
  static_assert(kFormat == WeightFormat::q8_row || kFormat == WeightFormat::q4_g64, "int8 activations meet q8_row or q4_g64 rows");
  const RowRef rows[2] = {row_ref<kFormat>(gate, row), row_ref<kFormat>(up, row)};
  float partial[2];
  rows_partial_q8<kFormat, 2>(rows, gate.cols, x, partial);
  return silu(warp_sum(partial[0])) * warp_sum(partial[1]);
}

// Launch<format>::run(args...) for the two int8-activation formats (for_format's
// counterpart); the launch's CUDA error, invalid value for another format.
template <template <WeightFormat> class Launch, typename... Args>
int for_q8_format(WeightFormat format, const Args&... args) {
  switch (format) {
    case WeightFormat::q8_row: Launch<WeightFormat::q8_row>::run(args...); break;
    case WeightFormat::q4_g64: Launch<WeightFormat::q4_g64>::run(args...); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace coli::kernels::cuda::decoder
