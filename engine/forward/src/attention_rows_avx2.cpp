// AVX2 + FMA + F16C; chosen only on CPUs that have them (best_row_ops).
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c")

#include "attention_rows.h"

namespace coli::forward::detail {
namespace {

void widen(const std::byte* row, KvType type, float* out, int n) {
  int i = 0;
  if (type == KvType::f16) {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i))));
    }
  } else if (type == KvType::bf16) {
    for (; i + 8 <= n; i += 8) {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
    }
  }
  for (; i < n; ++i) out[i] = widen_one(row, type, i);
}

float dot(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  const __m256 s = _mm256_add_ps(s0, s1);
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  float sum = _mm_cvtss_f32(half);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy(float w, const float* x, float* y, int n) {
  const __m256 weight = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(weight, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += w * x[i];
}

void rescale_add(float a, float* y, float b, const float* x, int n) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(y + i), _mm256_mul_ps(vb, _mm256_loadu_ps(x + i))));
  }
  for (; i < n; ++i) y[i] = a * y[i] + b * x[i];
}

}  // namespace

const AttentionRowOps& avx2_row_ops() {
  static const AttentionRowOps ops{"avx2", widen, dot, axpy, rescale_add};
  return ops;
}

}  // namespace coli::forward::detail
