#include <cstring>

#include "attention_rows.h"
#include "reference/gemv_reference.h"

namespace coli::forward::detail {
namespace {

void widen(const std::byte* row, KvType type, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = widen_one(row, type, i);
}

float dot(const float* a, const float* b, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy(float w, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += w * x[i];
}

void rescale_add(float a, float* y, float b, const float* x, int n) {
  for (int i = 0; i < n; ++i) y[i] = a * y[i] + b * x[i];
}

}  // namespace

float widen_one(const std::byte* row, KvType type, int index) {
  switch (type) {
    case KvType::f32: {
      float value;
      std::memcpy(&value, row + static_cast<std::size_t>(index) * 4, 4);
      return value;
    }
    case KvType::f16: {
      std::uint16_t bits;
      std::memcpy(&bits, row + static_cast<std::size_t>(index) * 2, 2);
      return kernels::half_to_float(bits);
    }
    case KvType::bf16: {
      std::uint16_t bits;
      std::memcpy(&bits, row + static_cast<std::size_t>(index) * 2, 2);
      const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
      float value;
      std::memcpy(&value, &wide, 4);
      return value;
    }
  }
  return 0;
}

const AttentionRowOps& scalar_row_ops() {
  static const AttentionRowOps ops{"scalar", widen, dot, axpy, rescale_add};
  return ops;
}

const AttentionRowOps& best_row_ops() {
  // __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0).
  static const AttentionRowOps& chosen = [&]() -> const AttentionRowOps& {
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f")) return avx512_row_ops();
    if (avx2) return avx2_row_ops();
    return scalar_row_ops();
  }();
  return chosen;
}

}  // namespace coli::forward::detail
