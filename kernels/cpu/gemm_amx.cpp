// The amx variant: the avx512vnni variant's arithmetic (the "exact block
// sum" definition of gemv_cpu.h) with the int32 block sums of 4+ tokens
// computed on AMX tiles: one TDPBSSD multiplies 16 tokens by 16 weight rows
// over one 64-column block. A panel of 16 rows takes its tokens one tile of
// 16 at a time: their float lanes (1 KiB a token) then stay in L1. Passes
// of 4 tiles, which load each weight tile once for 64 tokens, ran the
// OLMoE-shaped prompt 16-19% slower on a Sapphire Rapids-class VM (1 and 2
// threads): their 64 KiB of lanes spilled past the 48 KiB L1. Fewer
// tokens (decode) run the avx512vnni kernels.
// Every S_b is exact either way and the float steps are the definition's, so
// the results equal avx512vnni's bit for bit.
//
// Packed activations: avx512vnni's bytes; for q4 then an "A-row" copy, per
// group 64 bytes: the group's even columns, then its odd ones (the nibble
// order of the weight panel below), so 16 tokens' rows of one group are one
// strided tile load. q8's zero-padded 64-byte blocks already are A rows.
// Tiles read whole 16-token groups: QuantizedActivations keeps room for
// them (rows of tokens past the count are read and their sums dropped).
//
// Weight panel of 16 rows, per block (q8) or group (q4) 1 KiB: B-tile row k
// holds columns 4k..4k+3 (in A-row order) of the 16 rows as signed bytes
// (q4: nibble - 8), so C[t][i] = S of token t and row i, with no correction.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/amx_tiles.h"
#include "cpu/variant_kernels.h"

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, as in gemv_avx512_vnni.cpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")
#include "cpu/simd_helpers_avx2.h"
#include "cpu/vnni_panel.h"

namespace coli::kernels::cpu::detail {
namespace {

constexpr int kTileTokens = kAmxTileTokens;  // tokens a pass takes through a panel (block_sums)
constexpr std::size_t kTileBytes = 1024;
// kAmxMinTokens (amx_tiles.h): from that many tokens on the tiles beat the avx512vnni GEMM (its threshold).

// Palette 1, all eight tiles 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

// GCC's tile intrinsics are asm statements without a memory clobber: this
// keeps the compiler's own loads and stores on their side of the tile ops.
inline void compiler_fence() { asm volatile("" ::: "memory"); }

// Tile state is per thread: loaded on entry, released on exit so a thread
// that leaves the kernels does not carry 8 KiB of tile state.
struct TileSession {
  TileSession() {
    static const TileConfig config;
    _tile_loadconfig(&config);
  }
  ~TileSession() { _tile_release(); }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
};

// ------------------------------------------------------------- packing

std::size_t q8_packed_bytes_amx(int cols) { return avx512_vnni_kernels().q8_packed_bytes(cols); }
void q8_quantize_amx(const float* x, int cols, std::byte* packed) { avx512_vnni_kernels().q8_quantize(x, cols, packed); }

std::size_t q4_a_rows_offset(int cols) { return round_up(avx512_vnni_kernels().q4_packed_bytes(cols), 64); }
std::size_t q4_packed_bytes_amx(int cols) {
  return q4_a_rows_offset(cols) + static_cast<std::size_t>(cols / kQ4GroupSize) * kActivationBlock;
}

void q4_quantize_amx(const float* x, int cols, std::byte* packed) {
  avx512_vnni_kernels().q4_quantize(x, cols, packed);
  std::byte* a_rows = packed + q4_a_rows_offset(cols);
  for (int g = 0; g < cols / kQ4GroupSize; ++g) {
    const std::byte* pair = packed + static_cast<std::size_t>(g / 2) * kQ4PairBytes + 32 * (g % 2);
    std::memcpy(a_rows + g * kActivationBlock, pair, 32);            // even columns
    std::memcpy(a_rows + g * kActivationBlock + 32, pair + 64, 32);  // odd columns
  }
}

void q8_pack_amx_panel(const Q8RowView& w, const RowVector& rows, std::byte* panel) {
  for (int b = 0; b < ceil_div(w.cols, kActivationBlock); ++b) {
    __m512i v[16];
    q8_block_columns(w, rows, b, v);
    for (int k = 0; k < 16; ++k) _mm512_store_si512(panel + b * kTileBytes + k * 64, v[k]);
  }
}

// Also the weight scales, transposed: scales_out[g] = 16 rows' scales of group g.
void q4_pack_amx_panel(const Q4G64View& w, const RowVector& rows, std::byte* panel, float* scales_out) {
  const int groups = w.cols / kQ4GroupSize;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  for (int p = 0; p < ceil_div(groups, 2); ++p) {
    __m512i columns[16];
    q4_pair_columns(w, rows, p, columns);
    for (int j = 0; j < 16 && 2 * p + j / 8 < groups; ++j) {
      std::byte* tile = panel + static_cast<std::size_t>(2 * p + j / 8) * kTileBytes;
      const __m512i even = _mm512_and_si512(columns[j], low_nibbles);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi16(columns[j], 4), low_nibbles);
      _mm512_store_si512(tile + (j % 8) * 64, _mm512_sub_epi8(even, eight));
      _mm512_store_si512(tile + (8 + j % 8) * 64, _mm512_sub_epi8(odd, eight));
    }
  }
  q4_panel_scales(w, rows, scales_out);
}

// ------------------------------------------------------------- the GEMM

// One block (or group) of 16 tokens' A rows through the panel's B tile:
// C = those tokens times the 16 rows, stored to sums (16 x 16 int32). C in
// tmm0, B in tmm4, A in tmm5.
void block_sums(const std::byte* b_tile, const std::byte* a_rows, std::size_t stride, std::int32_t* sums) {
  compiler_fence();
  _tile_loadd(4, b_tile, 64);
  _tile_zero(0);
  _tile_loadd(5, a_rows, stride);
  _tile_dpbssd(0, 5, 4);
  _tile_stored(0, sums, 64);
  compiler_fence();
}

// Per-thread working memory of one call: the panel, its scales, the C
// tiles' sums and the definition's 16 float lanes per token of a block.
struct GemmScratch {
  std::byte* panel;
  float* row_scales;
  std::int32_t* sums;  // 16 tokens x 16 rows
  __m512* lanes;       // kTileTokens x 16
  explicit GemmScratch(int blocks) {
    const std::size_t panel_bytes = static_cast<std::size_t>(blocks) * kTileBytes, scales_bytes = static_cast<std::size_t>(blocks) * 64;
    const std::size_t sums_bytes = kTileBytes, lanes_bytes = kTileTokens * 16 * sizeof(__m512);
    std::byte* base = thread_scratch(panel_bytes + scales_bytes + sums_bytes + lanes_bytes);
    panel = base;
    row_scales = reinterpret_cast<float*>(base + panel_bytes);
    sums = reinterpret_cast<std::int32_t*>(base + panel_bytes + scales_bytes);
    lanes = reinterpret_cast<__m512*>(base + panel_bytes + scales_bytes + sums_bytes);
  }
};

// `tokens` (up to 16) tokens from t0 through one panel. block_scale(t, b) is c_b of
// the definition for token t0 + t (a vector over the 16 rows); a_row(b) the
// A row of token t0, block b. Returns the lanes; the caller takes the tree.
template <class ARow, class BlockScale>
void panel_block(int blocks, int tokens, std::size_t stride, const GemmScratch& scratch, const ARow& a_row,
                 const BlockScale& block_scale) {
  const int used = used_lanes(blocks);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < used; ++j) scratch.lanes[t * 16 + j] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const std::byte* b_tile = scratch.panel + static_cast<std::size_t>(b) * kTileBytes;
    block_sums(b_tile, a_row(b), stride, scratch.sums);
    for (int t = 0; t < tokens; ++t) {
      __m512& lane = scratch.lanes[t * 16 + b % 16];
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_load_si512(scratch.sums + t * 16));
      lane = _mm512_fmadd_ps(sum, block_scale(t, b), lane);
    }
  }
}

void q8_rows_amx(const Q8RowView& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
                 float* y) {
  if (count < kAmxMinTokens) return avx512_vnni_kernels().q8_rows(w, packed, stride, count, row_begin, row_end, y);
  const int blocks = ceil_div(w.cols, kActivationBlock);
  const std::size_t scales_offset = static_cast<std::size_t>(blocks) * kActivationBlock;
  const GemmScratch scratch(blocks);
  const TileSession tiles;
  for (int r = row_begin; r < row_end; r += kRowsPerVector) {
    const RowVector rows(r, row_end);
    q8_pack_amx_panel(w, rows, scratch.panel);
    prefetch_next_panel(w, r, row_end);
    const __m512 row_scales = _mm512_maskz_loadu_ps(rows.valid, w.scales + rows.first);
    for (int t0 = 0; t0 < count; t0 += kTileTokens) {
      const int tokens = std::min(kTileTokens, count - t0);
      const std::byte* first = packed + static_cast<std::size_t>(t0) * stride;
      auto a_row = [&](int b) { return first + static_cast<std::size_t>(b) * kActivationBlock; };
      auto d = [&](int t, int b) {
        return _mm512_set1_ps(reinterpret_cast<const float*>(first + static_cast<std::size_t>(t) * stride + scales_offset)[b]);
      };
      panel_block(blocks, tokens, stride, scratch, a_row, d);
      for (int t = 0; t < tokens; ++t)
        _mm512_mask_storeu_ps(y + static_cast<std::size_t>(t0 + t) * w.rows + rows.first, rows.valid,
                              _mm512_mul_ps(lanes_tree(scratch.lanes + t * 16, used_lanes(blocks)), row_scales));
    }
  }
}

void q4_rows_amx(const Q4G64View& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
                 float* y) {
  if (count < kAmxMinTokens) return avx512_vnni_kernels().q4_rows(w, packed, stride, count, row_begin, row_end, y);
  const int groups = w.cols / kQ4GroupSize;
  const std::size_t scales_offset = q4_scales_offset(w.cols), a_rows_offset = q4_a_rows_offset(w.cols);
  const GemmScratch scratch(groups);
  const TileSession tiles;
  for (int r = row_begin; r < row_end; r += kRowsPerVector) {
    const RowVector rows(r, row_end);
    q4_pack_amx_panel(w, rows, scratch.panel, scratch.row_scales);
    prefetch_next_panel(w, r, row_end);
    for (int t0 = 0; t0 < count; t0 += kTileTokens) {
      const int tokens = std::min(kTileTokens, count - t0);
      const std::byte* first = packed + static_cast<std::size_t>(t0) * stride;
      auto a_row = [&](int g) { return first + a_rows_offset + static_cast<std::size_t>(g) * kActivationBlock; };
      auto scale = [&](int t, int g) {  // d_g * weight scale, one float product as in avx512vnni
        const float d = reinterpret_cast<const float*>(first + static_cast<std::size_t>(t) * stride + scales_offset)[g];
        return _mm512_mul_ps(_mm512_load_ps(scratch.row_scales + g * 16), _mm512_set1_ps(d));
      };
      panel_block(groups, tokens, stride, scratch, a_row, scale);
      for (int t = 0; t < tokens; ++t)
        _mm512_mask_storeu_ps(y + static_cast<std::size_t>(t0 + t) * w.rows + rows.first, rows.valid,
                              lanes_tree(scratch.lanes + t * 16, used_lanes(groups)));
    }
  }
}

}  // namespace
}  // namespace coli::kernels::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace coli::kernels::cpu::detail {

const VariantKernels& amx_kernels() {
  static constexpr VariantKernels kernels{q8_packed_bytes_amx, q8_quantize_amx, q8_rows_amx,
                                          q4_packed_bytes_amx, q4_quantize_amx, q4_rows_amx};
  return kernels;
}

}  // namespace coli::kernels::cpu::detail
