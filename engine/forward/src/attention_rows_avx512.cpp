// AVX-512F (+ the AVX2/F16C it implies on every such CPU); chosen only on
// CPUs that have it (best_row_ops). Tails use masked loads, so any head_dim works.
#include <immintrin.h>

#include <algorithm>

// GCC 12's own _mm512_undefined_* (`__m512 __Y = __Y;`) trips
// -W(maybe-)uninitialized once inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx2,fma,f16c")

#include "attention_rows.h"
#include "coli/base/stream_prefetch.h"

namespace coli::forward::detail {
namespace {

__mmask16 tail_mask(int remaining) { return static_cast<__mmask16>((1u << remaining) - 1u); }

void widen(const std::byte* row, KvType type, float* out, int n) {
  int i = 0;
  if (type == KvType::f16) {
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i))));
    }
  } else if (type == KvType::bf16) {
    for (; i + 16 <= n; i += 16) {
      const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
      _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
    }
  }
  for (; i < n; ++i) out[i] = widen_one(row, type, i);
}

float dot(const float* a, const float* b, int n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
  }
  for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

void axpy(float w, const float* x, float* y, int n) {
  const __m512 weight = _mm512_set1_ps(w);
  int i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(weight, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(weight, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

void rescale_add(float a, float* y, float b, const float* x, int n) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(y + i), _mm512_mul_ps(vb, _mm512_loadu_ps(x + i))));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 yv = _mm512_maskz_loadu_ps(m, y + i), xv = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, yv, _mm512_mul_ps(vb, xv)));
  }
}

// 16 stored values of `row` from column c as f32 (exact for f16 and bf16).
inline __m512 load16(const std::byte* row, KvType type, int c) {
  if (type == KvType::f16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
  if (type == KvType::bf16) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
}

// The cache lines of the row `ahead` bytes past `row`: a head's rows are one
// contiguous stream, and the hardware prefetchers stop at every 4 KiB page
// (16 f16 rows of head_dim 128), so without this each thread waits on DRAM
// at every page of K and V. Past a tile's last row it fetches the next
// tile's, which the same thread reads next; past the block's end it only
// warms the next head's rows (a prefetch never faults).
inline void prefetch_ahead(const std::byte* row, std::uint64_t row_bytes, std::size_t ahead) {
  if (ahead == 0) return;
  for (std::uint64_t b = 0; b < row_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(row + ahead + b), _MM_HINT_T0);
}

// dot's accumulators and order, n % 16 == 0 (no masked tail).
void dot_rows(const float* q, const std::byte* rows, std::uint64_t row_bytes, KvType type, int count, int n, float* scores) {
  const std::size_t ahead = stream_prefetch_bytes();
  for (int i = 0; i < count; ++i) {
    const std::byte* row = rows + static_cast<std::uint64_t>(i) * row_bytes;
    prefetch_ahead(row, row_bytes, ahead);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int c = 0;
    for (; c + 32 <= n; c += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), load16(row, type, c), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c + 16), load16(row, type, c + 16), s1);
    }
    for (; c + 16 <= n; c += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), load16(row, type, c), s0);
    scores[i] = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  }
}

// kChunks x 16 columns of acc from column c: row after row, every column's
// register its own chain (one chain over the rows was FMA latency-bound).
// The first pass over the rows (c == 0) prefetches them whole.
template <int kChunks>
void axpy_rows_chunks(const float* w, const std::byte* rows, std::uint64_t row_bytes, KvType type, int count, int c, float* acc) {
  const std::size_t ahead = c == 0 ? stream_prefetch_bytes() : 0;
  __m512 sum[kChunks];
  for (int k = 0; k < kChunks; ++k) sum[k] = _mm512_loadu_ps(acc + c + 16 * k);
  for (int i = 0; i < count; ++i) {
    const std::byte* row = rows + static_cast<std::uint64_t>(i) * row_bytes;
    prefetch_ahead(row, row_bytes, ahead);
    const __m512 weight = _mm512_set1_ps(w[i]);
    for (int k = 0; k < kChunks; ++k) sum[k] = _mm512_fmadd_ps(weight, load16(row, type, c + 16 * k), sum[k]);
  }
  for (int k = 0; k < kChunks; ++k) _mm512_storeu_ps(acc + c + 16 * k, sum[k]);
}

// axpy row after row (each column's FMAs in row order, as axpy's), up to 8
// registers of columns at a time.
void axpy_rows(const float* w, const std::byte* rows, std::uint64_t row_bytes, KvType type, int count, int n, float* acc) {
  for (int c = 0; c < n; c += 128) {
    switch (std::min(8, (n - c) / 16)) {
      case 8: axpy_rows_chunks<8>(w, rows, row_bytes, type, count, c, acc); break;
      case 7: axpy_rows_chunks<7>(w, rows, row_bytes, type, count, c, acc); break;
      case 6: axpy_rows_chunks<6>(w, rows, row_bytes, type, count, c, acc); break;
      case 5: axpy_rows_chunks<5>(w, rows, row_bytes, type, count, c, acc); break;
      case 4: axpy_rows_chunks<4>(w, rows, row_bytes, type, count, c, acc); break;
      case 3: axpy_rows_chunks<3>(w, rows, row_bytes, type, count, c, acc); break;
      case 2: axpy_rows_chunks<2>(w, rows, row_bytes, type, count, c, acc); break;
      default: axpy_rows_chunks<1>(w, rows, row_bytes, type, count, c, acc); break;
    }
  }
}

}  // namespace

const AttentionRowOps& avx512_row_ops() {
  static const AttentionRowOps ops{"avx512", widen, dot, axpy, rescale_add, dot_rows, axpy_rows};
  return ops;
}

}  // namespace coli::forward::detail
