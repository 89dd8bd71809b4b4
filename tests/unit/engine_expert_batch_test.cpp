// The tuning phase's expert batch is the engine's CPU backend on records in
// the tuning pool: each token's sum must be what the scalar reference
// computes from the same int8 records (the SIMD kernels quantise the
// activations to int8, hence the tolerance).
#include "measure/engine_expert_batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "coli/container/container.h"
#include "cpu/gemv_cpu.h"
#include "reference/gemv_reference.h"

namespace coli::probe {
namespace {

constexpr int kHidden = 128, kWidth = 64;

struct Pool {
  std::vector<std::byte> bytes;
  std::size_t stride = 0;
  container::ExpertRecordLayout layout = container::expert_record_layout(WeightFormat::q8_row, kHidden, kWidth);
};

// `experts` records of random q8_row matrices, one per 4 KiB-aligned stride.
Pool make_pool(int experts) {
  Pool pool;
  pool.stride = (pool.layout.record_bytes + container::kAlignment - 1) / container::kAlignment * container::kAlignment;
  pool.bytes.assign(pool.stride * static_cast<std::size_t>(experts) + container::kAlignment, std::byte{0});
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  for (int e = 0; e < experts; ++e) {
    for (const container::ExpertPart& part : pool.layout.parts) {
      std::vector<float> matrix(static_cast<std::size_t>(part.rows) * part.cols);
      for (float& v : matrix) v = normal(random);
      const auto q = kernels::quantize_q8_row(matrix, static_cast<int>(part.rows), static_cast<int>(part.cols));
      std::byte* record = pool.bytes.data() + static_cast<std::size_t>(e) * pool.stride;
      std::memcpy(record + part.weights_offset, q.weights.data(), q.weights.size());
      std::memcpy(record + part.scales_offset, q.scales.data(), q.scales.size() * sizeof(float));
    }
  }
  pool.bytes.resize(pool.stride * static_cast<std::size_t>(experts));
  return pool;
}

// One expert's FFN on x by the scalar reference (f32 activations).
std::vector<float> reference_ffn(const Pool& pool, int expert, std::span<const float> x) {
  const std::byte* record = pool.bytes.data() + static_cast<std::size_t>(expert) * pool.stride;
  auto project = [&](const container::ExpertPart& part, std::span<const float> in) {
    std::vector<float> out(part.rows);
    kernels::gemv_reference_q8(reinterpret_cast<const std::int8_t*>(record + part.weights_offset),
                               reinterpret_cast<const float*>(record + part.scales_offset), static_cast<int>(part.rows),
                               static_cast<int>(part.cols), in, out);
    return out;
  };
  std::vector<float> gate = project(pool.layout.parts[0], x), up = project(pool.layout.parts[1], x);
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  return project(pool.layout.parts[2], gate);
}

TEST(EngineExpertBatch, EachTokenSumsItsExpertsAsTheScalarReference) {
  Pool pool = make_pool(3);
  auto variant = kernels::cpu::selected_variant();
  ASSERT_TRUE(variant) << variant.error().message;
  auto batch = EngineExpertBatch::create(WeightFormat::q8_row, kHidden, kWidth, std::string(kernels::cpu::variant_name(*variant)),
                                         2, pool.bytes);
  ASSERT_TRUE(batch) << batch.error().message;
  EXPECT_EQ(batch->slots(), 3u);
  EXPECT_EQ(batch->record_bytes(), pool.layout.record_bytes);
  std::vector<float> xs(2 * kHidden);
  std::mt19937 random(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : xs) v = uniform(random);
  // Expert-major: expert 0 has token 0; expert 1 has tokens 0 and 1; expert 2 has token 1.
  const std::vector<std::pair<int, int>> tasks = {{0, 0}, {0, 1}, {1, 1}, {1, 2}};
  batch->run(tasks, 3, xs, 2);
  ASSERT_TRUE(batch->finite());
  const auto sums = batch->sums();
  ASSERT_EQ(sums.size(), xs.size());
  for (int token = 0; token < 2; ++token) {
    const auto x = std::span<const float>(xs).subspan(static_cast<std::size_t>(token) * kHidden, kHidden);
    const std::vector<float> a = reference_ffn(pool, token, x), b = reference_ffn(pool, token + 1, x);
    double error = 0, norm = 0;
    for (int i = 0; i < kHidden; ++i) {
      const double expected = 0.5 * (a[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>(i)]);
      error += std::pow(sums[static_cast<std::size_t>(token * kHidden + i)] - expected, 2);
      norm += expected * expected;
    }
    EXPECT_LT(std::sqrt(error / norm), 0.03) << "token " << token;
  }
}

TEST(EngineExpertBatch, CallsCycleThroughThePoolsSlots) {
  Pool pool = make_pool(3);
  auto batch = EngineExpertBatch::create(WeightFormat::q8_row, kHidden, kWidth, "scalar", 1, pool.bytes);
  ASSERT_TRUE(batch) << batch.error().message;
  std::vector<float> x(kHidden, 0.25f);
  const std::vector<std::pair<int, int>> one = {{0, 0}};
  std::vector<std::vector<float>> outputs;
  for (int call = 0; call < 4; ++call) {
    batch->run(one, 1, x, 1);
    outputs.emplace_back(batch->sums().begin(), batch->sums().end());
  }
  EXPECT_NE(outputs[0], outputs[1]);  // the next call reads the next record
  EXPECT_NE(outputs[1], outputs[2]);
  EXPECT_EQ(outputs[0], outputs[3]);  // three slots: the fourth call is the first's record again
}

// The warm stream points: the kept experts read the same records every
// call, the others cycle through the slots after them.
TEST(EngineExpertBatch, KeptExpertsReadTheirSlotsEveryCallAndTheOthersCycleBehindThem) {
  Pool pool = make_pool(4);
  auto batch = EngineExpertBatch::create(WeightFormat::q8_row, kHidden, kWidth, "scalar", 1, pool.bytes);
  ASSERT_TRUE(batch) << batch.error().message;
  batch->keep_first(1);
  std::vector<float> x(2 * kHidden, 0.25f);
  const std::vector<std::pair<int, int>> tasks = {{0, 0}, {1, 1}};  // token 0 on kept expert 0, token 1 on expert 1
  std::vector<std::vector<float>> kept, cycled;
  for (int call = 0; call < 4; ++call) {
    batch->run(tasks, 2, x, 2);
    kept.emplace_back(batch->sums().begin(), batch->sums().begin() + kHidden);
    cycled.emplace_back(batch->sums().begin() + kHidden, batch->sums().end());
  }
  for (int call = 1; call < 4; ++call) EXPECT_EQ(kept[static_cast<std::size_t>(call)], kept[0]) << call;
  EXPECT_NE(cycled[0], cycled[1]);  // slots 1, 2, 3, then 1 again
  EXPECT_NE(cycled[1], cycled[2]);
  EXPECT_EQ(cycled[0], cycled[3]);
  EXPECT_NE(cycled[0], kept[0]);
}

TEST(EngineExpertBatch, RefusesAPoolWithoutOneRecordAndAnUnknownKernel) {
  std::vector<std::byte> small(1024);
  auto tiny = EngineExpertBatch::create(WeightFormat::q8_row, kHidden, kWidth, "scalar", 1, small);
  ASSERT_FALSE(tiny);
  EXPECT_NE(tiny.error().message.find("holds no"), std::string::npos) << tiny.error().message;
  Pool pool = make_pool(1);
  auto unknown = EngineExpertBatch::create(WeightFormat::q8_row, kHidden, kWidth, "sse9", 1, pool.bytes);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("sse9"), std::string::npos) << unknown.error().message;
}

}  // namespace
}  // namespace coli::probe
