// The avx512vnni variant's "exact block sum" arithmetic (gemv_avx512_vnni.cpp,
// gemv_cpu.h), rebuilt here in plain C++ from the quantised activations, must
// match the kernels bit for bit for every token count (decode kernel below
// the GEMM threshold, the 16-row GEMM above it, every token-tile tail), every
// thread count, rows that are not a multiple of 16, partial q8 blocks, odd q4
// group counts and more than 16 blocks per row (lanes reused).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/gemv_cpu.h"
#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu {
namespace {

constexpr int kMaxTokens = 300;

std::vector<float> random_values(std::size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator);
  return values;
}

// Activations with a zero block, an outlier and a negative extreme per token.
std::vector<float> activations(int count, int cols, unsigned seed) {
  std::vector<float> x = random_values(static_cast<std::size_t>(count) * cols, seed);
  for (int t = 0; t < count; ++t) {
    float* vector = x.data() + static_cast<std::size_t>(t) * cols;
    if (cols > 128 && t % 3 == 0) std::fill(vector + 64, vector + 128, 0.0f);
    vector[(t * 7) % cols] = t % 2 ? 500.0f : -500.0f;
  }
  return x;
}

// The documented activation quantisation of one block, independent of the kernels.
float quantize_block(const float* x, int n, int* q) {
  float max_abs = 0;
  for (int i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  for (int i = 0; i < n; ++i) q[i] = max_abs == 0 ? 0 : static_cast<int>(std::nearbyint(x[i] * (127.0f / max_abs)));
  return max_abs / 127.0f;
}

// lane[b % 16] = fma(S_b, c_b, lane[b % 16]) in block order, then the tree.
template <class BlockSum, class BlockScale>
float exact_block_sum_row(int blocks, BlockSum block_sum, BlockScale block_scale) {
  float lanes[16] = {};
  for (int b = 0; b < blocks; ++b) lanes[b % 16] = std::fma(static_cast<float>(block_sum(b)), block_scale(b), lanes[b % 16]);
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lanes[j] = lanes[j] + lanes[j + width];
  return lanes[0];
}

std::vector<float> model(const Q8RowMatrix& w, const std::vector<float>& x, int count) {
  const int blocks = (w.cols + 63) / 64;
  std::vector<float> y(static_cast<std::size_t>(count) * w.rows);
  std::vector<int> q(static_cast<std::size_t>(blocks) * 64, 0);
  std::vector<float> d(blocks);
  for (int t = 0; t < count; ++t) {
    const float* token = x.data() + static_cast<std::size_t>(t) * w.cols;
    for (int b = 0; b < blocks; ++b) d[b] = quantize_block(token + 64 * b, std::min(64, w.cols - 64 * b), q.data() + 64 * b);
    for (int r = 0; r < w.rows; ++r) {
      const std::int8_t* row = w.weights.data() + static_cast<std::size_t>(r) * w.cols;
      auto block_sum = [&](int b) {
        int sum = 0;
        for (int i = 64 * b; i < std::min(64 * b + 64, w.cols); ++i) sum += row[i] * q[i];
        return sum;
      };
      y[static_cast<std::size_t>(t) * w.rows + r] = exact_block_sum_row(blocks, block_sum, [&](int b) { return d[b]; }) * w.scales[r];
    }
  }
  return y;
}

std::vector<float> model(const Q4G64Matrix& w, const std::vector<float>& x, int count) {
  const int groups = w.cols / 64;
  std::vector<float> y(static_cast<std::size_t>(count) * w.rows);
  std::vector<int> q(w.cols);
  std::vector<float> d(groups);
  for (int t = 0; t < count; ++t) {
    const float* token = x.data() + static_cast<std::size_t>(t) * w.cols;
    for (int g = 0; g < groups; ++g) d[g] = quantize_block(token + 64 * g, 64, q.data() + 64 * g);
    for (int r = 0; r < w.rows; ++r) {
      const std::uint8_t* row = w.nibbles.data() + static_cast<std::size_t>(r) * w.cols / 2;
      auto block_sum = [&](int g) {
        int sum = 0;
        for (int i = 64 * g; i < 64 * g + 64; ++i) sum += ((i % 2 ? row[i / 2] >> 4 : row[i / 2] & 0x0f) - 8) * q[i];
        return sum;
      };
      auto block_scale = [&](int g) {
        const float weight_scale = half_to_float(w.scales[static_cast<std::size_t>(r) * groups + g]);
        return d[g] * weight_scale;
      };
      y[static_cast<std::size_t>(t) * w.rows + r] = exact_block_sum_row(groups, block_sum, block_scale);
    }
  }
  return y;
}

// Every prefix count of one set of tokens, on several thread counts.
template <class Matrix>
void expect_kernels_equal_model(const Matrix& w, unsigned seed, CpuKernelVariant variant = CpuKernelVariant::avx512_vnni) {
  const std::vector<float> x = activations(kMaxTokens, w.cols, seed);
  const std::vector<float> expected = model(w, x, kMaxTokens);
  const std::string shape = std::to_string(w.rows) + "x" + std::to_string(w.cols);
  for (int count : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 64, 65, 127, kMaxTokens}) {
    for (int threads : {1, 2, 3, 16}) {
      std::vector<float> y(static_cast<std::size_t>(count) * w.rows, NAN);
      gemv_batched(view_of(w), std::span<const float>(x).first(static_cast<std::size_t>(count) * w.cols), count, y,
                   {variant, threads});
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(0, std::memcmp(&y[i], &expected[i], sizeof(float)))
            << variant_name(variant) << " " << shape << " count " << count << " threads " << threads << " token " << i / w.rows << " row " << i % w.rows
            << ": " << y[i] << " vs " << expected[i];
    }
  }
}

TEST(CpuGemm, VnniQ8EqualsExactBlockSumDefinition) {
  if (!variant_supported(CpuKernelVariant::avx512_vnni)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  // 37 rows: two full 16-row vectors and a partial one; 333 columns: a
  // partial last block; 1100 columns: 18 blocks, so lanes 0 and 1 take two.
  expect_kernels_equal_model(quantize_q8_row(random_values(37 * 333, 1), 37, 333), 11);
  expect_kernels_equal_model(quantize_q8_row(random_values(50 * 1100, 2), 50, 1100), 12);
  expect_kernels_equal_model(quantize_q8_row(random_values(3 * 64, 3), 3, 64), 13);
}

TEST(CpuGemm, VnniQ4EqualsExactBlockSumDefinition) {
  if (!variant_supported(CpuKernelVariant::avx512_vnni)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  // 10 groups (5 pairs); 3 groups (a half pair); 33 groups (lanes reused, a half pair); 1 group (one
  // lane a token: the tree over the lanes in use only).
  expect_kernels_equal_model(quantize_q4_g64(random_values(37 * 640, 4), 37, 640), 14);
  expect_kernels_equal_model(quantize_q4_g64(random_values(21 * 192, 5), 21, 192), 15);
  expect_kernels_equal_model(quantize_q4_g64(random_values(40 * 2112, 6), 40, 2112), 16);
  expect_kernels_equal_model(quantize_q4_g64(random_values(24 * 64, 7), 24, 64), 17);
}

// The amx variant computes the same definition on AMX tiles (16 tokens x 16
// rows per tdpbssd, one token tile at a time): every count above covers
// whole and partial tiles; the same shapes as VNNI.
TEST(CpuGemm, AmxQ8EqualsExactBlockSumDefinition) {
  if (!variant_supported(CpuKernelVariant::amx)) GTEST_SKIP() << "this CPU (or its OS) offers no AMX-INT8 tiles";
  expect_kernels_equal_model(quantize_q8_row(random_values(37 * 333, 1), 37, 333), 11, CpuKernelVariant::amx);
  expect_kernels_equal_model(quantize_q8_row(random_values(50 * 1100, 2), 50, 1100), 12, CpuKernelVariant::amx);
  expect_kernels_equal_model(quantize_q8_row(random_values(3 * 64, 3), 3, 64), 13, CpuKernelVariant::amx);
}

TEST(CpuGemm, AmxQ4EqualsExactBlockSumDefinition) {
  if (!variant_supported(CpuKernelVariant::amx)) GTEST_SKIP() << "this CPU (or its OS) offers no AMX-INT8 tiles";
  expect_kernels_equal_model(quantize_q4_g64(random_values(37 * 640, 4), 37, 640), 14, CpuKernelVariant::amx);
  expect_kernels_equal_model(quantize_q4_g64(random_values(21 * 192, 5), 21, 192), 15, CpuKernelVariant::amx);
  expect_kernels_equal_model(quantize_q4_g64(random_values(40 * 2112, 6), 40, 2112), 16, CpuKernelVariant::amx);
  // One group: the lanes tree sums one lane, not 16 (a small model's experts).
  expect_kernels_equal_model(quantize_q4_g64(random_values(24 * 64, 7), 24, 64), 17, CpuKernelVariant::amx);
}

// Where AMX is missing the variant is refused by name, with what it needs.
TEST(CpuGemm, AmxRefusedWhereTheCpuLacksIt) {
  if (variant_supported(CpuKernelVariant::amx)) GTEST_SKIP() << "this CPU has AMX";
  const auto parsed = parse_variant("amx");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message.find("AMX-TILE and AMX-INT8"), std::string::npos) << parsed.error().message;
  EXPECT_NE(best_supported_variant(), CpuKernelVariant::amx);
}

}  // namespace
}  // namespace coli::kernels::cpu
