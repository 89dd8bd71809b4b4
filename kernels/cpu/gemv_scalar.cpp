// Scalar variant: the definition of the quantised-activation arithmetic in
// plain C++ (runs anywhere; the compiler may still vectorise the int loops).
//   q8 packed: int8 q[blocks * 64] (zero-padded), then float d[blocks]
//   q4 packed: int8 q[cols], then float d[cols / 64]
#include <algorithm>
#include <cmath>

#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu::detail {

float quantize_block_reference(const float* x, int n, std::int8_t* q) {
  float max_abs = 0;
  for (int i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  if (max_abs == 0) {
    std::fill(q, q + n, std::int8_t{0});
    return 0;
  }
  const float inverse = 127.0f / max_abs;
  for (int i = 0; i < n; ++i) q[i] = static_cast<std::int8_t>(std::nearbyint(x[i] * inverse));
  return max_abs / 127.0f;
}

namespace {

std::size_t q8_packed_bytes(int cols) {
  const int blocks = ceil_div(cols, kActivationBlock);
  return static_cast<std::size_t>(blocks) * kActivationBlock + static_cast<std::size_t>(blocks) * sizeof(float);
}

void q8_quantize(const float* x, int cols, std::byte* packed) {
  const int blocks = ceil_div(cols, kActivationBlock);
  auto* q = reinterpret_cast<std::int8_t*>(packed);
  auto* d = reinterpret_cast<float*>(packed + static_cast<std::size_t>(blocks) * kActivationBlock);
  std::fill(q, q + static_cast<std::size_t>(blocks) * kActivationBlock, std::int8_t{0});
  for (int b = 0; b < blocks; ++b) {
    const int begin = b * kActivationBlock;
    d[b] = quantize_block_reference(x + begin, std::min(kActivationBlock, cols - begin), q + begin);
  }
}

void q8_rows(const Q8RowView& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
             float* y) {
  const int blocks = ceil_div(w.cols, kActivationBlock);
  const std::size_t scales_offset = static_cast<std::size_t>(blocks) * kActivationBlock;
  for (int r = row_begin; r < row_end; ++r) {
    const std::int8_t* row = w.weights + static_cast<std::size_t>(r) * w.cols;
    for (int t0 = 0; t0 < count; t0 += kTokenTile) {
      const int tokens = std::min(kTokenTile, count - t0);
      float sums[kTokenTile] = {};
      for (int b = 0; b < blocks; ++b) {
        const int begin = b * kActivationBlock, length = std::min(kActivationBlock, w.cols - begin);
        for (int t = 0; t < tokens; ++t) {
          const std::byte* x = packed + static_cast<std::size_t>(t0 + t) * stride;
          const auto* q = reinterpret_cast<const std::int8_t*>(x) + begin;
          std::int32_t dot = 0;
          for (int i = 0; i < length; ++i) dot += row[begin + i] * q[i];
          sums[t] += static_cast<float>(dot) * reinterpret_cast<const float*>(x + scales_offset)[b];
        }
      }
      for (int t = 0; t < tokens; ++t) y[static_cast<std::size_t>(t0 + t) * w.rows + r] = sums[t] * w.scales[r];
    }
  }
}

std::size_t q4_packed_bytes(int cols) {
  return static_cast<std::size_t>(cols) + static_cast<std::size_t>(cols / kQ4GroupSize) * sizeof(float);
}

void q4_quantize(const float* x, int cols, std::byte* packed) {
  auto* q = reinterpret_cast<std::int8_t*>(packed);
  auto* d = reinterpret_cast<float*>(packed + cols);
  for (int g = 0; g < cols / kQ4GroupSize; ++g)
    d[g] = quantize_block_reference(x + g * kQ4GroupSize, kQ4GroupSize, q + g * kQ4GroupSize);
}

void q4_rows(const Q4G64View& w, const std::byte* packed, std::size_t stride, int count, int row_begin, int row_end,
             float* y) {
  const int groups = w.cols / kQ4GroupSize;
  for (int r = row_begin; r < row_end; ++r) {
    const std::uint8_t* row = w.nibbles + static_cast<std::size_t>(r) * w.cols / 2;
    const std::uint16_t* row_scales = w.scales + static_cast<std::size_t>(r) * groups;
    for (int t0 = 0; t0 < count; t0 += kTokenTile) {
      const int tokens = std::min(kTokenTile, count - t0);
      float sums[kTokenTile] = {};
      for (int g = 0; g < groups; ++g) {
        const std::uint8_t* bytes = row + g * kQ4GroupSize / 2;
        const float weight_scale = half_to_float_fast(row_scales[g]);
        for (int t = 0; t < tokens; ++t) {
          const std::byte* x = packed + static_cast<std::size_t>(t0 + t) * stride;
          const auto* q = reinterpret_cast<const std::int8_t*>(x) + g * kQ4GroupSize;
          std::int32_t dot = 0;
          for (int i = 0; i < kQ4GroupSize / 2; ++i)
            dot += ((bytes[i] & 0x0f) - 8) * q[2 * i] + ((bytes[i] >> 4) - 8) * q[2 * i + 1];
          const float activation_scale = reinterpret_cast<const float*>(x + w.cols)[g];
          sums[t] += static_cast<float>(dot) * (activation_scale * weight_scale);
        }
      }
      for (int t = 0; t < tokens; ++t) y[static_cast<std::size_t>(t0 + t) * w.rows + r] = sums[t];
    }
  }
}

}  // namespace

const VariantKernels& scalar_kernels() {
  static constexpr VariantKernels kernels{q8_packed_bytes, q8_quantize, q8_rows, q4_packed_bytes, q4_quantize, q4_rows};
  return kernels;
}

}  // namespace coli::kernels::cpu::detail
