#include "reference/gemv_reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace coli::kernels {

float half_to_float(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);  // signed zero
    // Subnormal half: shift until normal, adjusting the exponent.
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    return std::bit_cast<float>(sign | (exponent << 23) | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

std::uint16_t float_to_half(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>(sign | 0x7e00);
  if (magnitude >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (magnitude < std::ldexp(1.0f, -14)) {  // subnormal half: multiples of 2^-24
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(std::ldexp(magnitude, 24))));
  }
  int exponent;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent, fraction in [0.5, 1)
  std::uint32_t mantissa = static_cast<std::uint32_t>(std::nearbyint(std::ldexp(fraction, 11)));  // 1024..2048
  if (mantissa == 2048) {
    mantissa = 1024;
    ++exponent;
  }
  const std::uint32_t biased = static_cast<std::uint32_t>(exponent - 1 + 15);
  if (biased >= 31) return static_cast<std::uint16_t>(sign | 0x7c00);
  return static_cast<std::uint16_t>(sign | (biased << 10) | (mantissa & 0x3ff));
}

Q8RowMatrix quantize_q8_row(std::span<const float> matrix, int rows, int cols) {
  Q8RowMatrix q{rows, cols, std::vector<std::int8_t>(static_cast<size_t>(rows) * cols), std::vector<float>(rows)};
  for (int r = 0; r < rows; ++r) {
    const float* row = matrix.data() + static_cast<size_t>(r) * cols;
    float max_abs = 0;
    for (int c = 0; c < cols; ++c) max_abs = std::max(max_abs, std::fabs(row[c]));
    const float scale = max_abs > 0 ? max_abs / 127.0f : 1.0f;
    q.scales[r] = scale;
    for (int c = 0; c < cols; ++c) {
      q.weights[static_cast<size_t>(r) * cols + c] =
          static_cast<std::int8_t>(std::clamp(std::nearbyint(row[c] / scale), -127.0f, 127.0f));
    }
  }
  return q;
}

Q4G64Matrix quantize_q4_g64(std::span<const float> matrix, int rows, int cols) {
  const int groups = cols / kQ4GroupSize;
  Q4G64Matrix q{rows, cols, std::vector<std::uint8_t>(static_cast<size_t>(rows) * cols / 2),
                std::vector<std::uint16_t>(static_cast<size_t>(rows) * groups)};
  for (int r = 0; r < rows; ++r) {
    for (int g = 0; g < groups; ++g) {
      const float* group = matrix.data() + static_cast<size_t>(r) * cols + g * kQ4GroupSize;
      float max_abs = 0;
      for (int i = 0; i < kQ4GroupSize; ++i) max_abs = std::max(max_abs, std::fabs(group[i]));
      const std::uint16_t half = float_to_half(max_abs > 0 ? max_abs / 7.0f : 1.0f);
      const float scale = half_to_float(half);  // quantise against the scale the kernels will see
      q.scales[static_cast<size_t>(r) * groups + g] = half;
      for (int i = 0; i < kQ4GroupSize; ++i) {
        const int value = static_cast<int>(std::clamp(std::nearbyint(group[i] / scale), -8.0f, 7.0f));
        const size_t c = static_cast<size_t>(g) * kQ4GroupSize + i;
        const size_t byte = static_cast<size_t>(r) * cols / 2 + c / 2;
        const std::uint8_t nibble = static_cast<std::uint8_t>(value + 8);
        q.nibbles[byte] = static_cast<std::uint8_t>(c % 2 == 0 ? (q.nibbles[byte] & 0xf0) | nibble
                                                               : (q.nibbles[byte] & 0x0f) | (nibble << 4));
      }
    }
  }
  return q;
}

void gemv_reference_q8(const std::int8_t* weights, const float* scales, int rows, int cols, std::span<const float> x,
                       std::span<float> y) {
  for (int r = 0; r < rows; ++r) {
    const std::int8_t* row = weights + static_cast<size_t>(r) * cols;
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(sum * scales[r]);
  }
}

void gemv_reference_q4(const std::uint8_t* nibbles, const std::uint16_t* scales, int rows, int cols,
                       std::span<const float> x, std::span<float> y) {
  const int groups = cols / kQ4GroupSize;
  for (int r = 0; r < rows; ++r) {
    const std::uint8_t* row = nibbles + static_cast<size_t>(r) * cols / 2;
    double sum = 0;
    for (int g = 0; g < groups; ++g) {
      double group_sum = 0;
      for (int i = 0; i < kQ4GroupSize; i += 2) {
        const std::uint8_t byte = row[(g * kQ4GroupSize + i) / 2];
        const size_t c = static_cast<size_t>(g) * kQ4GroupSize + i;
        group_sum += static_cast<double>((byte & 0x0f) - 8) * x[c] + static_cast<double>((byte >> 4) - 8) * x[c + 1];
      }
      sum += group_sum * half_to_float(scales[static_cast<size_t>(r) * groups + g]);
    }
    y[r] = static_cast<float>(sum);
  }
}

void gemv_reference(const Q8RowMatrix& w, std::span<const float> x, std::span<float> y) {
  gemv_reference_q8(w.weights.data(), w.scales.data(), w.rows, w.cols, x, y);
}

void gemv_reference(const Q4G64Matrix& w, std::span<const float> x, std::span<float> y) {
  gemv_reference_q4(w.nibbles.data(), w.scales.data(), w.rows, w.cols, x, y);
}

std::size_t gemv_bytes(const Q8RowMatrix& w) {
  return w.weights.size() + w.scales.size() * sizeof(float) + static_cast<size_t>(w.cols) * sizeof(float);
}

std::size_t gemv_bytes(const Q4G64Matrix& w) {
  return w.nibbles.size() + w.scales.size() * sizeof(std::uint16_t) + static_cast<size_t>(w.cols) * sizeof(float);
}

}  // namespace coli::kernels
