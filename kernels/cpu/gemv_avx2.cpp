// AVX2 + FMA + F16C variant. Integer dot products with maddubs (u8 x s8 ->
// int16 pairs, which cannot saturate here: |w|, |q| <= 127 gives at most
// 2 * 127 * 127 = 32258, and nibbles <= 15) and madd (-> int32 lanes).
//   q8 packed: int8 q[blocks * 64] (zero-padded), then float d[blocks]
//   q4 packed: per group 96 bytes: int8 even[32], int8 odd[32] (q of the
//              elements held by low and high nibbles), int32 offset[8]
//              (nibble_offset_lanes); then float d[groups rounded up to 8]
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/variant_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "cpu/simd_helpers_avx2.h"

namespace coli::kernels::cpu::detail {
namespace {

constexpr std::size_t kQ4GroupBytes = 96;

// sum(w * q) over 32 bytes into int32 lanes: |w| times q with w's sign.
inline __m256i q8_dot32(__m256i w, __m256i q) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

// Two accumulators per token (even and odd blocks/groups) halve the FMA
// dependency chain; see gemv_avx512_impl.h.
void q8_rows(const Q8RowView& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
             float* y) {
  const int blocks = ceil_div(w.cols, kActivationBlock);
  const int full_blocks = w.cols / kActivationBlock;
  const std::size_t scales_offset = static_cast<std::size_t>(blocks) * kActivationBlock;
  const std::size_t ahead = prefetch_bytes();
  for_each_row_tile(count, row_begin, row_end, [&]<int kTokens>(int r, int t0) {
    const std::int8_t* row = w.weights + static_cast<std::size_t>(r) * w.cols;
    _mm_prefetch(reinterpret_cast<const char*>(w.scales + r) + 256, _MM_HINT_T0);
    const std::byte* x[kTokens];
    __m256 sums[2][kTokens];
    for (int t = 0; t < kTokens; ++t)
      x[t] = packed + static_cast<std::size_t>(t0 + t) * stride, sums[0][t] = sums[1][t] = _mm256_setzero_ps();
    alignas(32) std::int8_t tail[kActivationBlock];  // the last partial block, zero-padded: no read past the row
    auto block = [&](int b, __m256* block_sums) {
      const std::int8_t* weights = row + b * kActivationBlock;
      _mm_prefetch(reinterpret_cast<const char*>(weights) + ahead, _MM_HINT_T0);
      if (b == full_blocks) {
        std::memset(tail, 0, sizeof tail);
        std::memcpy(tail, weights, static_cast<std::size_t>(w.cols - b * kActivationBlock));
        weights = tail;
      }
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + 32));
      for (int t = 0; t < kTokens; ++t) {
        const auto* q = reinterpret_cast<const __m256i*>(x[t] + b * kActivationBlock);
        const __m256i dot = _mm256_add_epi32(q8_dot32(w0, _mm256_loadu_si256(q)), q8_dot32(w1, _mm256_loadu_si256(q + 1)));
        const __m256 scale = _mm256_broadcast_ss(reinterpret_cast<const float*>(x[t] + scales_offset) + b);
        block_sums[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, block_sums[t]);
      }
    };
    for (int b = 0; b < blocks; b += 2) {
      block(b, sums[0]);
      if (b + 1 < blocks) block(b + 1, sums[1]);
    }
    for (int t = 0; t < kTokens; ++t)
      y[static_cast<std::size_t>(t0 + t) * w.rows + r] = horizontal_sum(_mm256_add_ps(sums[0][t], sums[1][t])) * w.scales[r];
  });
}

std::size_t q4_groups_padded(int cols) { return round_up(static_cast<std::size_t>(cols / kQ4GroupSize), 8); }

std::size_t q4_packed_bytes(int cols) {
  return static_cast<std::size_t>(cols / kQ4GroupSize) * kQ4GroupBytes + q4_groups_padded(cols) * sizeof(float);
}

void q4_quantize(const float* x, int cols, std::byte* packed) {
  const int groups = cols / kQ4GroupSize;
  auto* d = reinterpret_cast<float*>(packed + static_cast<std::size_t>(groups) * kQ4GroupBytes);
  std::fill(d, d + q4_groups_padded(cols), 0.0f);
  for (int g = 0; g < groups; ++g) {
    __m256i lanes0, lanes1, even, odd;
    d[g] = quantize_block64(x + g * kQ4GroupSize, lanes0, lanes1);
    split_even_odd(lanes0, lanes1, even, odd);
    auto* out = reinterpret_cast<__m256i*>(packed + g * kQ4GroupBytes);
    _mm256_storeu_si256(out, even);
    _mm256_storeu_si256(out + 1, odd);
    _mm256_storeu_si256(out + 2, nibble_offset_lanes(even, odd));
  }
}

// Eight binary16 scales from p; fewer at the end of a row (the rest zero).
inline __m256 load_weight_scales(const std::uint16_t* p, int available) {
  if (available >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) std::uint16_t halves[8] = {};
  std::memcpy(halves, p, static_cast<std::size_t>(available) * sizeof(std::uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(halves)));
}

void q4_rows(const Q4G64View& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
             float* y) {
  const int groups = w.cols / kQ4GroupSize;
  const std::size_t scales_offset = static_cast<std::size_t>(groups) * kQ4GroupBytes;
  const std::size_t ahead = prefetch_bytes();
  const std::size_t scales_ahead = ahead / 16;  // the scales stream runs 16x slower than the nibbles
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for_each_row_tile(count, row_begin, row_end, [&]<int kTokens>(int r, int t0) {
    const std::uint8_t* row = w.nibbles + static_cast<std::size_t>(r) * w.cols / 2;
    const std::uint16_t* row_scales = w.scales + static_cast<std::size_t>(r) * groups;
    const std::byte* x[kTokens];
    __m256 sums[2][kTokens];
    for (int t = 0; t < kTokens; ++t)
      x[t] = packed + static_cast<std::size_t>(t0 + t) * stride, sums[0][t] = sums[1][t] = _mm256_setzero_ps();
    alignas(32) float combined[kTokens][8];  // d_g * weight scale of 8 groups
    auto group = [&](int g, __m256* group_sums) {
      if (g % 8 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(row_scales + g) + scales_ahead, _MM_HINT_T0);
        const __m256 weight_scales = load_weight_scales(row_scales + g, groups - g);
        for (int t = 0; t < kTokens; ++t) {
          const auto* d = reinterpret_cast<const float*>(x[t] + scales_offset);
          _mm256_store_ps(combined[t], _mm256_mul_ps(_mm256_loadu_ps(d + g), weight_scales));
        }
      }
      const std::uint8_t* address = row + g * kQ4GroupSize / 2;
      if (g % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(address) + ahead, _MM_HINT_T0);
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(address));
      const __m256i low = _mm256_and_si256(bytes, low_nibbles);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_nibbles);
      for (int t = 0; t < kTokens; ++t) {
        const auto* q = reinterpret_cast<const __m256i*>(x[t] + g * kQ4GroupBytes);
        // <= 2 * 15 * 127 per maddubs, so the int16 sum of two cannot overflow.
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(low, _mm256_loadu_si256(q)),
                                               _mm256_maddubs_epi16(high, _mm256_loadu_si256(q + 1)));
        const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), _mm256_loadu_si256(q + 2));
        group_sums[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(&combined[t][g % 8]), group_sums[t]);
      }
    };
    for (int g = 0; g < groups; g += 2) {
      group(g, sums[0]);
      if (g + 1 < groups) group(g + 1, sums[1]);
    }
    for (int t = 0; t < kTokens; ++t)
      y[static_cast<std::size_t>(t0 + t) * w.rows + r] = horizontal_sum(_mm256_add_ps(sums[0][t], sums[1][t]));
  });
}

}  // namespace
}  // namespace coli::kernels::cpu::detail
#pragma GCC pop_options

namespace coli::kernels::cpu::detail {

const VariantKernels& avx2_kernels() {
  static constexpr VariantKernels kernels{q8_packed_bytes, q8_quantize, q8_rows, q4_packed_bytes, q4_quantize, q4_rows};
  return kernels;
}

}  // namespace coli::kernels::cpu::detail
