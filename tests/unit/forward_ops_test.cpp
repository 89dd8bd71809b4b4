// The decoder operations against hand-computed values and naive formulas.
#include <gtest/gtest.h>

#include <limits>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "coli/forward/ops.h"

namespace coli::forward {
namespace {

std::uint16_t to_bf16(float value) {  // truncation is exact for the values used here
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<std::uint16_t>(bits >> 16);
}

TEST(ForwardOps, RmsNormMatchesTheFormula) {
  const std::vector<float> x = {1, 2, 3, 4}, weight = {1, 1, 2, 0.5f};
  std::vector<float> out(4);
  rms_norm(x, weight, 1e-6f, out);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  EXPECT_NEAR(out[0], 1 / rms, 1e-6);
  EXPECT_NEAR(out[2], 3 / rms * 2, 1e-6);
  EXPECT_NEAR(out[3], 4 / rms * 0.5, 1e-6);
}

TEST(ForwardOps, GroupNormNormalisesEachSlice) {
  std::vector<float> x = {1, 1, 10, 10};
  const std::vector<float> weight = {1, 1};
  rms_norm_groups(x, 2, weight, 0);
  for (float v : x) EXPECT_NEAR(v, 1.0f, 1e-6);
}

TEST(ForwardOps, RopeRotatesHalvesByPositionTimesFrequency) {
  const Rope rope(4, 10000.0);
  std::vector<float> x = {1, 0, 0, 1};  // pairs (0,2) and (1,3)
  rope.apply(x, 1, 0);
  EXPECT_FLOAT_EQ(x[0], 1);  // position 0 is the identity
  rope.apply(x, 1, 3);
  // pair 0 has frequency 1: angle 3; pair 1 has 1/100: angle 0.03
  EXPECT_NEAR(x[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[1], -std::sin(0.03), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.03), 1e-6);
}

// Each call keeps its position's cos/sin for the next call at that position;
// a second Rope (other theta, maybe at a reused address) must not see them.
TEST(ForwardOps, RopeCachedAnglesBelongToTheirRopeAndPosition) {
  auto rotated = [](const Rope& rope, int position) {
    std::vector<float> x = {1, 0.5f, 0.25f, 1};
    rope.apply(x, 1, position);
    return x;
  };
  for (int round = 0; round < 2; ++round) {
    const Rope slow(4, 10000.0), fast(4, 10.0);
    const std::vector<float> slow_at_7 = rotated(slow, 7);
    EXPECT_NE(rotated(fast, 7), slow_at_7);            // same position, other Rope
    EXPECT_EQ(rotated(slow, 7), slow_at_7);            // recomputed after the other Rope
    EXPECT_EQ(rotated(slow, 7), rotated(slow, 7));     // served from the kept angles
    EXPECT_NE(rotated(slow, 8), slow_at_7);            // other position
    EXPECT_NEAR(slow_at_7[0], std::cos(7.0) * 1 - std::sin(7.0) * 0.25f, 1e-6);
  }
}

// silu's exp is a polynomial, not libm's: within a few ulp of the double
// formula over the range activations take, exact at the saturated ends
// (0 for very negative inputs, x for large ones), and NaN stays NaN.
TEST(ForwardOps, SiluIsWithinAFewUlpOfTheFormula) {
  double worst_ulps = 0;
  for (float x = -90.0f; x <= 90.0f; x += 0.00731f) {
    const double exact = x / (1.0 + std::exp(-static_cast<double>(x)));
    const float got = silu(x);
    if (std::fabs(exact) < 1e-30) continue;  // saturated: checked below
    const double ulp = std::nextafter(static_cast<float>(std::fabs(exact)), std::numeric_limits<float>::infinity()) -
                       static_cast<float>(std::fabs(exact));
    worst_ulps = std::max(worst_ulps, std::fabs(got - exact) / ulp);
  }
  EXPECT_LT(worst_ulps, 4.0);
  EXPECT_EQ(silu(200.0f), 200.0f);
  EXPECT_EQ(silu(0.0f), 0.0f);
  EXPECT_LE(std::fabs(silu(-200.0f)), 1e-30f);
  EXPECT_TRUE(std::isnan(silu(std::numeric_limits<float>::quiet_NaN())));
}

// The vectorised loop computes what silu() does, element by element, bit for
// bit (the per-expert and the batched CPU paths must agree exactly).
TEST(ForwardOps, SwigluEqualsSiluTimesUpBitForBit) {
  std::mt19937 random(5);
  std::normal_distribution<float> value(0.0f, 4.0f);
  std::vector<float> gate(1037), up(1037);
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = value(random), up[i] = value(random);
  std::vector<float> out = gate;
  swiglu(out, up);
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const float want = silu(gate[i]) * up[i];
    EXPECT_EQ(std::memcmp(&out[i], &want, sizeof want), 0) << "element " << i;
  }
  EXPECT_THROW(swiglu(std::span(out).first(3), std::span<const float>(up).first(2)), std::invalid_argument);
}

// The attention's softmax weights: e^(x - shift) within 2 ulp of std::exp
// down to where it underflows, and below that ~0, never garbage.
TEST(ForwardOps, ExpShiftedIsWithinTwoUlpOfStdExp) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 0.0f; v += 0.00917f) x.push_back(v + 3.0f);
  std::vector<float> e = x;
  exp_shifted(e, 3.0f);
  double worst_ulps = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(static_cast<double>(x[i] - 3.0f));
    const double ulp = std::nextafter(static_cast<float>(exact), std::numeric_limits<float>::infinity()) - static_cast<float>(exact);
    worst_ulps = std::max(worst_ulps, std::fabs(e[i] - exact) / ulp);
  }
  EXPECT_LT(worst_ulps, 2.0);
  std::vector<float> far = {-1000.0f, -200.0f, 0.0f};
  exp_shifted(far, 0.0f);
  EXPECT_GE(far[0], 0.0f);
  EXPECT_LT(far[0], 1e-37f);
  EXPECT_LT(far[1], 1e-37f);
  EXPECT_EQ(far[2], 1.0f);
}

TEST(ForwardOps, GreedyTokenIsTheFirstLargestFiniteLogit) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(greedy_token(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}), 1);    // the first of equal ones
  EXPECT_EQ(greedy_token(std::vector<float>{nan, -3.0f, inf, -2.0f, nan}), 3);  // NaN and infinities never win
  EXPECT_EQ(greedy_token(std::vector<float>{-inf, -1e30f}), 1);
  EXPECT_EQ(greedy_token(std::vector<float>{nan, inf, -inf}), -1);             // nothing finite
  EXPECT_EQ(greedy_token(std::vector<float>{}), -1);
}

TEST(ForwardOps, RoutingPerNormalisation) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  const Routing plain = route(logits, 2, RouterNorm::softmax_topk);
  EXPECT_EQ(plain.experts, (std::vector<int>{1, 3}));  // tie: lower id first
  const double denominator = 1 + 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(plain.weights[0], std::exp(2.0) / denominator, 1e-6);
  const Routing renorm = route(logits, 2, RouterNorm::softmax_topk_renorm);
  EXPECT_NEAR(renorm.weights[0], 0.5, 1e-6);
  EXPECT_NEAR(renorm.weights[1], 0.5, 1e-6);
}

TEST(ForwardOps, AttentionOverOnePositionReturnsItsValue) {
  const std::vector<float> q = {1, 2, 3, 4}, k = {5, 6}, v = {7, 8};
  std::vector<float> out(4);
  attention_by_position(q, k, v, 1, 2, 1, 2, out);  // 2 query heads share 1 KV head
  EXPECT_EQ(out, (std::vector<float>{7, 8, 7, 8}));
}

TEST(ForwardOps, AttentionWeighsPositionsBySoftmaxOfScaledScores) {
  const std::vector<float> q = {1, 0}, k = {1, 0, 0, 1}, v = {1, 0, 0, 1};
  std::vector<float> out(2);
  attention_by_position(q, k, v, 2, 1, 1, 2, out);
  const double a = std::exp(1 / std::sqrt(2.0)), b = 1.0;
  EXPECT_NEAR(out[0], a / (a + b), 1e-6);
  EXPECT_NEAR(out[1], b / (a + b), 1e-6);
}

TEST(ForwardOps, DenseGemvInEveryDtypeWithBias) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int rows = 37, cols = 70;
  std::vector<float> w(rows * cols), x(cols), bias(rows);
  for (float& v : w) v = bf16_to_float(to_bf16(dist(rng)));  // bf16-representable, so both dtypes hold the same values
  for (float& v : x) v = dist(rng);
  for (float& v : bias) v = dist(rng);
  std::vector<std::uint16_t> w_bf16(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) w_bf16[i] = to_bf16(w[i]);
  std::vector<float> y32(rows), y16(rows);
  gemv_dense({WeightFormat::f32, rows, cols, w.data()}, x, y32, 2, bias);
  gemv_dense({WeightFormat::bf16, rows, cols, w_bf16.data()}, x, y16, 1, bias);
  for (int r = 0; r < rows; ++r) {
    double expected = bias[r];
    for (int c = 0; c < cols; ++c) expected += static_cast<double>(w[r * cols + c]) * x[c];
    EXPECT_NEAR(y32[r], expected, 1e-5);
    EXPECT_NEAR(y16[r], y32[r], 1e-5);  // same values; bf16 rows accumulate in float
  }
  std::vector<float> row(cols);
  dense_row({WeightFormat::bf16, rows, cols, w_bf16.data()}, 5, row);
  EXPECT_EQ(row[3], w[5 * cols + 3]);
}

// Prefill's many-token products read each weight row once per tile of
// tokens; every token's result must be gemv_dense's bit for bit, in every
// float dtype, with tiles cut short and rows whose width leaves a tail.
TEST(ForwardOps, DenseManyEqualsOneTokenGemvBitForBit) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int cols = 70, count = 19, rows_a = 37, rows_b = 5;
  std::vector<float> x(count * cols), bias(rows_a), w32(rows_a * cols);
  for (auto* values : {&x, &bias, &w32}) for (float& v : *values) v = dist(rng);
  for (auto dtype : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::f16}) {
    SCOPED_TRACE(std::string(name_of(dtype)));
    // bf16: the f32 values truncated; f16: random finite bit patterns below 1
    // in magnitude (exponent field at most 14).
    std::vector<std::uint16_t> a16(w32.size()), b16(rows_b * cols);
    for (std::size_t i = 0; i < a16.size(); ++i) {
      a16[i] = dtype == WeightFormat::bf16 ? to_bf16(w32[i]) : static_cast<std::uint16_t>(rng() & 0xbbffu);
    }
    for (std::size_t i = 0; i < b16.size(); ++i) b16[i] = a16[(i * 7) % a16.size()];
    const WeightFormat b_dtype = dtype == WeightFormat::f32 ? WeightFormat::f16 : dtype;
    const DenseMatrix a{dtype, rows_a, cols, dtype == WeightFormat::f32 ? static_cast<const void*>(w32.data()) : a16.data()};
    const DenseMatrix b{b_dtype, rows_b, cols, b16.data()};
    std::vector<float> ya(count * rows_a), yb(count * rows_b);
    const DenseProduct products[] = {{a, ya, bias}, {b, yb, {}}};
    for (int threads : {2, 3, 16}) {  // the team's shares (dense_work_shares) change nothing
      std::fill(ya.begin(), ya.end(), 0.0f);
      std::fill(yb.begin(), yb.end(), 0.0f);
      gemv_dense_many(products, x, count, threads);
      for (int t = 0; t < count; ++t) {
        std::vector<float> one_a(rows_a), one_b(rows_b);
        const auto x_t = std::span<const float>(x).subspan(t * cols, cols);
        gemv_dense(a, x_t, one_a, 1, bias);
        gemv_dense(b, x_t, one_b, 1);
        EXPECT_EQ(std::memcmp(one_a.data(), ya.data() + t * rows_a, rows_a * sizeof(float)), 0)
            << threads << " threads, token " << t;
        EXPECT_EQ(std::memcmp(one_b.data(), yb.data() + t * rows_b, rows_b * sizeof(float)), 0)
            << threads << " threads, token " << t;
      }
    }
  }
}

// The team's shares: every (row, token) of every product exactly once; row
// cuts on whole 64-byte lines of their output rows (16 floats), so no two
// threads write one line; each share at most a line of rows (over every
// token) above the even share, so an uneven last chunk never doubles a
// member's work; narrow products split their tokens (at tiles of 8) so that
// the whole team still works.
TEST(ForwardOps, DenseWorkSharesCoverEachOutputOnceInWholeLines) {
  struct Shape {
    std::vector<int> rows;
    int count, threads;
    int working;  // members with work, where the shape allows
  };
  const Shape shapes[] = {{{64}, 128, 16, 16},             // an o projection of a 64-wide model
                          {{8}, 128, 16, 16},              // its router
                          {{64, 64, 64}, 128, 16, 12},     // its q, k and v
                          {{4096, 512, 512}, 128, 16, 16},  // Qwen3-30B-A3B's q, k and v
                          {{2048, 2048, 2048}, 128, 8, 8},  // OLMoE's
                          {{37, 5}, 19, 2, 2},
                          {{100}, 1, 3, 3},
                          {{8}, 1, 16, 1}};
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(std::to_string(shape.rows[0]) + " rows first, " + std::to_string(shape.threads) + " threads");
    std::vector<DenseProduct> products;
    long long total = 0;
    for (int rows : shape.rows) products.push_back({{WeightFormat::f32, rows, 4, nullptr}, {}, {}}), total += rows;
    const DenseWorkShares shares = dense_work_shares(products, shape.count, shape.threads);
    ASSERT_EQ(shares.members(), static_cast<std::size_t>(shape.threads));
    const long long even = total * shape.count / shape.threads;
    int working = 0;
    std::vector<std::vector<int>> seen;
    for (int rows : shape.rows) seen.emplace_back(static_cast<std::size_t>(rows * shape.count), 0);
    for (std::size_t m = 0; m < shares.members(); ++m) {
      const std::span<const DenseWorkItem> share = shares.share(m);
      long long work = 0;
      for (const DenseWorkItem& item : share) {
        EXPECT_EQ(item.first_row % 16, 0);
        EXPECT_TRUE(item.last_row % 16 == 0 || item.last_row == shape.rows[item.product]);
        EXPECT_EQ(item.first_token % 8, 0);
        work += static_cast<long long>(item.last_row - item.first_row) * (item.last_token - item.first_token);
        for (int r = item.first_row; r < item.last_row; ++r)
          for (int t = item.first_token; t < item.last_token; ++t)
            ++seen[item.product][static_cast<std::size_t>(t * shape.rows[item.product] + r)];
      }
      EXPECT_LE(work, even + 16LL * shape.count);
      working += share.empty() ? 0 : 1;
    }
    EXPECT_EQ(working, shape.working);
    for (const auto& product : seen)
      EXPECT_TRUE(std::all_of(product.begin(), product.end(), [](int n) { return n == 1; }));
  }
}

}  // namespace
}  // namespace coli::forward
