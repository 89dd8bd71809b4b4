// The CUDA decoder's prefill kernels (kernels/cuda/decoder_batch.h) against
// host references: the batched matrix kernels in every container format
// (f32 exact on the CUDA cores; the others on the tensor cores with f16
// activations), the experts grouped by slot through group_by_slot, the
// grouped gate/up and down and combine_experts (a choice without a slot
// turns its token NaN), and causal attention of a batch of queries. Tiles
// are 64 tokens x 64 rows: the shapes leave partial tiles on every side.
// Skips without a device unless COLI_REQUIRE_CUDA=1.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda/decoder_batch.h"
#include "cuda_matrix_fixtures.h"
#include "cuda_test_support.h"

namespace coli::kernels::cuda {
namespace {

namespace dk = decoder;

// The f16 copy of `count` floats on the device (the tensor-core formats' activations).
DeviceBuffer half_copy(const DeviceBuffer& x, std::size_t count) {
  DeviceBuffer out = device_copy(std::vector<std::uint16_t>(count));
  EXPECT_EQ(dk::to_half_rows(nullptr, static_cast<const float*>(x.data()), static_cast<std::uint16_t*>(out.data()), count), 0);
  return out;
}

// How far the kernel may be from the exact product of a row: f32 weights
// are summed in f32 (a chain of `cols` roundings); the tensor-core formats
// round x and the de-quantised weight to f16 (2^-11 each) before f32 sums.
double gemm_tolerance(WeightFormat format, int cols, double sum_abs) {
  if (format == WeightFormat::f32) return (cols + 8.0) * std::ldexp(1.0, -24) * sum_abs + 1e-30;
  return std::ldexp(1.0, -9) * sum_abs + 1e-30;
}

// y = y0 + x W^T + bias over 70 tokens (two tiles, the second partial) and
// 100 rows (two tiles), with cols a multiple of 64 (q4_g64's groups) and,
// for the formats that allow it, cols that leave a partial k tile.
TEST(CudaPrefillKernels, GemmMatchesTheReferenceInEveryFormat) {
  REQUIRE_CUDA();
  std::mt19937 rng(21);
  const int tokens = 70, rows = 100;
  for (WeightFormat format : kAllWeightFormats) {
    for (int cols : {192, 100}) {
      if (format == WeightFormat::q4_g64 && cols % 64 != 0) continue;
      SCOPED_TRACE(std::string(name_of(format)) + " cols " + std::to_string(cols));
      const FormatMatrix m = make_matrix(format, rows, cols, rng);
      const std::vector<float> x = random_floats(rng, static_cast<std::size_t>(tokens) * cols);
      const std::vector<float> bias = random_floats(rng, rows), y0 = random_floats(rng, static_cast<std::size_t>(tokens) * rows);
      DeviceBuffer w = device_copy(m.weights), s = device_copy(m.scales), dx = device_copy(x), db = device_copy(bias);
      DeviceBuffer y = device_copy(y0);
      const dk::Matrix matrix{format, rows, cols, w.data(), m.scales.empty() ? nullptr : s.data()};
      DeviceBuffer dx_half = half_copy(dx, x.size());
      dk::GemmRows r;
      r.x = static_cast<const float*>(dx.data());
      r.x_half = static_cast<const std::uint16_t*>(dx_half.data());
      r.y = static_cast<float*>(y.data());
      r.tokens = tokens;
      ASSERT_EQ(dk::gemm(nullptr, matrix, r, static_cast<const float*>(db.data()), true), 0);
      const std::vector<float> out = host_copy<float>(y, static_cast<std::size_t>(tokens) * rows);
      for (int t = 0; t < tokens; ++t) {
        for (int row = 0; row < rows; ++row) {
          double expected = y0[t * rows + row] + bias[row], sum_abs = 0;
          for (int c = 0; c < cols; ++c) {
            const double term = m.values[static_cast<std::size_t>(row) * cols + c] * x[static_cast<std::size_t>(t) * cols + c];
            expected += term;
            sum_abs += std::fabs(term);
          }
          ASSERT_NEAR(out[t * rows + row], expected, gemm_tolerance(format, cols, sum_abs) + 1e-6 * std::fabs(expected))
              << "token " << t << " row " << row;
        }
      }
    }
  }
}

// One MoE layer's experts for a batch: slab records of `format` (gate, up,
// down), 90 tokens x top-2 choices over 3 slots (one slot gets more than a
// tile of tokens), grouped on the device, then x += sum_j w_j down_j(silu(gate_j h) * up_j h).
void check_grouped_experts(WeightFormat format) {
  SCOPED_TRACE(std::string(name_of(format)));
  std::mt19937 rng(22);
  const int hidden = 128, width = 64, slots = 3, tokens = 90, k = 2;
  std::vector<FormatMatrix> parts;  // [slot][gate, up, down]
  ExpertRecordLayout layout;
  layout.format = format;
  layout.hidden = hidden;
  layout.width = width;
  std::vector<std::uint8_t> record_bytes;
  std::vector<std::uint8_t> slab;
  for (int e = 0; e < slots; ++e) {
    std::vector<std::uint8_t> record;
    for (int i = 0; i < 3; ++i) {
      parts.push_back(make_matrix(format, i < 2 ? width : hidden, i < 2 ? hidden : width, rng));
      const FormatMatrix& m = parts.back();
      const std::size_t weights = record.size();
      record.insert(record.end(), m.weights.begin(), m.weights.end());
      record.resize((record.size() + 63) / 64 * 64);
      const std::size_t scales = record.size();
      record.insert(record.end(), m.scales.begin(), m.scales.end());
      record.resize((record.size() + 63) / 64 * 64);
      std::size_t* offsets[3][2] = {{&layout.gate_weights, &layout.gate_scales},
                                    {&layout.up_weights, &layout.up_scales},
                                    {&layout.down_weights, &layout.down_scales}};
      *offsets[i][0] = weights;
      *offsets[i][1] = scales;
    }
    layout.record_stride = record.size();
    slab.insert(slab.end(), record.begin(), record.end());
  }
  const std::vector<float> h = random_floats(rng, static_cast<std::size_t>(tokens) * hidden);
  const std::vector<float> residual = random_floats(rng, static_cast<std::size_t>(tokens) * hidden);
  std::vector<ExpertChoice> choices;
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (int t = 0; t < tokens; ++t) {
    const int first = t % 5 == 0 ? 0 : 1;  // slot 1 takes most tokens: more than one 64-row tile
    choices.push_back({first, weight(rng)});
    choices.push_back({first == 0 ? 2 : (t % 2 == 0 ? 0 : 2), weight(rng)});
  }
  DeviceBuffer dslab = device_copy(slab), dh = device_copy(h), dx = device_copy(residual), dchoices = device_copy(choices);
  DeviceBuffer offsets = device_copy(std::vector<int>(slots + 1)), order = device_copy(std::vector<int>(tokens * k));
  DeviceBuffer act = device_copy(std::vector<float>(static_cast<std::size_t>(tokens) * k * width));
  DeviceBuffer rows = device_copy(std::vector<float>(static_cast<std::size_t>(tokens) * k * hidden));
  const auto* base = static_cast<const std::uint8_t*>(dslab.data());
  const dk::Matrix gate{format, width, hidden, base + layout.gate_weights, base + layout.gate_scales};
  const dk::Matrix up{format, width, hidden, base + layout.up_weights, base + layout.up_scales};
  const dk::Matrix down{format, hidden, width, base + layout.down_weights, base + layout.down_scales};
  DeviceBuffer dh_half = half_copy(dh, h.size());
  const bool exact = format == WeightFormat::f32;
  dk::GemmRows grouped;
  grouped.x = static_cast<const float*>(dh.data());
  grouped.x_half = static_cast<const std::uint16_t*>(dh_half.data());
  grouped.y = static_cast<float*>(act.data());
  grouped.tokens = tokens;
  grouped.order = static_cast<const int*>(order.data());
  grouped.offsets = static_cast<const int*>(offsets.data());
  grouped.slots = slots;
  grouped.x_divisor = k;
  grouped.slot_stride = layout.record_stride;
  dk::GemmRows grouped_down = grouped;
  grouped_down.x = static_cast<const float*>(act.data());
  grouped_down.x_half = nullptr;
  grouped_down.y = static_cast<float*>(rows.data());
  grouped_down.x_divisor = 1;
  if (!exact) {  // the SwiGLU rows as f16 for the tensor-core down projection, as the engine runs them
    grouped.y_half = static_cast<std::uint16_t*>(act.data());
    grouped.y = nullptr;
    grouped_down.x_half = grouped.y_half;
    grouped_down.x = nullptr;
  }
  const auto* dc = static_cast<const ExpertChoice*>(dchoices.data());
  ASSERT_EQ(dk::group_by_slot(nullptr, dc, tokens * k, slots, static_cast<int*>(offsets.data()), static_cast<int*>(order.data())), 0);
  ASSERT_EQ(dk::gemm_swiglu(nullptr, gate, up, grouped), 0);
  ASSERT_EQ(dk::gemm(nullptr, down, grouped_down, nullptr, false), 0);
  const dk::ExpertCombine combine{dc, static_cast<const float*>(rows.data()), nullptr, nullptr, static_cast<float*>(dx.data()),
                                  tokens, k, hidden, slots};
  ASSERT_EQ(dk::combine_experts(nullptr, combine), 0);
  const std::vector<int> got_offsets = host_copy<int>(offsets, slots + 1);
  EXPECT_EQ(got_offsets.back(), tokens * k);
  EXPECT_GT(got_offsets[2] - got_offsets[1], dk::kGemmTileTokens) << "slot 1 spans two tiles";
  const std::vector<float> got = host_copy<float>(dx, static_cast<std::size_t>(tokens) * hidden);
  for (int t = 0; t < tokens; ++t) {
    std::vector<double> expected(residual.begin() + t * hidden, residual.begin() + (t + 1) * hidden), magnitude(hidden);
    for (int j = 0; j < k; ++j) {
      const ExpertChoice c = choices[static_cast<std::size_t>(t) * k + j];
      const FormatMatrix* m = &parts[static_cast<std::size_t>(c.slot) * 3];
      std::vector<double> a(width);
      for (int i = 0; i < width; ++i) {
        double g = 0, u = 0;
        for (int col = 0; col < hidden; ++col) {
          g += m[0].values[static_cast<std::size_t>(i) * hidden + col] * h[static_cast<std::size_t>(t) * hidden + col];
          u += m[1].values[static_cast<std::size_t>(i) * hidden + col] * h[static_cast<std::size_t>(t) * hidden + col];
        }
        a[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int r = 0; r < hidden; ++r) {
        double y = 0, y_abs = 0;
        for (int i = 0; i < width; ++i) {
          y += m[2].values[static_cast<std::size_t>(r) * width + i] * a[i];
          y_abs += std::fabs(m[2].values[static_cast<std::size_t>(r) * width + i] * a[i]);
        }
        expected[r] += c.weight * y;
        magnitude[r] += c.weight * y_abs;
      }
    }
    for (int r = 0; r < hidden; ++r) {
      // f16 activations, twice (h, then the SwiGLU output): a few 2^-11 of the terms' size.
      const double tolerance = exact ? 1e-4 * (1 + magnitude[r]) : 8 * std::ldexp(1.0, -11) * magnitude[r] + 1e-4;
      ASSERT_NEAR(got[static_cast<std::size_t>(t) * hidden + r], expected[r], tolerance) << "token " << t << " row " << r;
    }
  }
}

// f16 activations: rounded to nearest, saturated at +-65504 (never inf from
// a finite value), NaN kept; a tensor-core format without them is refused.
TEST(CudaPrefillKernels, HalfActivationsSaturateAndKeepNaN) {
  REQUIRE_CUDA();
  const std::vector<float> x = {1.0f, -2.5f, 1.0f + 1.0f / 4096, 1e6f, -1e6f, std::nanf(""), 65504.0f, 4e-8f};
  DeviceBuffer dx = device_copy(x);
  const std::vector<std::uint16_t> got = host_copy<std::uint16_t>(half_copy(dx, x.size()), x.size());
  const std::vector<std::uint16_t> expected = {0x3c00, 0xc100, 0x3c00, 0x7bff, 0xfbff, 0, 0x7bff, 0x0001};
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE((got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x03ff) != 0) << "NaN stays NaN";
    } else {
      EXPECT_EQ(got[i], expected[i]) << "value " << x[i];
    }
  }
  std::mt19937 rng(24);
  const FormatMatrix m = make_matrix(WeightFormat::q4_g64, 64, 64, rng);
  DeviceBuffer w = device_copy(m.weights), s = device_copy(m.scales), y = device_copy(std::vector<float>(64 * 64));
  dk::GemmRows r;
  r.x = static_cast<const float*>(dx.data());
  r.y = static_cast<float*>(y.data());
  r.tokens = 1;
  EXPECT_NE(dk::gemm(nullptr, {WeightFormat::q4_g64, 64, 64, w.data(), s.data()}, r, nullptr, false), 0)
      << "f32 rows only: the tensor-core kernel has no f16 activations to read";
}

TEST(CudaPrefillKernels, GroupedExpertsMatchThePerTokenReference) {
  REQUIRE_CUDA();
  for (WeightFormat format : {WeightFormat::f32, WeightFormat::q8_row, WeightFormat::q4_g64}) check_grouped_experts(format);
}

// A choice whose slot is outside the slab (no VRAM slot) makes its token's
// row NaN, never a read outside the slab; the other tokens stay finite.
TEST(CudaPrefillKernels, AChoiceWithoutASlotShowsAsNaN) {
  REQUIRE_CUDA();
  const int tokens = 2, k = 1, hidden = 4, slots = 1;
  const std::vector<ExpertChoice> choices = {{0, 1.0f}, {5, 1.0f}};
  DeviceBuffer dc = device_copy(choices), rows = device_copy(std::vector<float>(tokens * k * hidden, 1.0f));
  DeviceBuffer x = device_copy(std::vector<float>(tokens * hidden, 0.0f));
  DeviceBuffer offsets = device_copy(std::vector<int>(slots + 1)), order = device_copy(std::vector<int>(tokens * k));
  const auto* c = static_cast<const ExpertChoice*>(dc.data());
  ASSERT_EQ(dk::group_by_slot(nullptr, c, tokens * k, slots, static_cast<int*>(offsets.data()), static_cast<int*>(order.data())), 0);
  const dk::ExpertCombine combine{c, static_cast<const float*>(rows.data()), nullptr, nullptr, static_cast<float*>(x.data()),
                                  tokens, k, hidden, slots};
  ASSERT_EQ(dk::combine_experts(nullptr, combine), 0);
  EXPECT_EQ(host_copy<int>(offsets, slots + 1), (std::vector<int>{0, 1})) << "the slot-less choice is left out";
  const std::vector<float> got = host_copy<float>(x, tokens * hidden);
  for (int r = 0; r < hidden; ++r) {
    EXPECT_EQ(got[r], 1.0f);
    EXPECT_TRUE(std::isnan(got[hidden + r]));
  }
}

// `tokens` queries at positions start.. over a cache whose rows 0..start +
// tokens - 1 are set: query t sees rows 0..start + t only (causal),
// grouped-query heads.
// f16_tensor: within 2^-7 of the largest |V| (Q, K, V and the weights
// rounded to f16; the scores here reach ~10, so their f16 rounding moves a
// weight by up to ~2^-8 of itself).
void check_attention_rows(int head_dim, int start, int tokens, dk::AttentionMath math = dk::AttentionMath::f32) {
  SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", " + std::to_string(tokens) + " queries from " +
               std::to_string(start) + (math == dk::AttentionMath::f32 ? ", f32" : ", f16 tensor cores"));
  std::mt19937 rng(static_cast<unsigned>(23 + head_dim));
  const int heads = 4, kv_heads = 2, context = start + tokens + 5;
  const int q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  const std::vector<float> q = random_floats(rng, static_cast<std::size_t>(tokens) * q_width);
  std::vector<float> keys = random_floats(rng, static_cast<std::size_t>(context) * kv_width);
  const std::vector<float> values = random_floats(rng, static_cast<std::size_t>(context) * kv_width);
  for (float& key : keys) key *= 2.0f;  // peaked softmaxes
  DeviceBuffer dq = device_copy(q), k_cache = device_copy(keys), v_cache = device_copy(values);
  DeviceBuffer out = device_copy(std::vector<float>(static_cast<std::size_t>(tokens) * q_width));
  DeviceBuffer unused = device_copy(std::vector<float>(1)), position = device_copy(std::vector<int>{start});
  ASSERT_EQ(dk::attention_rows(nullptr, attention_of(dq, k_cache, v_cache, out, unused, position, heads, kv_heads, head_dim, context),
                               tokens, math),
            0);
  double v_max = 0;
  for (float v : values) v_max = std::max(v_max, std::fabs(static_cast<double>(v)));
  const double tolerance = math == dk::AttentionMath::f32 ? 1e-4 : std::ldexp(v_max, -7);
  const std::vector<float> got = host_copy<float>(out, static_cast<std::size_t>(tokens) * q_width);
  for (int t = 0; t < tokens; ++t) {
    const std::vector<float> query(q.begin() + t * q_width, q.begin() + (t + 1) * q_width);
    const std::vector<double> expected = attention_in_double(query, keys, values, heads, kv_heads, head_dim, start + t + 1);
    for (int i = 0; i < q_width; ++i) {
      ASSERT_NEAR(got[static_cast<std::size_t>(t) * q_width + i], expected[i], tolerance) << "token " << t << " head " << i / head_dim;
    }
  }
}

// Heads of up to 128 dims take the tiled kernel (16 queries per block, 32
// positions per tile): partial query and position tiles; wider heads the
// per-query one.
TEST(CudaPrefillKernels, AttentionRowsAreCausalOverTheCache) {
  REQUIRE_CUDA();
  check_attention_rows(96, 30, 40);
  check_attention_rows(128, 0, 70);
  check_attention_rows(64, 100, 1);
  check_attention_rows(160, 30, 20);
}

// The tensor-core kernel: heads padded to 64 (40, 64 dims) or 128 (96, 128;
// 66 not a multiple of 4) dims, 64 queries and 64 positions per tile:
// partial query blocks, a batch that starts mid-tile, and one query.
TEST(CudaPrefillKernels, TensorCoreAttentionRowsAreCausalWithinF16Rounding) {
  REQUIRE_CUDA();
  const auto f16 = dk::AttentionMath::f16_tensor;
  check_attention_rows(128, 0, 130, f16);
  check_attention_rows(96, 30, 40, f16);
  check_attention_rows(64, 100, 1, f16);
  check_attention_rows(40, 70, 65, f16);
  check_attention_rows(66, 5, 20, f16);
  check_attention_rows(160, 30, 20, f16);  // wider than the tiles: the f32 kernel
}

}  // namespace
}  // namespace coli::kernels::cuda
