// CPU GEMV variants against the scalar reference (kernels/reference) and
// against the exact arithmetic of their documented activation quantisation.
//
// Two bounds, both derived in the test per output row:
//  * exact-arithmetic check: the test quantises x itself (gemv_cpu.h), sums
//    terms t_b = d_b * scale * dot_b in double, and allows recursive float
//    summation error (blocks + 32 lanes/products) * 2^-24 * sum |t_b|
//    doubled for the scale products; a lost lane or group is far larger.
//  * reference check: |x_i - d_b q_i| <= d_b / 2 (1 + 2^-20) per element, so
//    |y - y_ref| <= sum_b d_b / 2 (1 + 2^-20) sum_{i in b} |w_eff_i| plus the
//    float summation bound above plus the reference's own rounding to float.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "cpu/gemv_cpu.h"
#include "cpu/parallel_for.h"
#include "cpu/variant_kernels.h"

namespace coli::kernels::cpu {
namespace {

std::vector<float> random_values(std::size_t count, unsigned seed, float outlier_share = 0.01f) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator) * (uniform(generator) < outlier_share ? 30.0f : 1.0f);
  return values;
}

// Activations with an all-zero block (d = 0) and a block holding one huge outlier.
std::vector<float> activations(int count, int cols, unsigned seed) {
  std::vector<float> x = random_values(static_cast<std::size_t>(count) * cols, seed);
  for (int t = 0; t < count; ++t) {
    float* vector = x.data() + static_cast<std::size_t>(t) * cols;
    if (cols > 128) std::fill(vector + 64, vector + 128, 0.0f);
    vector[cols - 1] = 1000.0f;
  }
  return x;
}

struct Expected {
  std::vector<double> exact;     // documented quantised arithmetic, in double
  std::vector<double> sum_bound;  // allowed float summation error
  std::vector<double> quant_bound;  // allowed activation quantisation error
};

// The documented activation quantisation, written independently of the kernels.
void quantize_block(const float* x, int n, float& d, std::vector<int>& q) {
  float max_abs = 0;
  for (int i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  q.assign(n, 0);
  d = max_abs / 127.0f;
  if (max_abs == 0) return;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int>(std::nearbyint(x[i] * (127.0f / max_abs)));
}

// weight(r, i) is the integer weight, block_scale(r, b) the weight scale of block b.
template <class Weight, class BlockScale>
Expected expected_values(int rows, int cols, const float* x, Weight weight, BlockScale block_scale) {
  Expected expected{std::vector<double>(rows), std::vector<double>(rows), std::vector<double>(rows)};
  const int blocks = (cols + 63) / 64;
  std::vector<float> d(blocks);
  std::vector<std::vector<int>> q(blocks);
  for (int b = 0; b < blocks; ++b) quantize_block(x + 64 * b, std::min(64, cols - 64 * b), d[b], q[b]);
  for (int r = 0; r < rows; ++r) {
    double sum = 0, magnitude = 0, quantisation = 0;
    for (int b = 0; b < blocks; ++b) {
      long long dot = 0;
      double weight_magnitude = 0;
      for (int i = 0; i < static_cast<int>(q[b].size()); ++i) {
        dot += static_cast<long long>(weight(r, 64 * b + i)) * q[b][i];
        weight_magnitude += std::abs(weight(r, 64 * b + i));
      }
      const double scale = block_scale(r, b);
      const double term = static_cast<double>(d[b]) * scale * static_cast<double>(dot);
      sum += term, magnitude += std::fabs(term);
      quantisation += d[b] / 2.0 * (1 + std::ldexp(1.0, -20)) * weight_magnitude * std::fabs(scale);
    }
    expected.exact[r] = sum;
    expected.sum_bound[r] = 2 * (blocks + 32) * std::ldexp(1.0, -24) * magnitude + 1e-30;
    expected.quant_bound[r] = quantisation;
  }
  return expected;
}

Expected expected_values(const Q8RowMatrix& w, const float* x) {
  return expected_values(
      w.rows, w.cols, x, [&](int r, int c) { return static_cast<int>(w.weights[static_cast<std::size_t>(r) * w.cols + c]); },
      [&](int r, int) { return static_cast<double>(w.scales[r]); });
}

Expected expected_values(const Q4G64Matrix& w, const float* x) {
  const int groups = w.cols / 64;
  return expected_values(
      w.rows, w.cols, x,
      [&](int r, int c) {
        const std::uint8_t byte = w.nibbles[static_cast<std::size_t>(r) * w.cols / 2 + c / 2];
        return (c % 2 == 0 ? byte & 0x0f : byte >> 4) - 8;
      },
      [&](int r, int g) { return static_cast<double>(half_to_float(w.scales[static_cast<std::size_t>(r) * groups + g])); });
}

// Checks one gemv result against both bounds.
template <class Matrix>
void check_against_bounds(const Matrix& w, const float* x, const std::vector<float>& y, const std::string& label) {
  const Expected expected = expected_values(w, x);
  std::vector<float> reference(w.rows);
  gemv_reference(w, std::span<const float>(x, w.cols), reference);
  for (int r = 0; r < w.rows; ++r) {
    ASSERT_NEAR(y[r], expected.exact[r], expected.sum_bound[r]) << label << " row " << r << " (exact arithmetic)";
    const double reference_bound =
        expected.quant_bound[r] + expected.sum_bound[r] + std::ldexp(std::fabs(reference[r]), -23) + 1e-30;
    ASSERT_NEAR(y[r], reference[r], reference_bound) << label << " row " << r << " (vs reference)";
  }
}

std::string label_of(CpuKernelVariant variant, int rows, int cols) {
  return std::string(variant_name(variant)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
}

TEST(CpuGemv, Q8MatchesReferenceOnManyShapes) {
  for (CpuKernelVariant variant : supported_variants())
    for (int rows : {1, 5, 17, 40})
      for (int cols : {1, 7, 63, 64, 65, 127, 130, 1000, 2048, 4097}) {
        const Q8RowMatrix w = quantize_q8_row(random_values(static_cast<std::size_t>(rows) * cols, rows + cols), rows, cols);
        const std::vector<float> x = activations(1, cols, cols);
        std::vector<float> y(rows);
        gemv(view_of(w), x, y, {variant, 1});
        check_against_bounds(w, x.data(), y, label_of(variant, rows, cols));
      }
}

TEST(CpuGemv, Q4MatchesReferenceOnManyShapes) {
  for (CpuKernelVariant variant : supported_variants())
    for (int rows : {1, 3, 17, 33})
      for (int cols : {64, 128, 192, 320, 1024, 1984, 2048, 4160, 8192}) {
        const Q4G64Matrix w = quantize_q4_g64(random_values(static_cast<std::size_t>(rows) * cols, rows * cols), rows, cols);
        const std::vector<float> x = activations(1, cols, cols + 1);
        std::vector<float> y(rows);
        gemv(view_of(w), x, y, {variant, 1});
        check_against_bounds(w, x.data(), y, label_of(variant, rows, cols));
      }
}

// Largest magnitudes everywhere: the int16 pair sums of maddubs must not saturate.
TEST(CpuGemv, ExtremeValuesStayExact) {
  const int rows = 4, cols = 256;
  Q8RowMatrix q8{rows, cols, std::vector<std::int8_t>(rows * cols), std::vector<float>(rows, 1.0f)};
  Q4G64Matrix q4{rows, cols, std::vector<std::uint8_t>(rows * cols / 2), std::vector<std::uint16_t>(rows * cols / 64, 0x3c00)};
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      q8.weights[r * cols + c] = static_cast<std::int8_t>(r % 2 ? -127 : 127);
      q4.nibbles[(r * cols + c) / 2] = r % 2 ? 0x00 : 0xff;  // -8 or +7 everywhere
    }
  std::vector<float> x(cols, (-1.0f));
  for (int c = 0; c < cols; c += 3) x[c] = 1.0f;
  for (CpuKernelVariant variant : supported_variants()) {
    std::vector<float> y(rows);
    gemv(view_of(q8), x, y, {variant, 1});
    check_against_bounds(q8, x.data(), y, label_of(variant, rows, cols) + " q8 extremes");
    gemv(view_of(q4), x, y, {variant, 1});
    check_against_bounds(q4, x.data(), y, label_of(variant, rows, cols) + " q4 extremes");
  }
}

template <class Matrix>
void expect_batched_equals_single_calls(const Matrix& w, CpuKernelVariant variant) {
  // 4+ tokens take the avx512vnni GEMM; 8 is its token tile, 67 has a tail.
  for (int count : {1, 2, 3, 4, 5, 9, 17, 67}) {
    const std::vector<float> x = activations(count, w.cols, count);
    std::vector<float> batched(static_cast<std::size_t>(count) * w.rows), single(w.rows);
    gemv_batched(view_of(w), x, count, batched, {variant, 2});
    for (int t = 0; t < count; ++t) {
      gemv(view_of(w), std::span<const float>(x).subspan(static_cast<std::size_t>(t) * w.cols, w.cols), single, {variant, 1});
      EXPECT_EQ(0, std::memcmp(single.data(), batched.data() + static_cast<std::size_t>(t) * w.rows, single.size() * 4))
          << label_of(variant, w.rows, w.cols) << " token " << t << " of " << count;
    }
  }
}

TEST(CpuGemv, BatchedEqualsSingleCallsBitForBit) {
  const Q8RowMatrix q8 = quantize_q8_row(random_values(37 * 333, 1), 37, 333);
  const Q4G64Matrix q4 = quantize_q4_g64(random_values(37 * 640, 2), 37, 640);
  for (CpuKernelVariant variant : supported_variants()) {
    expect_batched_equals_single_calls(q8, variant);
    expect_batched_equals_single_calls(q4, variant);
  }
}

template <class Matrix>
void expect_thread_count_independent(const Matrix& w, CpuKernelVariant variant) {
  for (int count : {3, 21}) {  // the decode kernel, and the GEMM where a variant has one
    const std::vector<float> x = activations(count, w.cols, 7);
    std::vector<float> one(static_cast<std::size_t>(count) * w.rows), many(one.size());
    gemv_batched(view_of(w), x, count, one, {variant, 1});
    for (int threads : {2, 3, 16, 64}) {
      std::fill(many.begin(), many.end(), NAN);
      gemv_batched(view_of(w), x, count, many, {variant, threads});
      EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * 4))
          << label_of(variant, w.rows, w.cols) << " count " << count << " threads " << threads;
    }
  }
}

// Every token of a batched call (the GEMM path where a variant has one)
// within the bounds of a single call.
TEST(CpuGemv, BatchedMatchesReferenceOnOddShapes) {
  const Q8RowMatrix q8 = quantize_q8_row(random_values(37 * 333, 21), 37, 333);
  const Q4G64Matrix q4 = quantize_q4_g64(random_values(53 * 1088, 22), 53, 1088);
  constexpr int kCount = 19;
  for (CpuKernelVariant variant : supported_variants()) {
    const std::vector<float> x8 = activations(kCount, q8.cols, 23), x4 = activations(kCount, q4.cols, 24);
    std::vector<float> y8(static_cast<std::size_t>(kCount) * q8.rows), y4(static_cast<std::size_t>(kCount) * q4.rows);
    gemv_batched(view_of(q8), x8, kCount, y8, {variant, 3});
    gemv_batched(view_of(q4), x4, kCount, y4, {variant, 3});
    for (int t = 0; t < kCount; ++t) {
      const std::string label = label_of(variant, 0, 0) + " token " + std::to_string(t);
      check_against_bounds(q8, x8.data() + static_cast<std::size_t>(t) * q8.cols,
                           {y8.begin() + t * q8.rows, y8.begin() + (t + 1) * q8.rows}, label + " q8");
      check_against_bounds(q4, x4.data() + static_cast<std::size_t>(t) * q4.cols,
                           {y4.begin() + t * q4.rows, y4.begin() + (t + 1) * q4.rows}, label + " q4");
    }
  }
}

TEST(CpuGemv, ThreadCountDoesNotChangeResults) {
  const Q8RowMatrix q8 = quantize_q8_row(random_values(100 * 200, 3), 100, 200);
  const Q4G64Matrix q4 = quantize_q4_g64(random_values(100 * 512, 4), 100, 512);
  for (CpuKernelVariant variant : supported_variants()) {
    expect_thread_count_independent(q8, variant);
    expect_thread_count_independent(q4, variant);
  }
}

TEST(CpuGemv, QuantizedActivationsAreReusable) {
  const Q4G64Matrix a = quantize_q4_g64(random_values(20 * 256, 5), 20, 256);
  const Q4G64Matrix b = quantize_q4_g64(random_values(30 * 256, 6), 30, 256);
  const std::vector<float> x = activations(1, 256, 8);
  const CpuKernelVariant variant = best_supported_variant();
  QuantizedActivations quantized;
  quantized.quantize(variant, WeightFormat::q4_g64, x, 1, 256);
  std::vector<float> via_prepared(30), direct(30);
  gemv_quantized(view_of(a), quantized, std::span<float>(via_prepared).first(20), 1);
  gemv_quantized(view_of(b), quantized, via_prepared, 2);
  gemv(view_of(b), x, direct, {variant, 1});
  EXPECT_EQ(0, std::memcmp(direct.data(), via_prepared.data(), direct.size() * 4));
}

// Vectors filled one at a time, in any order, give fill()'s products bit
// for bit; an index past the count or a row of the wrong width is refused.
TEST(CpuGemv, FillVectorEqualsFillOfAllVectors) {
  const std::vector<float> x = activations(5, 256, 9);
  const Q4G64Matrix q4 = quantize_q4_g64(random_values(20 * 256, 11), 20, 256);
  const Q8RowMatrix q8 = quantize_q8_row(random_values(20 * 256, 12), 20, 256);
  for (const CpuKernelVariant variant : supported_variants()) {
    for (const WeightFormat format : {WeightFormat::q4_g64, WeightFormat::q8_row}) {
      QuantizedActivations whole, each;
      whole.quantize(variant, format, x, 5, 256);
      each.shape(variant, format, 5, 256);
      for (const int t : {3, 0, 4, 1, 2}) each.fill_vector(t, std::span(x).subspan(static_cast<std::size_t>(t) * 256, 256));
      std::vector<float> from_whole(5 * 20), from_each(5 * 20);
      if (format == WeightFormat::q4_g64) {
        gemv_quantized(view_of(q4), whole, from_whole, 1);
        gemv_quantized(view_of(q4), each, from_each, 1);
      } else {
        gemv_quantized(view_of(q8), whole, from_whole, 1);
        gemv_quantized(view_of(q8), each, from_each, 1);
      }
      EXPECT_EQ(0, std::memcmp(from_whole.data(), from_each.data(), from_whole.size() * 4)) << variant_name(variant);
      EXPECT_THROW(each.fill_vector(5, std::span(x).first(256)), std::invalid_argument);
      EXPECT_THROW(each.fill_vector(0, std::span(x).first(255)), std::invalid_argument);
    }
  }
}

TEST(CpuGemv, ManyJobsEqualSeparateCalls) {
  const std::vector<Q4G64Matrix> q4{quantize_q4_g64(random_values(20 * 256, 10), 20, 256),
                                    quantize_q4_g64(random_values(37 * 512, 11), 37, 512),
                                    quantize_q4_g64(random_values(64 * 256, 12), 64, 256)};
  const std::vector<Q8RowMatrix> q8{quantize_q8_row(random_values(5 * 100, 13), 5, 100),
                                    quantize_q8_row(random_values(50 * 300, 14), 50, 300)};
  for (CpuKernelVariant variant : supported_variants()) {
    QuantizedActivations x256, x512, x100, x300;
    x256.quantize(variant, WeightFormat::q4_g64, activations(2, 256, 15), 2, 256);
    x512.quantize(variant, WeightFormat::q4_g64, activations(2, 512, 16), 2, 512);
    x100.quantize(variant, WeightFormat::q8_row, activations(1, 100, 17), 1, 100);
    x300.quantize(variant, WeightFormat::q8_row, activations(1, 300, 18), 1, 300);
    for (int threads : {1, 2, 5}) {
      std::vector<std::vector<float>> separate, together;
      const QuantizedActivations* q4_inputs[] = {&x256, &x512, &x256};
      std::vector<Q4GemvJob> q4_jobs;
      for (std::size_t j = 0; j < q4.size(); ++j) {
        separate.emplace_back(2 * q4[j].rows), together.emplace_back(2 * q4[j].rows, NAN);
        gemv_quantized(view_of(q4[j]), *q4_inputs[j], separate.back(), 1);
        q4_jobs.push_back({view_of(q4[j]), q4_inputs[j], together.back()});
      }
      gemv_quantized_many(q4_jobs, threads);
      const QuantizedActivations* q8_inputs[] = {&x100, &x300};
      std::vector<Q8GemvJob> q8_jobs;
      for (std::size_t j = 0; j < q8.size(); ++j) {
        separate.emplace_back(q8[j].rows), together.emplace_back(q8[j].rows, NAN);
        gemv_quantized(view_of(q8[j]), *q8_inputs[j], separate.back(), 1);
        q8_jobs.push_back({view_of(q8[j]), q8_inputs[j], together.back()});
      }
      gemv_quantized_many(q8_jobs, threads);
      for (std::size_t j = 0; j < separate.size(); ++j)
        EXPECT_EQ(0, std::memcmp(separate[j].data(), together[j].data(), separate[j].size() * 4))
            << variant_name(variant) << " job " << j << " threads " << threads;
    }
  }
}

// Two products in a row with a step between them (gate/up, SwiGLU and its
// quantisation, down: the experts' FFN) as one team (team_steps) give the
// bits of separate regions, for 1, 2 and 5 threads and both formats; the
// second product's activations are only shaped when its work is made.
TEST(CpuGemv, TeamStepsEqualSeparateRegions) {
  const Q4G64Matrix first_q4 = quantize_q4_g64(random_values(128 * 256, 20), 128, 256);
  const Q4G64Matrix second_q4 = quantize_q4_g64(random_values(48 * 128, 21), 48, 128);
  const Q8RowMatrix first_q8 = quantize_q8_row(random_values(128 * 256, 22), 128, 256);
  const Q8RowMatrix second_q8 = quantize_q8_row(random_values(48 * 128, 23), 48, 128);
  const std::vector<float> x = activations(2, 256, 24);
  auto between = [](std::span<float> y) { for (float& v : y) v = v / (1.0f + std::exp(-v)); };
  auto check = [&](const auto& first, const auto& second, WeightFormat format, CpuKernelVariant variant) {
    using Job = std::conditional_t<std::is_same_v<std::decay_t<decltype(first)>, Q4G64Matrix>, Q4GemvJob, Q8GemvJob>;
    QuantizedActivations in, hidden;
    in.quantize(variant, format, x, 2, 256);
    std::vector<float> y1(2 * 128), expected(2 * 48);
    gemv_quantized(view_of(first), in, y1, 1);
    between(y1);
    hidden.quantize(variant, format, y1, 2, 128);
    gemv_quantized(view_of(second), hidden, expected, 1);
    for (int threads : {1, 2, 5}) {
      std::vector<float> team_y1(2 * 128, NAN), team_y2(2 * 48, NAN);
      QuantizedActivations team_hidden;
      team_hidden.shape(variant, format, 2, 128);
      GemvTeamWork first_work(std::vector<Job>{{view_of(first), &in, team_y1}});
      GemvTeamWork second_work(std::vector<Job>{{view_of(second), &team_hidden, team_y2}});
      const std::function<void()> steps[] = {
          [&] { first_work.share(); },
          [&] {
            for_each_in_team(1, [&](std::size_t) {
              between(team_y1);
              team_hidden.fill(team_y1);
            });
          },
          [&] { second_work.share(); }};
      team_steps(threads, steps);
      EXPECT_EQ(0, std::memcmp(expected.data(), team_y2.data(), expected.size() * 4))
          << variant_name(variant) << " " << name_of(format) << " threads " << threads;
    }
  };
  for (CpuKernelVariant variant : supported_variants()) {
    check(first_q4, second_q4, WeightFormat::q4_g64, variant);
    check(first_q8, second_q8, WeightFormat::q8_row, variant);
  }
}

// Work is checked when it is made, before any team starts: activations
// shaped for another width are refused there.
TEST(CpuGemv, TeamWorkRefusesMismatchedActivationsWhenMade) {
  const Q4G64Matrix w = quantize_q4_g64(random_values(32 * 256, 25), 32, 256);
  QuantizedActivations x;
  x.shape(best_supported_variant(), WeightFormat::q4_g64, 1, 128);
  std::vector<float> y(32);
  EXPECT_THROW(GemvTeamWork(std::vector<Q4GemvJob>{{view_of(w), &x, y}}), std::invalid_argument);
}

TEST(CpuGemv, FastHalfConversionMatchesReference) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    const float fast = detail::half_to_float_fast(half), reference = half_to_float(half);
    if (std::isnan(reference)) EXPECT_TRUE(std::isnan(fast)) << bits;
    else ASSERT_EQ(std::bit_cast<std::uint32_t>(fast), std::bit_cast<std::uint32_t>(reference)) << bits;
  }
}

TEST(CpuGemvVariants, NamesParseAndOverrideSelects) {
  const auto supported = supported_variants();
  ASSERT_EQ(supported.front(), CpuKernelVariant::scalar);
  for (CpuKernelVariant variant : {CpuKernelVariant::scalar, CpuKernelVariant::avx2, CpuKernelVariant::avx512,
                                   CpuKernelVariant::avx512_vnni, CpuKernelVariant::amx}) {
    const std::string name(variant_name(variant));
    const auto forced = variant_from_override(name.c_str());
    if (variant_supported(variant)) {
      ASSERT_TRUE(forced.ok()) << forced.error().message;
      EXPECT_EQ(*forced, variant);
    } else {  // forcing what the CPU lacks is an error that names the variable
      ASSERT_FALSE(forced.ok());
      EXPECT_NE(forced.error().message.find("COLI_CPU_KERNEL"), std::string::npos);
      std::vector<float> y(1);
      const Q8RowMatrix w = quantize_q8_row(std::vector<float>{1.0f}, 1, 1);
      EXPECT_THROW(gemv(view_of(w), std::vector<float>{1.0f}, y, {variant, 1}), std::invalid_argument);
    }
  }
  EXPECT_EQ(*variant_from_override(nullptr), best_supported_variant());
  EXPECT_EQ(*variant_from_override(""), best_supported_variant());
  const auto unknown = variant_from_override("avx1024");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("scalar, avx2, avx512, avx512vnni, amx"), std::string::npos) << unknown.error().message;
  ASSERT_TRUE(selected_variant().ok()) << selected_variant().error().message;
}

TEST(CpuGemv, RejectsMismatchedArguments) {
  const Q8RowMatrix w = quantize_q8_row(random_values(4 * 8, 9), 4, 8);
  std::vector<float> x(8), y(4), short_y(3);
  EXPECT_THROW(gemv(view_of(w), std::span<const float>(x).first(7), y, {}), std::invalid_argument);
  EXPECT_THROW(gemv(view_of(w), x, short_y, {}), std::invalid_argument);
  Q4G64Matrix odd{1, 96, std::vector<std::uint8_t>(48), std::vector<std::uint16_t>(1)};
  EXPECT_THROW(view_of(odd), std::invalid_argument);
}

}  // namespace
}  // namespace coli::kernels::cpu
