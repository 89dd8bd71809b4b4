// AVX-512 F/BW/VL + VNNI variant (vpdpbusd). Its arithmetic is the "exact
// block sum" definition (gemv_cpu.h): every 64-column block b of a row and a
// token gives an exact int32 sum S_b, and then, in float,
//   lane[j] = fma(float(S_b), c_b, lane[j]) for b = j, j + 16, j + 32, ...
//   (j < 16, lanes from +0), y = tree(lane) [* row scale for q8], where
//   tree adds lanes j + (j + 8), then j + (j + 4), j + (j + 2), j + (j + 1)
// with c_b = d_b (q8) or d_g * weight scale (q4, one float product). Any way
// of computing S_b gives the same bits, so the decode kernel (one row at a
// time, the lanes in one vector) and the prefill GEMM (16 rows per vector,
// the lanes in 16 vectors per token) agree bit for bit.
//
//   q8 packed: int8 q[blocks * 64] (zero-padded), float d[blocks],
//              int32 correction[blocks] = -128 * sum(q of the block)
//   q4 packed: per pair of groups (g, g+1) 192 bytes: int8 even[g], even[g+1],
//              odd[g], odd[g+1] (32 each; see split_even_odd), int32
//              offset[g][8], offset[g+1][8]; a missing last g+1 is zeros;
//              then float d[groups rounded up to 16], zero-padded; then
//              int32 correction[groups] = -8 * sum(q of the group)
// q8 weights enter vpdpbusd (unsigned x signed) as w + 128 (w xor 0x80); the
// correction takes the 128 * sum(q) back out. q4 nibbles enter as they are;
// the -8 of every nibble is the correction (or the offset lanes).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "cpu/variant_kernels.h"

#pragma GCC push_options
// GCC 12's own _mm512_undefined_* (`__m512 __Y = __Y;`) trips
// -W(maybe-)uninitialized once inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include "cpu/simd_helpers_avx2.h"
#include "cpu/vnni_panel.h"

namespace coli::kernels::cpu::detail {
namespace {

// ---------------------------------------------------------------- packing

std::size_t q8_packed_bytes_vnni(int cols) {
  return q8_packed_bytes(cols) + static_cast<std::size_t>(ceil_div(cols, kActivationBlock)) * sizeof(std::int32_t);
}

std::int32_t sum_of_bytes(const void* q) {
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_loadu_si512(q));
  return _mm512_reduce_add_epi32(sums);
}

void q8_quantize_vnni(const float* x, int cols, std::byte* packed) {
  q8_quantize(x, cols, packed);
  const int blocks = ceil_div(cols, kActivationBlock);
  auto* correction = reinterpret_cast<std::int32_t*>(packed + q8_packed_bytes(cols));
  for (int b = 0; b < blocks; ++b) correction[b] = -128 * sum_of_bytes(packed + static_cast<std::size_t>(b) * kActivationBlock);
}


std::size_t q4_packed_bytes_vnni(int cols) {
  return q4_correction_offset(cols) + static_cast<std::size_t>(cols / kQ4GroupSize) * sizeof(std::int32_t);
}

void q4_quantize_vnni(const float* x, int cols, std::byte* packed) {
  const int groups = cols / kQ4GroupSize;
  auto* d = reinterpret_cast<float*>(packed + q4_scales_offset(cols));
  auto* correction = reinterpret_cast<std::int32_t*>(packed + q4_correction_offset(cols));
  std::fill(d, d + q4_groups_padded(cols), 0.0f);
  std::memset(packed, 0, q4_scales_offset(cols));  // the missing half of an odd last pair
  for (int g = 0; g < groups; ++g) {
    __m256i lanes0, lanes1, even, odd;
    d[g] = quantize_block64(x + g * kQ4GroupSize, lanes0, lanes1);
    split_even_odd(lanes0, lanes1, even, odd);
    auto* pair = reinterpret_cast<__m256i*>(packed + static_cast<std::size_t>(g / 2) * kQ4PairBytes);
    const int half = g % 2;
    _mm256_storeu_si256(pair + half, even);
    _mm256_storeu_si256(pair + 2 + half, odd);
    const __m256i offsets = nibble_offset_lanes(even, odd);
    _mm256_storeu_si256(pair + 4 + half, offsets);
    correction[g] = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(offsets));
  }
}

// ------------------------------------------------------ lane shuffles

// Adds lanes of a (row set A) and b (row set B) in pairs `width` lanes
// apart: lane i of the result is A's sum where (i / width) is even, B's where
// odd. One blend and one two-source permute per add (not two permutes): the
// shuffle port is what limits the decode kernels.
template <int kWidth>
inline __m512i add_interleaved(__m512i a, __m512i b) {
  static_assert(kWidth == 1 || kWidth == 2 || kWidth == 4);
  constexpr __mmask16 from_b = kWidth == 1 ? 0xaaaa : kWidth == 2 ? 0xcccc : 0xf0f0;
  alignas(64) static constexpr std::int32_t kSwap[3][16] = {
      {1, 16, 3, 18, 5, 20, 7, 22, 9, 24, 11, 26, 13, 28, 15, 30},
      {2, 3, 16, 17, 6, 7, 20, 21, 10, 11, 24, 25, 14, 15, 28, 29},
      {4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27}};
  const __m512i swap = _mm512_load_si512(kSwap[kWidth == 1 ? 0 : kWidth == 2 ? 1 : 2]);
  return _mm512_add_epi32(_mm512_mask_blend_epi32(from_b, a, b), _mm512_permutex2var_epi32(a, swap, b));
}

// v[i] holds 16 int32 partial sums of one row or block i. Returns v[0..7] in
// low (lane i < 8: v[i]'s lanes 0-7 summed, lane 8 + i: its lanes 8-15) and
// v[8..15] the same way in high.
inline void sum_row_octets(const __m512i (&v)[16], __m512i& low, __m512i& high) {
  __m512i pairs[8], quads[4];
  for (int i = 0; i < 8; ++i) pairs[i] = add_interleaved<1>(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 4; ++i) quads[i] = add_interleaved<2>(pairs[2 * i], pairs[2 * i + 1]);
  low = add_interleaved<4>(quads[0], quads[1]);
  high = add_interleaved<4>(quads[2], quads[3]);
}

// The sums of all 16 lanes of each v[i], in lane i.
inline __m512i sum_rows(const __m512i (&v)[16]) {
  __m512i low, high;
  sum_row_octets(v, low, high);
  return _mm512_add_epi32(_mm512_mask_blend_epi32(0xff00, low, high), _mm512_shuffle_i64x2(low, high, 0x4e));
}

// dots[k] holds two groups' int32 partial sums (lanes 0-7 and 8-15).
// Returns all 16 group sums: lane 8k + i = dots[i]'s half k.
inline __m512i sum_pair_halves(const __m512i (&dots)[8]) {
  __m512i pairs[4];
  for (int i = 0; i < 4; ++i) pairs[i] = add_interleaved<1>(dots[2 * i], dots[2 * i + 1]);
  return add_interleaved<4>(add_interleaved<2>(pairs[0], pairs[1]), add_interleaved<2>(pairs[2], pairs[3]));
}




// ------------------------------------------- decode: one row at a time

// acc + u . s per 4 bytes. Inline assembly because GCC 12 copies the
// accumulator in and out of a spare register around every _mm512_dpbusd_epi32
// in these loops (two extra moves per product, seen in the disassembly).
inline __m512i dot_accumulate(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

inline __m512i q8_block_of_row(const std::int8_t* address, bool full, __mmask64 tail_mask) {
  const __m512i weights = full ? _mm512_loadu_si512(address) : _mm512_maskz_loadu_epi8(tail_mask, address);
  return _mm512_xor_si512(weights, _mm512_set1_epi8(static_cast<char>(0x80)));
}

inline __mmask16 first_lanes(int n) { return _cvtu32_mask16(n >= 16 ? 0xffffu : (1u << n) - 1); }

// The definition's tree over the 16 lanes.
inline float sum_lanes_tree(__m512 lanes) {
  const __m256 eights = _mm256_add_ps(_mm512_castps512_ps256(lanes),
                                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1)));
  const __m128 fours = _mm_add_ps(_mm256_castps256_ps128(eights), _mm256_extractf128_ps(eights, 1));
  const __m128 twos = _mm_add_ps(fours, _mm_movehl_ps(fours, fours));
  return _mm_cvtss_f32(_mm_add_ss(twos, _mm_movehdup_ps(twos)));
}

// Row r times one token: 16 blocks per step, lane i = block b0 + i.
float q8_row_one_token(const Q8RowView& w, int r, const std::byte* x) {
  const int blocks = ceil_div(w.cols, kActivationBlock), full_blocks = w.cols / kActivationBlock;
  const __mmask64 tail_mask = _cvtu64_mask64(~0ull >> ((kActivationBlock - (w.cols - full_blocks * kActivationBlock)) % 64));
  const auto* d = reinterpret_cast<const float*>(x + static_cast<std::size_t>(blocks) * kActivationBlock);
  const auto* correction = reinterpret_cast<const std::int32_t*>(d + blocks);
  const std::int8_t* row = w.weights + static_cast<std::size_t>(r) * w.cols;
  const std::size_t ahead = prefetch_bytes();
  __m512 lanes = _mm512_setzero_ps();
  for (int b0 = 0; b0 < blocks; b0 += 16) {
    __m512i dots[16];
    for (int i = 0; i < 16; ++i) {
      const int b = b0 + i;
      if (b >= blocks) {
        dots[i] = _mm512_setzero_si512();
        continue;
      }
      const std::int8_t* address = row + b * kActivationBlock;
      _mm_prefetch(reinterpret_cast<const char*>(address) + ahead, _MM_HINT_T0);
      const __m512i q = _mm512_loadu_si512(x + static_cast<std::size_t>(b) * kActivationBlock);
      dots[i] = dot_accumulate(_mm512_setzero_si512(), q8_block_of_row(address, b < full_blocks, tail_mask), q);
    }
    const __mmask16 present = first_lanes(blocks - b0);
    const __m512i sums = _mm512_add_epi32(sum_rows(dots), _mm512_maskz_loadu_epi32(present, correction + b0));
    lanes = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_maskz_loadu_ps(present, d + b0), lanes, present);
  }
  return sum_lanes_tree(lanes) * w.scales[r];
}

// Row r times one token: 8 pairs (16 groups) per step.
float q4_row_one_token(const Q4G64View& w, int r, const std::byte* x) {
  const int groups = w.cols / kQ4GroupSize, pairs = ceil_div(groups, 2);
  const auto* d = reinterpret_cast<const float*>(x + q4_scales_offset(w.cols));
  const std::uint8_t* row = w.nibbles + static_cast<std::size_t>(r) * w.cols / 2;
  const std::uint16_t* row_scales = w.scales + static_cast<std::size_t>(r) * groups;
  const std::size_t ahead = prefetch_bytes();
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  // sum_pair_halves leaves group 2i + k in lane 8k + i; this puts group m in lane m.
  const __m512i group_order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  __m512 lanes = _mm512_setzero_ps();
  for (int g0 = 0; g0 < groups; g0 += 16) {
    __m512i dots[8];
    for (int k = 0; k < 8; ++k) {
      const int p = g0 / 2 + k;
      if (p >= pairs) {
        dots[k] = _mm512_setzero_si512();
        continue;
      }
      const std::uint8_t* address = row + p * kActivationBlock;
      _mm_prefetch(reinterpret_cast<const char*>(address) + ahead, _MM_HINT_T0);
      const __m512i bytes = 2 * p + 1 < groups ? _mm512_loadu_si512(address) : _mm512_maskz_loadu_epi8(_cvtu64_mask64(0xffffffffull), address);
      const __m512i low = _mm512_and_si512(bytes, low_nibbles), high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low_nibbles);
      const std::byte* q = x + static_cast<std::size_t>(p) * kQ4PairBytes;
      dots[k] = dot_accumulate(dot_accumulate(_mm512_loadu_si512(q + 128), low, _mm512_loadu_si512(q)), high,
                                    _mm512_loadu_si512(q + 64));
    }
    const __mmask16 present = first_lanes(groups - g0);
    const __m512i sums = _mm512_permutexvar_epi32(group_order, sum_pair_halves(dots));
    const __m512 scales = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(present, row_scales + g0)),
                                        _mm512_maskz_loadu_ps(present, d + g0));
    lanes = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(sums), scales, lanes, present);
  }
  return sum_lanes_tree(lanes);
}

// ------------------------------------------ prefill GEMM: 16 rows per lane

// Weights of 16 rows repacked once per call for all its tokens ("panel"):
// per 64-column block, 16 vectors; vector j holds columns 4j..4j+3 of the
// 16 rows (row i in lane i) as unsigned bytes, so a token's 4 activations
// broadcast to all lanes feed one vpdpbusd for 16 rows. q8: w + 128. q4:
// per pair of groups the low nibbles (even columns) then the high ones, in
// the order of the packed activations' even/odd vectors.

void q8_pack_panel(const Q8RowView& w, const RowVector& rows, std::byte* panel) {
  const __m512i to_unsigned = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int b = 0; b < ceil_div(w.cols, kActivationBlock); ++b) {
    __m512i v[16];
    q8_block_columns(w, rows, b, v);
    for (int j = 0; j < 16; ++j) _mm512_store_si512(panel + b * kBlockPanelBytes + j * 64, _mm512_xor_si512(v[j], to_unsigned));
  }
}

// Also the weight scales, transposed: scales_out[g] = 16 rows' scales of group g.
void q4_pack_panel(const Q4G64View& w, const RowVector& rows, std::byte* panel, float* scales_out) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  for (int p = 0; p < ceil_div(w.cols / kQ4GroupSize, 2); ++p) {
    __m512i columns[16];
    q4_pair_columns(w, rows, p, columns);
    std::byte* out = panel + static_cast<std::size_t>(p) * 2 * kBlockPanelBytes;
    for (int j = 0; j < 16; ++j) {
      _mm512_store_si512(out + j * 64, _mm512_and_si512(columns[j], low_nibbles));
      _mm512_store_si512(out + kBlockPanelBytes + j * 64, _mm512_and_si512(_mm512_srli_epi16(columns[j], 4), low_nibbles));
    }
  }
  q4_panel_scales(w, rows, scales_out);
}

inline __m512i broadcast_dword(const std::byte* address) {
  std::int32_t value;
  std::memcpy(&value, address, sizeof value);
  return _mm512_set1_epi32(value);
}

// The definition's 16 float lanes of kTokens tokens for 16 rows: lane j of
// token t is lanes[t][j] (row i in vector lane i). Only the lanes `blocks`
// reach are zeroed and summed (used_lanes, lanes_tree): a 64-column
// matrix's panel zeroed and summed 128 vectors on the stack for 8 tokens'
// 16 dot products, the most of a 64-wide expert's GEMM.
template <int kTokens>
struct PanelLanes {
  __m512 lanes[kTokens][16];
  int used;
  explicit PanelLanes(int blocks) : used(used_lanes(blocks)) {
    for (auto& token : lanes)
      for (int j = 0; j < used; ++j) token[j] = _mm512_setzero_ps();
  }
  void add(int t, int block, __m512i sums, __m512 scale) {
    __m512& lane = lanes[t][block % 16];
    lane = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, lane);
  }
  __m512 tree(int t) { return lanes_tree(lanes[t], used); }  // sum_lanes_tree's pairs, 16 rows at once
};

// kTokens tokens (from t0) through one q8 panel.
template <int kTokens>
void q8_panel_tokens(const Q8RowView& w, const RowVector& rows, const std::byte* panel, const std::byte* packed,
                     std::size_t stride, int t0, float* y) {
  const int blocks = ceil_div(w.cols, kActivationBlock);
  const std::size_t scales_offset = static_cast<std::size_t>(blocks) * kActivationBlock;
  const std::byte* x[kTokens];
  for (int t = 0; t < kTokens; ++t) x[t] = packed + static_cast<std::size_t>(t0 + t) * stride;
  PanelLanes<kTokens> lanes(blocks);
  for (int b = 0; b < blocks; ++b) {
    __m512i sums[kTokens];
    for (int t = 0; t < kTokens; ++t)
      sums[t] = _mm512_set1_epi32(reinterpret_cast<const std::int32_t*>(x[t] + scales_offset + blocks * sizeof(float))[b]);
    const std::byte* weights = panel + b * kBlockPanelBytes;
    for (int j = 0; j < 16; ++j) {
      const __m512i columns = _mm512_load_si512(weights + j * 64);
      for (int t = 0; t < kTokens; ++t)
        sums[t] = dot_accumulate(sums[t], columns, broadcast_dword(x[t] + b * kActivationBlock + 4 * j));
    }
    for (int t = 0; t < kTokens; ++t)
      lanes.add(t, b, sums[t], _mm512_set1_ps(reinterpret_cast<const float*>(x[t] + scales_offset)[b]));
  }
  const __m512 scales = _mm512_maskz_loadu_ps(rows.valid, w.scales + rows.first);
  for (int t = 0; t < kTokens; ++t)
    _mm512_mask_storeu_ps(y + static_cast<std::size_t>(t0 + t) * w.rows + rows.first, rows.valid, _mm512_mul_ps(lanes.tree(t), scales));
}

template <int kTokens>
void q4_panel_tokens(const Q4G64View& w, const RowVector& rows, const std::byte* panel, const float* row_scales,
                     const std::byte* packed, std::size_t stride, int t0, float* y) {
  const int groups = w.cols / kQ4GroupSize;
  const std::byte* x[kTokens];
  for (int t = 0; t < kTokens; ++t) x[t] = packed + static_cast<std::size_t>(t0 + t) * stride;
  PanelLanes<kTokens> lanes(groups);
  const std::size_t scales_offset = q4_scales_offset(w.cols), correction_offset = q4_correction_offset(w.cols);
  for (int g = 0; g < groups; ++g) {
    const int p = g / 2, half = g % 2;
    __m512i sums[kTokens];
    for (int t = 0; t < kTokens; ++t)
      sums[t] = _mm512_set1_epi32(reinterpret_cast<const std::int32_t*>(x[t] + correction_offset)[g]);
    const std::byte* weights = panel + static_cast<std::size_t>(p) * 2 * kBlockPanelBytes;
    for (int j = 8 * half; j < 8 * half + 8; ++j) {
      const __m512i low = _mm512_load_si512(weights + j * 64), high = _mm512_load_si512(weights + kBlockPanelBytes + j * 64);
      for (int t = 0; t < kTokens; ++t) {
        const std::byte* q = x[t] + static_cast<std::size_t>(p) * kQ4PairBytes + 4 * j;
        sums[t] = dot_accumulate(dot_accumulate(sums[t], low, broadcast_dword(q)), high, broadcast_dword(q + 64));
      }
    }
    const __m512 weight_scales = _mm512_load_ps(row_scales + g * 16);
    for (int t = 0; t < kTokens; ++t)
      lanes.add(t, g, sums[t], _mm512_mul_ps(weight_scales, _mm512_set1_ps(reinterpret_cast<const float*>(x[t] + scales_offset)[g])));
  }
  for (int t = 0; t < kTokens; ++t)
    _mm512_mask_storeu_ps(y + static_cast<std::size_t>(t0 + t) * w.rows + rows.first, rows.valid, lanes.tree(t));
}

// Tokens per pass over a panel: the int32 and float accumulators of a tile
// (2 per token) stay in registers.
constexpr int kGemmTokenTile = 8;
// From this many tokens on, repacking the weights pays for itself.
constexpr int kGemmMinTokens = 4;

template <class Tile>
void for_each_token_tile(int count, const Tile& tile) {
  int t0 = 0;
  for (; t0 + kGemmTokenTile <= count; t0 += kGemmTokenTile) tile.template operator()<kGemmTokenTile>(t0);
  [&]<int... kTail>(std::integer_sequence<int, kTail...>) {
    ((count - t0 == kTail + 1 ? tile.template operator()<kTail + 1>(t0) : void()), ...);
  }(std::make_integer_sequence<int, kGemmTokenTile - 1>{});
}

void q8_rows_vnni(const Q8RowView& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
                  float* y) {
  const bool gemm = count >= kGemmMinTokens;
  std::byte* panel = gemm ? thread_scratch(static_cast<std::size_t>(ceil_div(w.cols, kActivationBlock)) * kBlockPanelBytes) : nullptr;
  for (int r = row_begin; r < row_end; r += kRowsPerVector) {
    const RowVector rows(r, row_end);
    if (!gemm) {
      for (int i = r; i < std::min(r + kRowsPerVector, row_end); ++i)
        for (int t = 0; t < count; ++t)
          y[static_cast<std::size_t>(t) * w.rows + i] = q8_row_one_token(w, i, packed + static_cast<std::size_t>(t) * stride);
      continue;
    }
    q8_pack_panel(w, rows, panel);
    prefetch_next_panel(w, r, row_end);
    for_each_token_tile(count, [&]<int kTokens>(int t0) { q8_panel_tokens<kTokens>(w, rows, panel, packed, stride, t0, y); });
  }
}

void q4_rows_vnni(const Q4G64View& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
                  float* y) {
  const bool gemm = count >= kGemmMinTokens;
  const int groups = w.cols / kQ4GroupSize;
  const std::size_t panel_bytes = static_cast<std::size_t>(ceil_div(groups, 2)) * 2 * kBlockPanelBytes;
  std::byte* panel = gemm ? thread_scratch(panel_bytes + static_cast<std::size_t>(groups) * 16 * sizeof(float)) : nullptr;
  float* row_scales = gemm ? reinterpret_cast<float*>(panel + panel_bytes) : nullptr;
  for (int r = row_begin; r < row_end; r += kRowsPerVector) {
    const RowVector rows(r, row_end);
    if (!gemm) {
      for (int i = r; i < std::min(r + kRowsPerVector, row_end); ++i)
        for (int t = 0; t < count; ++t)
          y[static_cast<std::size_t>(t) * w.rows + i] = q4_row_one_token(w, i, packed + static_cast<std::size_t>(t) * stride);
      continue;
    }
    q4_pack_panel(w, rows, panel, row_scales);
    prefetch_next_panel(w, r, row_end);
    for_each_token_tile(count, [&]<int kTokens>(int t0) { q4_panel_tokens<kTokens>(w, rows, panel, row_scales, packed, stride, t0, y); });
  }
}

}  // namespace
}  // namespace coli::kernels::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace coli::kernels::cpu::detail {

const VariantKernels& avx512_vnni_kernels() {
  static constexpr VariantKernels kernels{q8_packed_bytes_vnni, q8_quantize_vnni, q8_rows_vnni,
                                          q4_packed_bytes_vnni, q4_quantize_vnni, q4_rows_vnni};
  return kernels;
}

}  // namespace coli::kernels::cpu::detail
