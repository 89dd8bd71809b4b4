// Internal: what the avx512vnni GEMM and the amx one share: the 16-row
// vectors ("panels") of a weight matrix, the q4 packed-activation offsets and
// per-thread scratch. Include only inside a #pragma GCC target region that
// enables avx512f/bw/vl (+f16c), after simd_helpers_avx2.h.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <new>

#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu::detail {
namespace {

constexpr int kRowsPerVector = 16;  // int32/float lanes of one zmm
constexpr std::size_t kQ4PairBytes = 192;
constexpr std::size_t kBlockPanelBytes = kRowsPerVector * kActivationBlock;  // 16 rows x 64 columns

inline std::size_t q4_groups_padded(int cols) { return round_up(static_cast<std::size_t>(cols / kQ4GroupSize), 16); }
inline std::size_t q4_scales_offset(int cols) { return static_cast<std::size_t>(ceil_div(cols / kQ4GroupSize, 2)) * kQ4PairBytes; }
inline std::size_t q4_correction_offset(int cols) { return q4_scales_offset(cols) + q4_groups_padded(cols) * sizeof(float); }

// 16x16 transpose of 32-bit lanes: v[i] lane k -> v[k] lane i.
inline void transpose16(__m512i (&v)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  for (int m = 0; m < 4; ++m) {  // u[4m + e] chunk c: rows 4m..4m+3, element 4c + e
    u[4 * m + 0] = _mm512_unpacklo_epi64(t[4 * m], t[4 * m + 2]);
    u[4 * m + 1] = _mm512_unpackhi_epi64(t[4 * m], t[4 * m + 2]);
    u[4 * m + 2] = _mm512_unpacklo_epi64(t[4 * m + 1], t[4 * m + 3]);
    u[4 * m + 3] = _mm512_unpackhi_epi64(t[4 * m + 1], t[4 * m + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i low_even = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88), low_odd = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xdd);
    const __m512i high_even = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88),
                  high_odd = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xdd);
    v[e] = _mm512_shuffle_i32x4(low_even, high_even, 0x88);
    v[8 + e] = _mm512_shuffle_i32x4(low_even, high_even, 0xdd);
    v[4 + e] = _mm512_shuffle_i32x4(low_odd, high_odd, 0x88);
    v[12 + e] = _mm512_shuffle_i32x4(low_odd, high_odd, 0xdd);
  }
}

// The rows [first, first + 16) of a matrix with `rows` rows: row pointers
// (rows past the end repeat the last, their results are not stored) and the
// store mask.
struct RowVector {
  int first = 0;
  __mmask16 valid = 0;
  RowVector(int first_row, int rows) : first(first_row) {
    const int present = std::min(kRowsPerVector, rows - first_row);
    valid = _cvtu32_mask16(present >= 16 ? 0xffffu : (1u << present) - 1);
  }
  int row(int i, int rows) const { return std::min(first + i, rows - 1); }
};

// Weight scales of 16 rows x 16 groups (from group g) as floats, transposed:
// out[k] lane i = scale of row i, group g + k (zero past the last group).
inline void row_scales_transposed(const Q4G64View& w, const RowVector& rows, int g, __m512 (&out)[16]) {
  const int groups = w.cols / kQ4GroupSize;
  const __mmask16 present = _cvtu32_mask16(groups - g >= 16 ? 0xffffu : (1u << (groups - g)) - 1);
  __m512i v[16];
  for (int i = 0; i < 16; ++i) {
    const std::uint16_t* scales = w.scales + static_cast<std::size_t>(rows.row(i, w.rows)) * groups + g;
    v[i] = _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(present, scales)));
  }
  transpose16(v);
  for (int k = 0; k < 16; ++k) out[k] = _mm512_castsi512_ps(v[k]);
}

struct AlignedFree { void operator()(std::byte* bytes) const { ::operator delete[](bytes, std::align_val_t{64}); } };

inline std::byte* thread_scratch(std::size_t bytes) {
  thread_local std::unique_ptr<std::byte[], AlignedFree> buffer;
  thread_local std::size_t capacity = 0;
  if (bytes > capacity) {
    buffer.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{64})));
    capacity = bytes;
  }
  return buffer.get();
}

// Asks for the next panel's weights while this one's tokens are computed:
// the repack reads 16 rows at once, too many streams for the hardware
// prefetchers to run ahead of (it was most of a call's time at 8 tokens).
inline void prefetch_lines(const void* begin, std::size_t bytes) {
  const char* first = static_cast<const char*>(begin);
  for (std::size_t offset = 0; offset < bytes; offset += 64) _mm_prefetch(first + offset, _MM_HINT_T1);
}

}  // namespace
}  // namespace coli::kernels::cpu::detail
