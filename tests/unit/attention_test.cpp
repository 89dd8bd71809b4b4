// forward::attention over a KvCache against a double-precision reference
// computed from the values the cache holds (so f16/bf16 rounding is not the
// kernel's error), over many shapes: GQA ratios, head_dim 64/128/80/33,
// contexts across tile boundaries, causal batches, thread counts and every
// instruction set this CPU runs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "coli/forward/attention.h"
#include "coli/forward/kv_cache.h"
#include "reference/gemv_reference.h"

namespace coli::forward {
namespace {

struct Shape {
  int heads, kv_heads, head_dim;
};

// Random keys and values for `positions` positions of 2 layers, kept as the
// cache rounded them (the reference reads these).
struct Filled {
  KvCache cache;
  std::vector<float> k, v;  // [layer][position][kv_heads * head_dim], as stored
};

Filled fill(const Shape& s, int positions, KvType type, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Filled f{KvCache(2, s.kv_heads, s.head_dim, positions, type), {}, {}};
  const std::size_t width = static_cast<std::size_t>(s.kv_heads) * s.head_dim;
  f.k.resize(2 * positions * width);
  f.v.resize(f.k.size());
  for (int layer = 0; layer < 2; ++layer) {
    for (int p = 0; p < positions; ++p) {
      std::vector<float> k(width), v(width);
      // Keys large enough that softmax is peaked: a wrong position or head shows.
      for (float& x : k) x = 2.0f * normal(rng);
      for (float& x : v) x = normal(rng);
      f.cache.store(layer, p, k, v);
      for (std::size_t i = 0; i < width; ++i) {
        const std::size_t at = (static_cast<std::size_t>(layer) * positions + p) * width + i;
        f.k[at] = kv_round_trip(k[i], type);
        f.v[at] = kv_round_trip(v[i], type);
      }
    }
  }
  return f;
}

// Causal GQA attention in double: token t of the batch sees positions <= first + t.
std::vector<double> reference(const Shape& s, const Filled& f, int layer, int positions, const std::vector<float>& q,
                              int count, int first) {
  const int group = s.heads / s.kv_heads, d = s.head_dim;
  const std::size_t width = static_cast<std::size_t>(s.kv_heads) * d;
  std::vector<double> out(static_cast<std::size_t>(count) * s.heads * d, 0.0);
  for (int t = 0; t < count; ++t) {
    for (int h = 0; h < s.heads; ++h) {
      const float* qh = q.data() + (static_cast<std::size_t>(t) * s.heads + h) * d;
      const std::size_t head = static_cast<std::size_t>(h / group) * d;
      std::vector<double> scores;
      for (int p = 0; p <= first + t; ++p) {
        const float* k = f.k.data() + (static_cast<std::size_t>(layer) * positions + p) * width + head;
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(qh[i]) * k[i];
        scores.push_back(dot / std::sqrt(static_cast<double>(d)));
      }
      double peak = scores[0], sum = 0;
      for (double x : scores) peak = std::max(peak, x);
      for (double& x : scores) sum += (x = std::exp(x - peak));
      double* o = out.data() + (static_cast<std::size_t>(t) * s.heads + h) * d;
      for (int p = 0; p <= first + t; ++p) {
        const float* v = f.v.data() + (static_cast<std::size_t>(layer) * positions + p) * width + head;
        for (int i = 0; i < d; ++i) o[i] += scores[static_cast<std::size_t>(p)] / sum * v[i];
      }
    }
  }
  return out;
}

std::vector<float> random_q(const Shape& s, int count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(count) * s.heads * s.head_dim);
  for (float& x : q) x = normal(rng);
  return q;
}

std::vector<AttentionIsa> isas_here() {
  std::vector<AttentionIsa> isas;
  for (AttentionIsa isa : {AttentionIsa::scalar, AttentionIsa::avx2, AttentionIsa::avx512}) {
    if (attention_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// f32 accumulation over head_dim products and up to a few thousand
// positions: relative error ~1e-6 per sum, 1e-4 absolute leaves a 10x
// margin on outputs of size ~1, while one wrong position (a value row of
// size ~1 with weight >= 1/positions) or a wrong KV head moves the output
// by far more than that in these peaked softmaxes.
constexpr double kTolerance = 1e-4;

void expect_matches(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LT(worst, kTolerance) << what;
}

TEST(Attention, DecodeMatchesDoubleReferenceOverShapesContextsThreadsAndIsas) {
  std::mt19937 rng(13);
  const std::vector<Shape> shapes = {{1, 1, 64}, {4, 4, 128}, {8, 2, 64}, {8, 1, 80}, {6, 3, 33}, {16, 4, 128}};
  const std::vector<int> contexts = {1, 2, 63, 64, 65, 200, 1000, 3000};
  for (const Shape& s : shapes) {
    for (int positions : contexts) {
      if (positions == 3000 && s.heads > 8) continue;  // the double reference is slow; 3000 is covered by smaller shapes
      const KvType type = positions % 2 == 0 ? KvType::f16 : (positions % 3 == 0 ? KvType::bf16 : KvType::f32);
      const Filled f = fill(s, positions, type, rng);
      const std::vector<float> q = random_q(s, 1, rng);
      const std::vector<double> want = reference(s, f, 1, positions, q, 1, positions - 1);
      for (AttentionIsa isa : isas_here()) {
        for (int threads : {1, 2, 3, 16}) {
          std::vector<float> out(q.size());
          attention(f.cache, 1, q, 1, positions - 1, s.heads, out, threads, isa);
          expect_matches(out, want, "heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " dim " +
                                        std::to_string(s.head_dim) + " positions " + std::to_string(positions) + " " +
                                        attention_isa_name(isa) + " threads " + std::to_string(threads));
        }
      }
    }
  }
}

TEST(Attention, CausalBatchMatchesReferenceAndTokenByTokenBitForBit) {
  std::mt19937 rng(31);
  struct Case {
    Shape shape;
    int first, count;
  };
  const std::vector<Case> cases = {{{4, 4, 64}, 0, 1},   {{4, 4, 64}, 0, 100},  {{8, 2, 128}, 37, 70},
                                   {{8, 1, 80}, 130, 45}, {{6, 3, 33}, 0, 129}, {{2, 2, 64}, 1000, 300}};
  for (const Case& c : cases) {
    const int positions = c.first + c.count;
    const Filled f = fill(c.shape, positions, KvType::f16, rng);
    const std::vector<float> q = random_q(c.shape, c.count, rng);
    const std::vector<double> want = reference(c.shape, f, 0, positions, q, c.count, c.first);
    const std::size_t stride = static_cast<std::size_t>(c.shape.heads) * c.shape.head_dim;
    for (AttentionIsa isa : isas_here()) {
      std::vector<float> one_by_one(q.size());
      for (int t = 0; t < c.count; ++t) {
        attention(f.cache, 0, std::span(q).subspan(t * stride, stride), 1, c.first + t, c.shape.heads,
                  std::span(one_by_one).subspan(t * stride, stride), 2, isa);
      }
      for (int threads : {1, 2, 3, 16}) {
        std::vector<float> batch(q.size());
        attention(f.cache, 0, q, c.count, c.first, c.shape.heads, batch, threads, isa);
        const std::string what = "first " + std::to_string(c.first) + " count " + std::to_string(c.count) + " " +
                                 attention_isa_name(isa) + " threads " + std::to_string(threads);
        expect_matches(batch, want, what);
        EXPECT_EQ(batch, one_by_one) << what;  // fixed tiles: the same bits however the work is cut
      }
    }
  }
}

TEST(Attention, TheCausalMaskHidesLaterPositions) {
  // Position 1 holds a huge value: token 0 of the batch must not see it.
  const Shape s{1, 1, 64};
  KvCache cache(1, 1, 64, 2, KvType::f32);
  std::vector<float> k(64, 0.0f), v0(64, 1.0f), v1(64, 1000.0f);
  cache.store(0, 0, k, v0);
  cache.store(0, 1, k, v1);
  std::vector<float> q(2 * 64, 0.0f), out(q.size());
  attention(cache, 0, q, 2, 0, s.heads, out, 1);
  EXPECT_EQ(out[0], 1.0f);                // token 0: position 0 only
  EXPECT_FLOAT_EQ(out[64], 500.5f);       // token 1: equal scores over both
}

TEST(Attention, RefusesShapesOutsideTheCache) {
  KvCache cache(1, 2, 64, 8, KvType::f16);
  std::vector<float> q(3 * 64), out(q.size());
  EXPECT_THROW(attention(cache, 0, q, 1, 0, 3, out, 1), std::invalid_argument);  // 3 heads over 2 KV heads
  std::vector<float> q4(4 * 64), out4(q4.size());
  EXPECT_THROW(attention(cache, 0, q4, 1, 8, 4, out4, 1), std::invalid_argument);  // position 8 of 8
  EXPECT_THROW(attention(cache, 1, q4, 1, 0, 4, out4, 1), std::invalid_argument);  // layer 1 of 1
}

TEST(KvCache, BytesAreTheSharedFormulaAndRoundTripsRoundToNearestEven) {
  for (KvType type : kAllKvTypes) {
    const KvCache cache(3, 4, 80, 100, type);
    EXPECT_EQ(cache.bytes(), kv_cache_bytes(3, 4, 80, 100, type));
    EXPECT_EQ(cache.bytes(), 2ull * 3 * 4 * 80 * 100 * (type == KvType::f32 ? 4 : 2));
  }
  EXPECT_EQ(kv_round_trip(1.0f + 1.0f / 4096, KvType::f16), 1.0f);   // below half an f16 ulp (2^-10)
  EXPECT_EQ(kv_round_trip(1.0f + 3.0f / 2048, KvType::f16), 1.0f + 2.0f / 1024);  // tie rounds to even
  EXPECT_EQ(kv_round_trip(1.0f + 3.0f / 256, KvType::bf16), 1.0f + 2.0f / 128);   // bf16 tie to even (ulp 2^-7)
  EXPECT_EQ(kv_round_trip(0.1f, KvType::f32), 0.1f);
  EXPECT_TRUE(std::isnan(kv_round_trip(std::nanf(""), KvType::bf16)));
}

// The f16 store (F16C where the CPU has it) rounds exactly as the reference
// conversion: normal, subnormal, overflowing, infinite and NaN values, and
// rows whose length is not a multiple of the 8-value groups.
TEST(KvCache, F16StoreEqualsTheReferenceConversionBitForBit) {
  std::mt19937 generator(7);
  for (int head_dim : {128, 13}) {
    KvCache cache(1, 1, head_dim, 1, KvType::f16);
    std::vector<float> k(static_cast<std::size_t>(head_dim)), v(k.size());
    for (int trial = 0; trial < 2000; ++trial) {
      for (std::size_t i = 0; i < k.size(); ++i) {
        const std::uint32_t bits = generator();
        // Mostly the exponents f16 can hold (or just not), some anywhere.
        const std::uint32_t exponent = trial % 4 == 0 ? (bits >> 23) & 0xff : 96 + (bits >> 23) % 48;
        k[i] = std::bit_cast<float>((bits & 0x807fffffu) | (exponent << 23));
        v[i] = -k[i] * 0.75f;
      }
      if (trial == 1) k[3] = std::numeric_limits<float>::infinity(), v[5] = std::nanf("");
      cache.store(0, 0, k, v);
      const auto* keys = reinterpret_cast<const std::uint16_t*>(cache.keys(0, 0));
      const auto* values = reinterpret_cast<const std::uint16_t*>(cache.values(0, 0));
      for (std::size_t i = 0; i < k.size(); ++i) {
        ASSERT_EQ(keys[i], kernels::float_to_half(k[i])) << "k " << k[i] << " head_dim " << head_dim;
        ASSERT_EQ(values[i], kernels::float_to_half(v[i])) << "v " << v[i] << " head_dim " << head_dim;
      }
    }
  }
}

TEST(KvCache, StoresEachHeadsRowsContiguously) {
  KvCache cache(2, 3, 4, 5, KvType::f32);
  std::vector<float> k(12), v(12);
  for (int i = 0; i < 12; ++i) k[i] = static_cast<float>(i), v[i] = static_cast<float>(100 + i);
  cache.store(1, 2, k, v);
  const auto* keys = reinterpret_cast<const float*>(cache.keys(1, 2));    // head 2 of layer 1
  const auto* values = reinterpret_cast<const float*>(cache.values(1, 2));
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(keys[2 * 4 + d], static_cast<float>(8 + d));  // row of position 2
    EXPECT_EQ(values[2 * 4 + d], static_cast<float>(108 + d));
  }
  EXPECT_EQ(cache.keys(1, 1) + 5 * 4 * sizeof(float), cache.keys(1, 2));
}

}  // namespace
}  // namespace coli::forward
