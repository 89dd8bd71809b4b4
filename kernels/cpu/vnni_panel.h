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

// The rows after the panel of rows [r, r + 16) (up to row_end), prefetched.
inline void prefetch_next_panel(const Q8RowView& w, int r, int row_end) {
  const int next = std::min(r + kRowsPerVector, row_end), next_rows = std::min(kRowsPerVector, row_end - next);
  prefetch_lines(w.weights + static_cast<std::size_t>(next) * w.cols, static_cast<std::size_t>(next_rows) * w.cols);
}
inline void prefetch_next_panel(const Q4G64View& w, int r, int row_end) {
  const int groups = w.cols / kQ4GroupSize;
  const int next = std::min(r + kRowsPerVector, row_end), next_rows = std::min(kRowsPerVector, row_end - next);
  prefetch_lines(w.nibbles + static_cast<std::size_t>(next) * w.cols / 2, static_cast<std::size_t>(next_rows) * w.cols / 2);
  prefetch_lines(w.scales + static_cast<std::size_t>(next) * groups, static_cast<std::size_t>(next_rows) * groups * 2);
}

// Block b (64 columns) of 16 q8 rows, transposed: v[j] lane i = row i's
// columns 4j..4j+3 as signed bytes (zero past the last column).
inline void q8_block_columns(const Q8RowView& w, const RowVector& rows, int b, __m512i (&v)[16]) {
  const int full_blocks = w.cols / kActivationBlock;
  const __mmask64 tail_mask = _cvtu64_mask64(~0ull >> ((kActivationBlock - (w.cols - full_blocks * kActivationBlock)) % 64));
  for (int i = 0; i < 16; ++i) {
    const std::int8_t* address = w.weights + static_cast<std::size_t>(rows.row(i, w.rows)) * w.cols + b * kActivationBlock;
    v[i] = b < full_blocks ? _mm512_loadu_si512(address) : _mm512_maskz_loadu_epi8(tail_mask, address);
  }
  transpose16(v);
}

// Pair p (groups 2p and 2p + 1) of 16 q4 rows' nibble bytes, transposed:
// v[j] lane i = row i's bytes 4j..4j+3 of the pair (j < 8: group 2p, else
// 2p + 1; zero for a missing last group). Transposing the bytes first and
// splitting the nibbles after is the same (the split is per byte).
inline void q4_pair_columns(const Q4G64View& w, const RowVector& rows, int p, __m512i (&v)[16]) {
  const int groups = w.cols / kQ4GroupSize;
  for (int i = 0; i < 16; ++i) {
    const std::uint8_t* address = w.nibbles + static_cast<std::size_t>(rows.row(i, w.rows)) * w.cols / 2 + p * kActivationBlock;
    v[i] = 2 * p + 1 < groups ? _mm512_loadu_si512(address) : _mm512_maskz_loadu_epi8(_cvtu64_mask64(0xffffffffull), address);
  }
  transpose16(v);
}

// scales_out[g * 16 + i] = the weight scale of row i, group g, as float.
inline void q4_panel_scales(const Q4G64View& w, const RowVector& rows, float* scales_out) {
  const int groups = w.cols / kQ4GroupSize;
  for (int g = 0; g < groups; g += 16) {
    __m512 transposed[16];
    row_scales_transposed(w, rows, g, transposed);
    for (int k = 0; k < 16 && g + k < groups; ++k) _mm512_store_ps(scales_out + (g + k) * 16, transposed[k]);
  }
}

// The exact block sum definition's lanes (gemv_avx512_vnni.cpp's header):
// block b adds to lane b % 16, so a matrix of fewer than 16 blocks reaches
// only its first ones (a 64-column one: one lane a token, not 16).
inline int used_lanes(int blocks) { return std::min(blocks, 16); }

// The definition's tree over one token's 16 lanes (16 rows at once). Lanes
// from `used` on hold +0 (no block reaches them), so their additions are
// skipped: the lanes are never -0 (they start at +0 and x + 0 = x), so the
// bits are the full tree's.
inline __m512 lanes_tree(__m512* v, int used) {
  for (int width = 8; width >= 1; width /= 2) {
    for (int j = 0; j < width && j + width < used; ++j) v[j] = _mm512_add_ps(v[j], v[j + width]);
    used = std::min(used, width);
  }
  return v[0];
}

}  // namespace
}  // namespace coli::kernels::cpu::detail
