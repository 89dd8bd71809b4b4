// Internal: activation quantisation with 256-bit integer/float ops and the
// row/token-tile loop, shared by the AVX2 and AVX-512 variants. Include only inside a region compiled with
// #pragma GCC target(... "avx2,fma" ...): the functions take that region's ISA,
// and being static they cannot be merged with another variant's copy.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu::detail {
namespace {

inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Quantises 64 floats exactly like quantize_block_reference (IEEE division,
// conversion in the default round-half-even mode). lanes0/lanes1 receive
// q[0..31] and q[32..63] in element order; returns d.
inline float quantize_block64(const float* x, __m256i& lanes0, __m256i& lanes1) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[8];
  __m256 max_abs = _mm256_setzero_ps();
  for (int k = 0; k < 8; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    max_abs = _mm256_max_ps(max_abs, _mm256_and_ps(v[k], abs_mask));
  }
  const float max_value = horizontal_max(max_abs);
  if (max_value == 0) {
    lanes0 = lanes1 = _mm256_setzero_si256();
    return 0;
  }
  const __m256 inverse = _mm256_set1_ps(127.0f / max_value);
  __m256i ints[8];
  for (int k = 0; k < 8; ++k) ints[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inverse));
  // packs work per 128-bit half; the dword permute restores element order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i bytes0 = _mm256_packs_epi16(_mm256_packs_epi32(ints[0], ints[1]), _mm256_packs_epi32(ints[2], ints[3]));
  const __m256i bytes1 = _mm256_packs_epi16(_mm256_packs_epi32(ints[4], ints[5]), _mm256_packs_epi32(ints[6], ints[7]));
  lanes0 = _mm256_permutevar8x32_epi32(bytes0, order);
  lanes1 = _mm256_permutevar8x32_epi32(bytes1, order);
  return max_value / 127.0f;
}

// Quantises a partial block (n < 64) through a zero-padded copy; zeros change
// neither the maximum nor the other values, and quantise to 0.
inline float quantize_partial_block64(const float* x, int n, __m256i& lanes0, __m256i& lanes1) {
  alignas(32) float padded[kActivationBlock] = {};
  for (int i = 0; i < n; ++i) padded[i] = x[i];
  return quantize_block64(padded, lanes0, lanes1);
}

// Splits 64 quantised values (element order) into even and odd elements, the
// order in which a q4 group's low and high nibbles come out of 32 bytes.
inline void split_even_odd(__m256i lanes0, __m256i lanes1, __m256i& even, __m256i& odd) {
  const __m256i gather = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,  //
                                          0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  // Per 128-bit half: 8 evens then 8 odds; qwords [e, o, e, o] -> [e, e, o, o].
  const __m256i a = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(lanes0, gather), 0xd8);
  const __m256i b = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(lanes1, gather), 0xd8);
  even = _mm256_permute2x128_si256(a, b, 0x20);
  odd = _mm256_permute2x128_si256(a, b, 0x31);
}

// -8 * (sum of the 8 values feeding each int32 lane of a nibble dot product):
// lane j covers bytes 4j..4j+3 of both the even and the odd vector. Adding it
// turns sum(nibble * q) into sum((nibble - 8) * q).
inline __m256i nibble_offset_lanes(__m256i even, __m256i odd) {
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(eight, even), _mm256_maddubs_epi16(eight, odd));
  return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// Runs kernel.operator()<tokens>(row, first_token) over every row and tile of
// up to kTokenTile tokens. The token count is a compile-time constant so the
// per-token accumulators live in registers; a row is finished for all tokens
// before the next, so its weights come from memory once.
template <class RowKernel>
inline void for_each_row_tile(int count, int row_begin, int row_end, RowKernel&& kernel) {
  static_assert(kTokenTile == 4);
  for (int r = row_begin; r < row_end; ++r) {
    for (int t0 = 0; t0 < count; t0 += kTokenTile) {
      switch (count - t0) {
        case 1: kernel.template operator()<1>(r, t0); break;
        case 2: kernel.template operator()<2>(r, t0); break;
        case 3: kernel.template operator()<3>(r, t0); break;
        default: kernel.template operator()<4>(r, t0); break;
      }
    }
  }
}

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// int8 activations, packed for the q8_row kernels of every 256/512-bit
// variant: all blocks' 64 int8 values, then their float scales.
inline std::size_t q8_packed_bytes(int cols) {
  const int blocks = ceil_div(cols, kActivationBlock);
  return static_cast<std::size_t>(blocks) * (kActivationBlock + sizeof(float));
}

inline void q8_quantize(const float* x, int cols, std::byte* packed) {
  const int blocks = ceil_div(cols, kActivationBlock);
  auto* d = reinterpret_cast<float*>(packed + static_cast<std::size_t>(blocks) * kActivationBlock);
  for (int b = 0; b < blocks; ++b) {
    const int begin = b * kActivationBlock, length = std::min(kActivationBlock, cols - begin);
    __m256i lanes0, lanes1;
    d[b] = length == kActivationBlock ? quantize_block64(x + begin, lanes0, lanes1)
                                      : quantize_partial_block64(x + begin, length, lanes0, lanes1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + begin), lanes0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + begin + 32), lanes1);
  }
}

}  // namespace
}  // namespace coli::kernels::cpu::detail
