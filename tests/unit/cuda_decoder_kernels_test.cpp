// The CUDA decoder's kernels (kernels/cuda/decoder_kernels.h) one by one
// against host references, so that a failing engine test on the device
// names the kernel: the dense matvec in every container format (bias,
// accumulate), SwiGLU, RMSNorm, the router's top-k against forward::route,
// q/k preparation (clip, per-head norm, RoPE against forward::Rope, the KV
// append) with attention over the cache, and the experts' kernels with a
// host row (a hybrid layer). Skips without a device unless COLI_REQUIRE_CUDA=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "coli/forward/ops.h"
#include "cuda/cuda_kernels.h"
#include "cuda_matrix_fixtures.h"
#include "cuda_test_support.h"
#include "cuda/decoder_kernels.h"
#include "reference/gemv_reference.h"

namespace coli::kernels::cuda {
namespace {

namespace dk = decoder;

TEST(CudaDecoderKernels, MatvecMatchesTheReferenceInEveryFormat) {
  REQUIRE_CUDA();
  std::mt19937 rng(7);
  const int rows = 37, cols = 192;
  for (WeightFormat format : kAllWeightFormats) {
    SCOPED_TRACE(std::string(name_of(format)));
    const FormatMatrix m = make_matrix(format, rows, cols, rng);
    const std::vector<float> x = random_floats(rng, cols), bias = random_floats(rng, rows), y0 = random_floats(rng, rows);
    DeviceBuffer w = device_copy(m.weights), s = device_copy(m.scales), dx = device_copy(x), db = device_copy(bias);
    DeviceBuffer y = device_copy(y0);
    const dk::Matrix matrix{format, rows, cols, w.data(), m.scales.empty() ? nullptr : s.data()};
    ASSERT_EQ(dk::matvec(nullptr, matrix, static_cast<float*>(dx.data()), static_cast<float*>(y.data()),
                         static_cast<float*>(db.data()), true), 0);
    const std::vector<float> out = host_copy<float>(y, rows);
    for (int r = 0; r < rows; ++r) {
      double expected = 0, sum_abs = 0;
      for (int c = 0; c < cols; ++c) {
        expected += m.values[static_cast<std::size_t>(r) * cols + c] * x[c];
        sum_abs += std::fabs(m.values[static_cast<std::size_t>(r) * cols + c] * x[c]);
      }
      expected += bias[r] + y0[r];
      EXPECT_NEAR(out[r], expected, float_sum_tolerance(cols, sum_abs + std::fabs(bias[r]) + std::fabs(y0[r]))) << "row " << r;
    }
  }
}

TEST(CudaDecoderKernels, SwigluIsSiluOfGateTimesUp) {
  REQUIRE_CUDA();
  std::mt19937 rng(8);
  const int rows = 20, cols = 64;
  const FormatMatrix gate = make_matrix(WeightFormat::f32, rows, cols, rng), up = make_matrix(WeightFormat::f32, rows, cols, rng);
  const std::vector<float> x = random_floats(rng, cols);
  DeviceBuffer g = device_copy(gate.weights), u = device_copy(up.weights), dx = device_copy(x);
  DeviceBuffer out = device_copy(std::vector<float>(rows));
  ASSERT_EQ(dk::swiglu(nullptr, {WeightFormat::f32, rows, cols, g.data(), nullptr}, {WeightFormat::f32, rows, cols, u.data(), nullptr},
                       static_cast<float*>(dx.data()), static_cast<float*>(out.data())),
            0);
  const std::vector<float> got = host_copy<float>(out, rows);
  for (int r = 0; r < rows; ++r) {
    double a = 0, b = 0;
    for (int c = 0; c < cols; ++c) {
      a += gate.values[static_cast<std::size_t>(r) * cols + c] * x[c];
      b += up.values[static_cast<std::size_t>(r) * cols + c] * x[c];
    }
    EXPECT_NEAR(got[r], a / (1 + std::exp(-a)) * b, 1e-4 * (1 + std::fabs(a * b))) << "row " << r;
  }
}

TEST(CudaDecoderKernels, RmsNormMatchesTheCpu) {
  REQUIRE_CUDA();
  std::mt19937 rng(9);
  const int n = 1000;
  const std::vector<float> x = random_floats(rng, n), weight = random_floats(rng, n);
  std::vector<float> expected(n);
  forward::rms_norm(x, weight, 1e-6f, expected);
  DeviceBuffer dx = device_copy(x), dw = device_copy(weight), out = device_copy(std::vector<float>(n));
  ASSERT_EQ(dk::rms_norm(nullptr, static_cast<float*>(dx.data()), static_cast<float*>(dw.data()),
                         static_cast<float*>(out.data()), n, 1e-6f),
            0);
  const std::vector<float> got = host_copy<float>(out, n);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * (1 + std::fabs(expected[i]))) << i;
}

// Ids, weights (renormalised or not), slots through the table and counts,
// against the CPU engine's route(); logits with ties included.
TEST(CudaDecoderKernels, RouteTopkMatchesForwardRoute) {
  REQUIRE_CUDA();
  std::mt19937 rng(10);
  const int experts = 60, top_k = 8;
  std::vector<int> slot_of(experts);
  for (int e = 0; e < experts; ++e) slot_of[e] = (e * 7) % experts;  // a permutation
  for (bool renormalize : {false, true}) {
    std::vector<float> logits = random_floats(rng, experts);
    logits[5] = logits[40] = logits[17] = 3.0f;  // a three-way tie among the chosen
    const forward::Routing expected =
        forward::route(logits, top_k, renormalize ? forward::RouterNorm::softmax_topk_renorm : forward::RouterNorm::softmax_topk);
    DeviceBuffer dl = device_copy(logits), slots = device_copy(slot_of);
    DeviceBuffer choices = device_copy(std::vector<ExpertChoice>(top_k)), ids = device_copy(std::vector<int>(top_k));
    DeviceBuffer counts = device_copy(std::vector<unsigned>(experts, 0));
    const dk::Route route{static_cast<float*>(dl.data()), static_cast<int*>(slots.data()),
                          static_cast<ExpertChoice*>(choices.data()), static_cast<int*>(ids.data()),
                          static_cast<unsigned*>(counts.data()), experts, top_k, renormalize};
    ASSERT_EQ(dk::route_topk(nullptr, route), 0);
    const auto got = host_copy<ExpertChoice>(choices, top_k);
    const auto got_ids = host_copy<int>(ids, top_k);
    const auto got_counts = host_copy<unsigned>(counts, experts);
    for (int i = 0; i < top_k; ++i) {
      EXPECT_EQ(got_ids[i], expected.experts[i]) << "choice " << i;
      EXPECT_EQ(got[i].slot, slot_of[expected.experts[i]]) << "choice " << i;
      EXPECT_NEAR(got[i].weight, expected.weights[i], 1e-6) << "choice " << i;
      EXPECT_EQ(got_counts[expected.experts[i]], 1u);
    }
    EXPECT_EQ(std::count(got_counts.begin(), got_counts.end(), 0u), experts - top_k);
  }
}

// Six tokens through qk_prep (clip, per-head norm, RoPE, KV append), then
// attention of the last one over all six: against the CPU's norm, Rope and
// a softmax in double. Grouped-query: 4 heads over 2 KV heads.
TEST(CudaDecoderKernels, QkPrepAndAttentionMatchTheCpu) {
  REQUIRE_CUDA();
  std::mt19937 rng(11);
  const int heads = 4, kv_heads = 2, head_dim = 16, context = 8, tokens = 6;
  const int q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const float clip = 1.5f, eps = 1e-6f;
  const double theta = 10000;
  const std::vector<float> q_norm = random_floats(rng, head_dim), k_norm = random_floats(rng, head_dim);
  const forward::Rope rope(head_dim, theta);
  DeviceBuffer dq = device_copy(std::vector<float>(q_width)), dk_ = device_copy(std::vector<float>(kv_width));
  DeviceBuffer dv = device_copy(std::vector<float>(kv_width)), position = device_copy(std::vector<int>{0});
  DeviceBuffer k_cache = device_copy(std::vector<float>(context * kv_width)), v_cache = device_copy(std::vector<float>(context * kv_width));
  DeviceBuffer dqn = device_copy(q_norm), dkn = device_copy(k_norm), table = device_copy(rope.cos_sin_table(context));
  DeviceBuffer out = device_copy(std::vector<float>(q_width));
  DeviceBuffer scores = device_copy(std::vector<float>(dk::attention_scratch_floats(heads, head_dim, context)));
  std::vector<float> q, keys, values;  // the CPU's, after prep
  for (int p = 0; p < tokens; ++p) {
    q = random_floats(rng, q_width);
    std::vector<float> k = random_floats(rng, kv_width), v = random_floats(rng, kv_width);
    ASSERT_TRUE(dq.upload(q.data(), q.size() * 4).ok());
    ASSERT_TRUE(dk_.upload(k.data(), k.size() * 4).ok());
    ASSERT_TRUE(dv.upload(v.data(), v.size() * 4).ok());
    ASSERT_TRUE(position.upload(&p, sizeof p).ok());
    dk::QkPrep prep;
    prep.q = static_cast<float*>(dq.data());
    prep.k = static_cast<float*>(dk_.data());
    prep.v = static_cast<float*>(dv.data());
    prep.k_cache = static_cast<float*>(k_cache.data());
    prep.v_cache = static_cast<float*>(v_cache.data());
    prep.q_norm = static_cast<float*>(dqn.data());
    prep.k_norm = static_cast<float*>(dkn.data());
    prep.rope = static_cast<float*>(table.data());
    prep.position = static_cast<int*>(position.data());
    prep.heads = heads, prep.kv_heads = kv_heads, prep.head_dim = head_dim, prep.norm_mode = 1;
    prep.clip = clip, prep.eps = eps;
    ASSERT_EQ(dk::qk_prep(nullptr, prep), 0);
    ASSERT_TRUE(synchronize().ok());
    for (auto* t : {&q, &k, &v}) {
      for (float& f : *t) f = std::clamp(f, -clip, clip);
    }
    forward::rms_norm_groups(q, heads, q_norm, eps);
    forward::rms_norm_groups(k, kv_heads, k_norm, eps);
    rope.apply(q, heads, p);
    rope.apply(k, kv_heads, p);
    const std::vector<float> got_q = host_copy<float>(dq, q_width);
    for (int i = 0; i < q_width; ++i) ASSERT_NEAR(got_q[i], q[i], 1e-4 * (1 + std::fabs(q[i]))) << "token " << p << " q " << i;
    keys.insert(keys.end(), k.begin(), k.end());
    values.insert(values.end(), v.begin(), v.end());
  }
  const std::vector<float> got_keys = host_copy<float>(k_cache, tokens * kv_width);
  for (std::size_t i = 0; i < got_keys.size(); ++i) EXPECT_NEAR(got_keys[i], keys[i], 1e-4 * (1 + std::fabs(keys[i]))) << i;
  ASSERT_EQ(dk::attention(nullptr, attention_of(dq, k_cache, v_cache, out, scores, position, heads, kv_heads, head_dim, context)),
            0);
  const std::vector<float> got = host_copy<float>(out, q_width);
  const std::vector<double> expected = attention_in_double(q, keys, values, heads, kv_heads, head_dim, tokens);
  for (int i = 0; i < q_width; ++i) EXPECT_NEAR(got[i], expected[i], 1e-4) << "head " << i / head_dim << " dim " << i % head_dim;
}

// Attention of one token over `tokens` cached positions of a `context`-long
// cache (random K, V and q), against a softmax in double: many chunks of
// kAttentionChunk positions, the last one partial, merged per head.
void check_long_attention(int heads, int kv_heads, int head_dim, int context, int tokens) {
  std::mt19937 rng(static_cast<unsigned>(head_dim * 131 + tokens));
  const int q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const std::vector<float> q = random_floats(rng, q_width);
  std::vector<float> keys = random_floats(rng, static_cast<std::size_t>(context) * kv_width);
  const std::vector<float> values = random_floats(rng, static_cast<std::size_t>(context) * kv_width);
  for (float& k : keys) k *= 2.0f;  // peaked softmaxes, so a wrong merge shows
  DeviceBuffer dq = device_copy(q), k_cache = device_copy(keys), v_cache = device_copy(values);
  DeviceBuffer out = device_copy(std::vector<float>(q_width));
  DeviceBuffer scores = device_copy(std::vector<float>(dk::attention_scratch_floats(heads, head_dim, context)));
  DeviceBuffer position = device_copy(std::vector<int>{tokens - 1});
  DeviceBuffer arrivals = device_copy(std::vector<unsigned>(heads, 0));
  const std::vector<double> expected = attention_in_double(q, keys, values, heads, kv_heads, head_dim, tokens);
  // A second launch merges; then each head's last chunk block, twice (its
  // counters zeroed again for the next launch).
  for (const char* merge : {"merge launch", "last block", "last block again"}) {
    SCOPED_TRACE(merge);
    dk::Attention a = attention_of(dq, k_cache, v_cache, out, scores, position, heads, kv_heads, head_dim, context);
    if (std::string(merge) != "merge launch") a.arrivals = static_cast<unsigned*>(arrivals.data());
    ASSERT_EQ(dk::attention(nullptr, a), 0);
    const std::vector<float> got = host_copy<float>(out, q_width);
    for (int i = 0; i < q_width; ++i) {
      ASSERT_NEAR(got[i], expected[i], 1e-4) << "head " << i / head_dim << " dim " << i % head_dim << " of " << tokens << " positions";
    }
  }
  for (unsigned count : host_copy<unsigned>(arrivals, heads)) EXPECT_EQ(count, 0u);
}

TEST(CudaDecoderKernels, AttentionMergesChunksOverALongContext) {
  REQUIRE_CUDA();
  check_long_attention(4, 2, 128, 300, 300);  // every chunk of the cache, the last one partial
  check_long_attention(4, 2, 128, 300, 97);   // chunks past the position skipped
  check_long_attention(2, 1, 80, 200, 1);     // one position; head_dim not a multiple of 32
  check_long_attention(2, 2, 512, 70, 65);    // the widest head
}

// f32 experts, k = 3 with the second choice the host's (slot -1, its row
// given): x += sum_e w_e y_e + sigmoid(g) * shared, in routing order; the
// same when the host's rows come later (host_later: the down projection
// leaves them out, add_host_rows adds them).
TEST(CudaDecoderKernels, ExpertsAddDeviceAndHostRowsToTheResidual) {
  REQUIRE_CUDA();
  std::mt19937 rng(12);
  const int hidden = 64, width = 32, slots = 2, k = 3;
  const std::size_t part = static_cast<std::size_t>(hidden) * width * 4;
  ExpertRecordLayout layout;
  layout.format = WeightFormat::f32;
  layout.hidden = hidden;
  layout.width = width;
  layout.record_stride = 3 * part;
  layout.gate_weights = layout.gate_scales = 0;
  layout.up_weights = layout.up_scales = part;
  layout.down_weights = layout.down_scales = 2 * part;
  std::vector<float> slab = random_floats(rng, slots * 3 * part / 4);
  for (float& f : slab) f *= 0.1f;  // activations of order 1, so 1e-4 is far above float rounding
  const std::vector<float> x = random_floats(rng, hidden), residual = random_floats(rng, hidden);
  const std::vector<float> host_rows = random_floats(rng, static_cast<std::size_t>(k) * hidden);
  const std::vector<float> shared = random_floats(rng, hidden), gate = {0.3f};
  const std::vector<ExpertChoice> choices = {{1, 0.5f}, {-1, 0.3f}, {0, 0.2f}};
  DeviceBuffer dslab = device_copy(slab), dx = device_copy(x), dres = device_copy(residual), drows = device_copy(host_rows);
  DeviceBuffer dshared = device_copy(shared), dgate = device_copy(gate), dchoices = device_copy(choices);
  DeviceBuffer act = device_copy(std::vector<float>(static_cast<std::size_t>(k) * width));
  DeviceBuffer dres_later = device_copy(residual);
  for (bool later : {false, true}) {
    const dk::Experts e{layout, static_cast<std::uint8_t*>(dslab.data()), slots, static_cast<ExpertChoice*>(dchoices.data()),
                        k, static_cast<float*>(drows.data()), later};
    auto* out = static_cast<float*>((later ? dres_later : dres).data());
    ASSERT_EQ(dk::expert_gate_up(nullptr, e, static_cast<float*>(dx.data()), static_cast<float*>(act.data())), 0);
    ASSERT_EQ(dk::expert_down_add(nullptr, e, static_cast<float*>(act.data()), static_cast<float*>(dshared.data()),
                                  static_cast<float*>(dgate.data()), out),
              0);
    if (later) {
      ASSERT_EQ(dk::add_host_rows(nullptr, e, out), 0);
    }
  }
  const std::vector<float> got = host_copy<float>(dres, hidden), got_later = host_copy<float>(dres_later, hidden);
  auto w = [&](int slot, int matrix, int r, int c, int cols) {
    return static_cast<double>(slab[(static_cast<std::size_t>(slot) * 3 * part + matrix * part) / 4 + static_cast<std::size_t>(r) * cols + c]);
  };
  std::vector<double> expected(residual.begin(), residual.end());
  for (int i = 0; i < k; ++i) {
    std::vector<double> y(hidden);
    if (choices[i].slot < 0) {
      for (int r = 0; r < hidden; ++r) y[r] = host_rows[static_cast<std::size_t>(i) * hidden + r];
    } else {
      std::vector<double> h(width);
      for (int j = 0; j < width; ++j) {
        double g = 0, u = 0;
        for (int c = 0; c < hidden; ++c) {
          g += w(choices[i].slot, 0, j, c, hidden) * x[c];
          u += w(choices[i].slot, 1, j, c, hidden) * x[c];
        }
        h[j] = g / (1 + std::exp(-g)) * u;
      }
      for (int r = 0; r < hidden; ++r) {
        for (int j = 0; j < width; ++j) y[r] += w(choices[i].slot, 2, r, j, width) * h[j];
      }
    }
    for (int r = 0; r < hidden; ++r) expected[r] += choices[i].weight * y[r];
  }
  for (int r = 0; r < hidden; ++r) expected[r] += 1 / (1 + std::exp(-0.3)) * shared[r];
  for (int r = 0; r < hidden; ++r) {
    EXPECT_NEAR(got[r], expected[r], 1e-4) << "row " << r;
    EXPECT_NEAR(got_later[r], expected[r], 1e-4) << "row " << r << ", the host's rows added later";
  }
}

}  // namespace
}  // namespace coli::kernels::cuda
