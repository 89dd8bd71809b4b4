// Internal: the table each variant fills, and helpers shared by the variants.
// A variant owns the layout of its quantised activations ("packed" bytes); the
// values in it follow the definition in gemv_cpu.h.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "coli/base/stream_prefetch.h"
#include "cpu/gemv_cpu.h"

namespace coli::kernels::cpu::detail {

inline constexpr int kActivationBlock = 64;  // elements per activation scale (= q4 group)
inline constexpr int kRowAlignment = 16;     // rows per thread block: 64 bytes of y
// Activations per pass over a weight row in the batched kernels: each loaded
// weight block is reused this many times while it is in registers/L1.
inline constexpr int kTokenTile = 4;

// How far ahead of the weights being multiplied the SIMD kernels prefetch:
// coli/base/stream_prefetch.h (4 KiB; COLI_PREFETCH_BYTES overrides it).
inline std::size_t prefetch_bytes() { return stream_prefetch_bytes(); }

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
inline std::size_t round_up(std::size_t value, std::size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// y points at count vectors of w.rows floats; rows [row_begin, row_end) of
// each are written. packed holds count quantised vectors, packed_stride apart.
struct VariantKernels {
  std::size_t (*q8_packed_bytes)(int cols);
  void (*q8_quantize)(const float* x, int cols, std::byte* packed);
  void (*q8_rows)(const Q8RowView& w, const std::byte* packed, std::size_t packed_stride, int count, int row_begin,
                  int row_end, float* y);
  std::size_t (*q4_packed_bytes)(int cols);
  void (*q4_quantize)(const float* x, int cols, std::byte* packed);
  void (*q4_rows)(const Q4G64View& w, const std::byte* packed, std::size_t packed_stride, int count, int row_begin,
                  int row_end, float* y);
};

const VariantKernels& scalar_kernels();
const VariantKernels& avx2_kernels();
const VariantKernels& avx512_kernels();
const VariantKernels& avx512_vnni_kernels();
const VariantKernels& amx_kernels();  // avx512vnni arithmetic, the GEMM on AMX tiles

// The definition of activation quantisation for one block of n <= 64 values
// (gemv_cpu.h); q receives n values, the return value is d. The SIMD variants
// reproduce it exactly (IEEE division, round-half-even conversion).
float quantize_block_reference(const float* x, int n, std::int8_t* q);

// binary16 -> float, exact (equal to reference half_to_float), without libm calls.
inline float half_to_float_fast(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24 is exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) bits = sign | 0x7f800000u | (mantissa << 13);
  else bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

}  // namespace coli::kernels::cpu::detail
