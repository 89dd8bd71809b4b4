// The scalar GEMV reference and its layouts: every GPU kernel is judged
// against it, so it is checked here against plain float arithmetic.
#include "reference/gemv_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace coli::kernels {
namespace {

std::vector<float> pseudo_random(std::size_t count, std::uint32_t seed) {
  std::vector<float> values(count);
  std::uint32_t state = seed;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;  // LCG: enough for test data
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return values;
}

TEST(HalfConversion, EveryNonNanHalfRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    const float value = half_to_float(half);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(value)))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(float_to_half(value), half) << "half 0x" << std::hex << bits << " = " << value;
  }
}

TEST(HalfConversion, KnownValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);          // largest finite half
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);          // rounds up to inf
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(half_to_float(0x7c00), INFINITY);
  EXPECT_EQ(half_to_float(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
}

TEST(HalfConversion, SubnormalsAndTiesRoundToEven) {
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));             // smallest subnormal
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));          // largest subnormal
  EXPECT_EQ(half_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);             // tie: to even (0)
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);             // tie: to even (2)
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -26)), 0x0000);             // underflow
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie between 0x3c00 and 0x3c01
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);      // tie between 0x3c01 and 0x3c02
  EXPECT_EQ(float_to_half(std::ldexp(2047.0f, -25)), 0x0400);          // rounds up into the normals
}

TEST(GemvReference, Q8RowMatchesFloatGemvWithinQuantisationError) {
  const int rows = 13, cols = 203;
  const std::vector<float> matrix = pseudo_random(static_cast<std::size_t>(rows) * cols, 7);
  const std::vector<float> x = pseudo_random(cols, 8);
  const Q8RowMatrix q = quantize_q8_row(matrix, rows, cols);
  std::vector<float> y(rows);
  gemv_reference(q, x, y);
  for (int r = 0; r < rows; ++r) {
    double exact = 0, bound = 0;
    for (int c = 0; c < cols; ++c) {
      exact += static_cast<double>(matrix[static_cast<std::size_t>(r) * cols + c]) * x[c];
      bound += 0.5 * q.scales[r] * std::fabs(x[c]);  // each weight is off by at most scale/2
    }
    EXPECT_NEAR(y[r], exact, bound * 1.0001 + 1e-6) << "row " << r;
  }
}

TEST(GemvReference, Q4G64MatchesFloatGemvWithinQuantisationError) {
  const int rows = 9, cols = 320;
  const std::vector<float> matrix = pseudo_random(static_cast<std::size_t>(rows) * cols, 11);
  const std::vector<float> x = pseudo_random(cols, 12);
  const Q4G64Matrix q = quantize_q4_g64(matrix, rows, cols);
  ASSERT_EQ(q.nibbles.size(), static_cast<std::size_t>(rows) * cols / 2);
  ASSERT_EQ(q.scales.size(), static_cast<std::size_t>(rows) * cols / 64);
  std::vector<float> y(rows);
  gemv_reference(q, x, y);
  for (int r = 0; r < rows; ++r) {
    double exact = 0, bound = 0;
    for (int c = 0; c < cols; ++c) {
      const float w = matrix[static_cast<std::size_t>(r) * cols + c];
      exact += static_cast<double>(w) * x[c];
      const int g = c / 64;
      double group_max = 0;
      for (int i = 0; i < 64; ++i) {
        group_max = std::max(group_max, static_cast<double>(std::fabs(matrix[static_cast<std::size_t>(r) * cols + g * 64 + i])));
      }
      const double scale = half_to_float(q.scales[static_cast<std::size_t>(r) * (cols / 64) + g]);
      // Rounding to the nearest step (scale/2), or clamping at 7 when the
      // binary16 scale came out slightly below max/7.
      bound += std::max(0.5 * scale, group_max - 7 * scale) * std::fabs(x[c]);
    }
    EXPECT_NEAR(y[r], exact, bound * 1.0001 + 1e-6) << "row " << r;
  }
}

TEST(GemvReference, Q4NibbleOrderIsLowNibbleForEvenColumns) {
  std::vector<float> row(64, 0.0f);
  row[0] = 7.0f;   // value 7 -> nibble 15
  row[1] = -7.0f;  // value -7 -> nibble 1
  row[2] = 3.0f;   // value 3 -> nibble 11
  const Q4G64Matrix q = quantize_q4_g64(row, 1, 64);
  EXPECT_EQ(half_to_float(q.scales[0]), 1.0f);
  EXPECT_EQ(q.nibbles[0], 0x1f);
  EXPECT_EQ(q.nibbles[1], 0x8b);  // column 3 is zero -> nibble 8
  std::vector<float> x(64, 0.0f);
  x[1] = 2.0f;
  x[2] = 1.0f;
  std::vector<float> y(1);
  gemv_reference(q, x, y);
  EXPECT_EQ(y[0], -14.0f + 3.0f);
}

TEST(GemvReference, BytesCountWeightsScalesAndX) {
  const std::vector<float> matrix(4 * 128, 0.5f);
  EXPECT_EQ(gemv_bytes(quantize_q8_row(matrix, 4, 128)), 4u * 128 + 4 * 4 + 128 * 4);
  EXPECT_EQ(gemv_bytes(quantize_q4_g64(matrix, 4, 128)), 4u * 64 + 4 * 2 * 2 + 128 * 4);
}

}  // namespace
}  // namespace coli::kernels
