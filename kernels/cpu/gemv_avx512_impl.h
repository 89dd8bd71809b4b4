// Internal: the AVX-512 (F/BW/VL) kernels without VNNI (maddubs + madd dot
// products), used by gemv_avx512.cpp. Include only inside a #pragma GCC
// target region. (The VNNI variant, gemv_avx512_vnni.cpp, has its own
// kernels: exact block sums, and a GEMM for many tokens.)
//   q8 packed: int8 q[blocks * 64] (zero-padded), then float d[blocks]
//   q4 packed: per pair of groups (g, g+1) 192 bytes: int8 even[g], even[g+1],
//              odd[g], odd[g+1] (32 each; see split_even_odd), int32
//              offset[g][8], offset[g+1][8]; a missing last g+1 is zeros;
//              then float d[groups rounded up to 16], zero-padded.
// One 64-byte load of nibbles covers two groups; int32 lanes 0-7 belong to
// group g and 8-15 to g+1, and are scaled per lane before the float sum.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/simd_helpers_avx2.h"
#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu::detail {
namespace {

constexpr std::size_t kQ4PairBytes = 192;

// acc + sum(u * s) per group of 4 bytes. maddubs cannot saturate: every
// caller keeps |u * s| pairs below 2^15 (see gemv_avx2.cpp).
inline __m512i dot_accumulate(__m512i acc, __m512i u, __m512i s) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}

// Two accumulators per token (even and odd blocks/pairs) halve the FMA
// dependency chain; a row is reduced as (even + odd) in every variant of
// token count, so batched and single results stay identical.
void q8_rows(const Q8RowView& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
             float* y) {
  const int blocks = ceil_div(w.cols, kActivationBlock);
  const int full_blocks = w.cols / kActivationBlock;
  const __mmask64 tail_mask = _cvtu64_mask64(~0ull >> ((kActivationBlock - (w.cols - full_blocks * kActivationBlock)) % 64));
  const std::size_t scales_offset = static_cast<std::size_t>(blocks) * kActivationBlock;
  const std::size_t ahead = prefetch_bytes();
  for_each_row_tile(count, row_begin, row_end, [&]<int kTokens>(int r, int t0) {
    const std::int8_t* row = w.weights + static_cast<std::size_t>(r) * w.cols;
    _mm_prefetch(reinterpret_cast<const char*>(w.scales + r) + 256, _MM_HINT_T0);
    const std::byte* x[kTokens];
    __m512 sums[2][kTokens];
    for (int t = 0; t < kTokens; ++t)
      x[t] = packed + static_cast<std::size_t>(t0 + t) * stride, sums[0][t] = sums[1][t] = _mm512_setzero_ps();
    auto block = [&](int b, __m512* block_sums) {
      const std::int8_t* address = row + b * kActivationBlock;
      _mm_prefetch(reinterpret_cast<const char*>(address) + ahead, _MM_HINT_T0);
      // The masked load of the last partial block reads nothing past the row.
      const __m512i weights = b < full_blocks ? _mm512_loadu_si512(address) : _mm512_maskz_loadu_epi8(tail_mask, address);
      const __m512i magnitudes = _mm512_abs_epi8(weights);
      const __mmask64 negative = _mm512_movepi8_mask(weights);
      for (int t = 0; t < kTokens; ++t) {
        const __m512i q = _mm512_loadu_si512(x[t] + b * kActivationBlock);
        const __m512i signed_q = _mm512_mask_sub_epi8(q, negative, _mm512_setzero_si512(), q);  // q * sign(w)
        const __m512i dot = dot_accumulate(_mm512_setzero_si512(), magnitudes, signed_q);
        const __m512 scale = _mm512_set1_ps(reinterpret_cast<const float*>(x[t] + scales_offset)[b]);
        block_sums[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, block_sums[t]);
      }
    };
    for (int b = 0; b < blocks; b += 2) {
      block(b, sums[0]);
      if (b + 1 < blocks) block(b + 1, sums[1]);
    }
    for (int t = 0; t < kTokens; ++t)
      y[static_cast<std::size_t>(t0 + t) * w.rows + r] = _mm512_reduce_add_ps(_mm512_add_ps(sums[0][t], sums[1][t])) * w.scales[r];
  });
}

std::size_t q4_groups_padded(int cols) { return round_up(static_cast<std::size_t>(cols / kQ4GroupSize), 16); }

std::size_t q4_packed_bytes(int cols) {
  const int pairs = ceil_div(cols / kQ4GroupSize, 2);
  return static_cast<std::size_t>(pairs) * kQ4PairBytes + q4_groups_padded(cols) * sizeof(float);
}

void q4_quantize(const float* x, int cols, std::byte* packed) {
  const int groups = cols / kQ4GroupSize, pairs = ceil_div(groups, 2);
  auto* d = reinterpret_cast<float*>(packed + static_cast<std::size_t>(pairs) * kQ4PairBytes);
  std::fill(d, d + q4_groups_padded(cols), 0.0f);
  std::memset(packed, 0, static_cast<std::size_t>(pairs) * kQ4PairBytes);  // the missing half of an odd last pair
  for (int g = 0; g < groups; ++g) {
    __m256i lanes0, lanes1, even, odd;
    d[g] = quantize_block64(x + g * kQ4GroupSize, lanes0, lanes1);
    split_even_odd(lanes0, lanes1, even, odd);
    auto* pair = reinterpret_cast<__m256i*>(packed + static_cast<std::size_t>(g / 2) * kQ4PairBytes);
    const int half = g % 2;
    _mm256_storeu_si256(pair + half, even);
    _mm256_storeu_si256(pair + 2 + half, odd);
    _mm256_storeu_si256(pair + 4 + half, nibble_offset_lanes(even, odd));
  }
}

void q4_rows(const Q4G64View& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
             float* y) {
  const int groups = w.cols / kQ4GroupSize, pairs = ceil_div(groups, 2);
  const std::size_t scales_offset = static_cast<std::size_t>(pairs) * kQ4PairBytes;
  const std::size_t ahead = prefetch_bytes();
  const std::size_t scales_ahead = ahead / 32;  // the scales stream runs 32x slower than the nibbles
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  // Lanes 0-7 take the scale of the pair's first group, 8-15 of its second.
  const __m512i first_pair_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for_each_row_tile(count, row_begin, row_end, [&]<int kTokens>(int r, int t0) {
    const std::uint8_t* row = w.nibbles + static_cast<std::size_t>(r) * w.cols / 2;
    const std::uint16_t* row_scales = w.scales + static_cast<std::size_t>(r) * groups;
    const std::byte* x[kTokens];
    __m512 sums[2][kTokens], combined[kTokens];  // combined: d_g * weight scale of 16 groups
    for (int t = 0; t < kTokens; ++t)
      x[t] = packed + static_cast<std::size_t>(t0 + t) * stride, sums[0][t] = sums[1][t] = _mm512_setzero_ps();
    auto pair = [&](int p, __m512* pair_sums) {
      const int g = 2 * p;
      if (g % 16 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(row_scales + g) + scales_ahead, _MM_HINT_T0);
        const __mmask16 present = _cvtu32_mask16(groups - g >= 16 ? 0xffffu : (1u << (groups - g)) - 1);
        const __m512 weight_scales = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(present, row_scales + g));
        for (int t = 0; t < kTokens; ++t)
          combined[t] = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(x[t] + scales_offset) + g), weight_scales);
      }
      const std::uint8_t* address = row + g * kQ4GroupSize / 2;
      _mm_prefetch(reinterpret_cast<const char*>(address) + ahead, _MM_HINT_T0);
      const __m512i bytes = g + 1 < groups ? _mm512_loadu_si512(address)
                                           : _mm512_maskz_loadu_epi8(_cvtu64_mask64(0xffffffffull), address);
      const __m512i low = _mm512_and_si512(bytes, low_nibbles);
      const __m512i high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low_nibbles);
      const __m512i scale_lanes = _mm512_add_epi32(first_pair_lanes, _mm512_set1_epi32(g % 16));
      for (int t = 0; t < kTokens; ++t) {
        const std::byte* q = x[t] + static_cast<std::size_t>(p) * kQ4PairBytes;
        const __m512i offsets = _mm512_loadu_si512(q + 128);  // the -8 of every nibble
        // <= 2 * 15 * 127 per maddubs, so the int16 sum of two cannot overflow.
        const __m512i products = _mm512_add_epi16(_mm512_maddubs_epi16(low, _mm512_loadu_si512(q)),
                                                  _mm512_maddubs_epi16(high, _mm512_loadu_si512(q + 64)));
        const __m512i dot = _mm512_add_epi32(offsets, _mm512_madd_epi16(products, _mm512_set1_epi16(1)));
        const __m512 scale = _mm512_permutexvar_ps(scale_lanes, combined[t]);
        pair_sums[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, pair_sums[t]);
      }
    };
    for (int p = 0; p < pairs; p += 2) {
      pair(p, sums[0]);
      if (p + 1 < pairs) pair(p + 1, sums[1]);
    }
    for (int t = 0; t < kTokens; ++t)
      y[static_cast<std::size_t>(t0 + t) * w.rows + r] = _mm512_reduce_add_ps(_mm512_add_ps(sums[0][t], sums[1][t]));
  });
}

}  // namespace
}  // namespace coli::kernels::cpu::detail
