// The CUDA decoder's int8-activation kernels (decoder_kernels.h's
// Q8Activations) against host references: the producers' int8 copies
// (RMSNorm, the experts' gate/up) bit for bit against a host quantisation
// of their own float output, and the dp4a consumers (matvec, q/k/v,
// SwiGLU, the experts) against the de-quantised weights times the
// de-quantised activations in double. Skips without a device unless
// COLI_REQUIRE_CUDA=1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "coli/forward/ops.h"
#include "cuda/cuda_kernels.h"
#include "cuda/decoder_kernels.h"
#include "cuda_matrix_fixtures.h"
#include "cuda_test_support.h"

namespace coli::kernels::cuda {
namespace {

namespace dk = decoder;

// x quantised as the kernels do it: per block of 32, scale = peak / 127,
// values rounded to nearest (ties to even), the values' sum.
struct HostQ8 {
  std::vector<std::int8_t> values;
  std::vector<dk::Q8Block> blocks;
  double at(std::size_t i) const { return values[i] * static_cast<double>(blocks[i / dk::kQ8Block].scale); }
};

HostQ8 quantise(const std::vector<float>& x) {
  HostQ8 q;
  q.values.resize(x.size());
  for (std::size_t b = 0; b * dk::kQ8Block < x.size(); ++b) {
    float peak = 0;
    for (int i = 0; i < dk::kQ8Block; ++i) peak = std::max(peak, std::fabs(x[b * dk::kQ8Block + i]));
    int sum = 0;
    for (int i = 0; i < dk::kQ8Block; ++i) {
      const std::size_t at = b * dk::kQ8Block + i;
      q.values[at] = peak > 0 ? static_cast<std::int8_t>(std::nearbyint(x[at] * (127.0f / peak))) : 0;
      sum += q.values[at];
    }
    q.blocks.push_back({peak / 127.0f, sum});
  }
  return q;
}

// One device buffer: the values, then the blocks (as StepBuffers lays them out).
struct DeviceQ8 {
  DeviceBuffer buffer;
  std::size_t n = 0;
  dk::Q8Activations view() const {
    auto* base = static_cast<std::int8_t*>(buffer.data());
    return {base, reinterpret_cast<dk::Q8Block*>(base + n)};
  }
};

DeviceQ8 device_q8(std::size_t n, const HostQ8* from = nullptr) {
  std::vector<std::uint8_t> bytes(dk::q8_activation_bytes(n));
  if (from != nullptr) {
    std::memcpy(bytes.data(), from->values.data(), n);
    std::memcpy(bytes.data() + n, from->blocks.data(), from->blocks.size() * sizeof(dk::Q8Block));
  }
  return DeviceQ8{device_copy(bytes), n};
}

HostQ8 host_q8(const DeviceQ8& q) {
  const std::vector<std::uint8_t> bytes = host_copy<std::uint8_t>(q.buffer, dk::q8_activation_bytes(q.n));
  HostQ8 out;
  out.values.resize(q.n);
  out.blocks.resize(q.n / dk::kQ8Block);
  std::memcpy(out.values.data(), bytes.data(), q.n);
  std::memcpy(out.blocks.data(), bytes.data() + q.n, out.blocks.size() * sizeof(dk::Q8Block));
  return out;
}

void expect_same_q8(const HostQ8& got, const HostQ8& expected) {
  ASSERT_EQ(got.values.size(), expected.values.size());
  for (std::size_t i = 0; i < got.values.size(); ++i) EXPECT_EQ(got.values[i], expected.values[i]) << "value " << i;
  for (std::size_t b = 0; b < got.blocks.size(); ++b) {
    EXPECT_EQ(got.blocks[b].scale, expected.blocks[b].scale) << "block " << b;
    EXPECT_EQ(got.blocks[b].sum, expected.blocks[b].sum) << "block " << b;
  }
}

// Row r of m times the de-quantised activations, in double; sum_abs for the tolerance.
double row_times(const FormatMatrix& m, int cols, int r, const HostQ8& x, double& sum_abs) {
  double sum = 0;
  sum_abs = 0;
  for (int c = 0; c < cols; ++c) {
    const double term = m.values[static_cast<std::size_t>(r) * cols + c] * x.at(c);
    sum += term;
    sum_abs += std::fabs(term);
  }
  return sum;
}

constexpr WeightFormat kInt8Formats[] = {WeightFormat::q8_row, WeightFormat::q4_g64};

// One block of the input all zeros (scale 0), the rest random.
TEST(CudaInt8Kernels, RmsNormWritesTheInt8CopyOfItsOutput) {
  REQUIRE_CUDA();
  std::mt19937 rng(21);
  const int n = 256;
  std::vector<float> x = random_floats(rng, n);
  const std::vector<float> weight = random_floats(rng, n);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
  std::vector<float> expected(n);
  forward::rms_norm(x, weight, 1e-6f, expected);
  DeviceBuffer dx = device_copy(x), dw = device_copy(weight), out = device_copy(std::vector<float>(n));
  DeviceQ8 q = device_q8(n);
  ASSERT_EQ(dk::rms_norm_q8(nullptr, static_cast<float*>(dx.data()), static_cast<float*>(dw.data()),
                            static_cast<float*>(out.data()), q.view(), n, 1e-6f),
            0);
  const std::vector<float> got = host_copy<float>(out, n);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * (1 + std::fabs(expected[i]))) << i;
  const HostQ8 copy = host_q8(q);
  expect_same_q8(copy, quantise(got));
  EXPECT_EQ(copy.blocks[2].scale, 0.0f);
  // A width that is not whole blocks is refused, not run.
  EXPECT_NE(dk::rms_norm_q8(nullptr, static_cast<float*>(dx.data()), static_cast<float*>(dw.data()),
                            static_cast<float*>(out.data()), q.view(), n - 8, 1e-6f),
            0);
}

// matvec (bias, accumulate), q/k/v in one grid and SwiGLU, both formats.
TEST(CudaInt8Kernels, MatvecsMatchTheDequantisedProduct) {
  REQUIRE_CUDA();
  std::mt19937 rng(22);
  const int cols = 192;
  for (WeightFormat format : kInt8Formats) {
    SCOPED_TRACE(std::string(name_of(format)));
    const HostQ8 x = quantise(random_floats(rng, cols));
    const DeviceQ8 dx = device_q8(cols, &x);
    const int rows[3] = {37, 5, 70};
    std::vector<FormatMatrix> m;
    std::vector<DeviceBuffer> w, s, y;
    dk::Matvecs three;
    for (int i = 0; i < 3; ++i) {
      m.push_back(make_matrix(format, rows[i], cols, rng));
      w.push_back(device_copy(m[i].weights));
      s.push_back(device_copy(m[i].scales));
      y.push_back(device_copy(std::vector<float>(rows[i])));
      three.w[i] = dk::Matrix{format, rows[i], cols, w[i].data(), s[i].data()};
      three.y[i] = static_cast<float*>(y[i].data());
    }
    three.count = 3;
    ASSERT_EQ(dk::matvecs_q8(nullptr, three, dx.view()), 0);
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> got = host_copy<float>(y[i], rows[i]);
      for (int r = 0; r < rows[i]; ++r) {
        double sum_abs = 0;
        const double expected = row_times(m[i], cols, r, x, sum_abs);
        EXPECT_NEAR(got[r], expected, float_sum_tolerance(cols, sum_abs)) << "matrix " << i << " row " << r;
      }
    }
    // One matrix with bias, accumulating onto y0.
    const std::vector<float> bias = random_floats(rng, rows[0]), y0 = random_floats(rng, rows[0]);
    DeviceBuffer db = device_copy(bias), dy = device_copy(y0);
    ASSERT_EQ(dk::matvec_q8(nullptr, three.w[0], dx.view(), static_cast<float*>(dy.data()), static_cast<float*>(db.data()), true), 0);
    const std::vector<float> got = host_copy<float>(dy, rows[0]);
    for (int r = 0; r < rows[0]; ++r) {
      double sum_abs = 0;
      const double expected = row_times(m[0], cols, r, x, sum_abs) + bias[r] + y0[r];
      EXPECT_NEAR(got[r], expected, float_sum_tolerance(cols, sum_abs + std::fabs(bias[r]) + std::fabs(y0[r]))) << "row " << r;
    }
    // SwiGLU: matrices 0 and 2 cut to the same rows.
    const dk::Matrix gate{format, rows[0], cols, w[0].data(), s[0].data()}, up{format, rows[0], cols, w[2].data(), s[2].data()};
    DeviceBuffer out = device_copy(std::vector<float>(rows[0]));
    ASSERT_EQ(dk::swiglu_q8(nullptr, gate, up, dx.view(), static_cast<float*>(out.data())), 0);
    const std::vector<float> act = host_copy<float>(out, rows[0]);
    for (int r = 0; r < rows[0]; ++r) {
      double abs_g = 0, abs_u = 0;
      const double g = row_times(m[0], cols, r, x, abs_g), u = row_times(m[2], cols, r, x, abs_u);
      EXPECT_NEAR(act[r], g / (1 + std::exp(-g)) * u, 1e-4 * (1 + std::fabs(g * u))) << "row " << r;
    }
  }
}

TEST(CudaInt8Kernels, ShapesTheKernelsCannotTakeAreRefused) {
  REQUIRE_CUDA();
  std::mt19937 rng(23);
  const FormatMatrix q8 = make_matrix(WeightFormat::q8_row, 4, 48, rng);  // 48: not whole blocks
  const FormatMatrix f32 = make_matrix(WeightFormat::f32, 4, 64, rng);
  DeviceBuffer w8 = device_copy(q8.weights), s8 = device_copy(q8.scales), w32 = device_copy(f32.weights);
  DeviceBuffer y = device_copy(std::vector<float>(4));
  const DeviceQ8 x = device_q8(64);
  const dk::Matrix odd{WeightFormat::q8_row, 4, 48, w8.data(), s8.data()}, exact{WeightFormat::f32, 4, 64, w32.data(), nullptr};
  EXPECT_FALSE(dk::q8_input_fits(odd));
  EXPECT_FALSE(dk::q8_input_fits(exact));
  EXPECT_NE(dk::matvec_q8(nullptr, odd, x.view(), static_cast<float*>(y.data()), nullptr, false), 0);
  EXPECT_NE(dk::matvec_q8(nullptr, exact, x.view(), static_cast<float*>(y.data()), nullptr, false), 0);
}

// Experts of one format in a slab: [gate | up | down] weights, then scales,
// each part 16-byte aligned as coli's records are.
struct ExpertSlab {
  ExpertRecordLayout layout;
  std::vector<std::uint8_t> bytes;
  std::vector<FormatMatrix> parts;  // slot * 3 + {gate, up, down}
};

std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }

ExpertSlab make_slab(WeightFormat format, int hidden, int width, int slots, std::mt19937& rng) {
  ExpertSlab slab;
  ExpertRecordLayout& l = slab.layout;
  l.format = format;
  l.hidden = hidden;
  l.width = width;
  std::size_t offset = 0;
  std::size_t* weights[3] = {&l.gate_weights, &l.up_weights, &l.down_weights};
  std::size_t* scales[3] = {&l.gate_scales, &l.up_scales, &l.down_scales};
  for (int slot = 0; slot < slots; ++slot) {
    for (int part = 0; part < 3; ++part) {
      slab.parts.push_back(make_matrix(format, part < 2 ? width : hidden, part < 2 ? hidden : width, rng));
    }
  }
  for (int part = 0; part < 3; ++part) {
    *weights[part] = offset;
    offset = align16(offset + slab.parts[part].weights.size());
  }
  for (int part = 0; part < 3; ++part) {
    *scales[part] = offset;
    offset = align16(offset + slab.parts[part].scales.size());
  }
  l.record_stride = offset;
  slab.bytes.assign(offset * slots, 0);
  for (int slot = 0; slot < slots; ++slot) {
    for (int part = 0; part < 3; ++part) {
      const FormatMatrix& m = slab.parts[slot * 3 + part];
      std::uint8_t* record = slab.bytes.data() + slot * offset;
      std::memcpy(record + *weights[part], m.weights.data(), m.weights.size());
      std::memcpy(record + *scales[part], m.scales.data(), m.scales.size());
    }
  }
  return slab;
}

// k = 3, the second choice the host's (slot -1, its row given); gate/up's
// act against the de-quantised product, act_q against a host quantisation
// of act, then down (+ shared expert) against act_q de-quantised.
TEST(CudaInt8Kernels, ExpertsMatchTheDequantisedProducts) {
  REQUIRE_CUDA();
  std::mt19937 rng(24);
  const int hidden = 128, width = 64, slots = 2, k = 3;
  for (WeightFormat format : kInt8Formats) {
    SCOPED_TRACE(std::string(name_of(format)));
    ExpertSlab slab = make_slab(format, hidden, width, slots, rng);
    ASSERT_TRUE(dk::experts_q8_fit(slab.layout));
    const HostQ8 x = quantise(random_floats(rng, hidden));
    const std::vector<float> residual = random_floats(rng, hidden), host_rows = random_floats(rng, k * hidden);
    const std::vector<float> shared = random_floats(rng, hidden), gate = {0.3f};
    const std::vector<ExpertChoice> choices = {{1, 0.5f}, {-1, 0.3f}, {0, 0.2f}};
    DeviceBuffer dslab = device_copy(slab.bytes), dres = device_copy(residual), drows = device_copy(host_rows);
    DeviceBuffer dshared = device_copy(shared), dgate = device_copy(gate), dchoices = device_copy(choices);
    DeviceBuffer act = device_copy(std::vector<float>(k * width));
    const DeviceQ8 dx = device_q8(hidden, &x), act_q = device_q8(k * width);
    const dk::Experts e{slab.layout, static_cast<std::uint8_t*>(dslab.data()), slots,
                        static_cast<ExpertChoice*>(dchoices.data()), k, static_cast<float*>(drows.data())};
    ASSERT_EQ(dk::expert_gate_up_q8(nullptr, e, dx.view(), static_cast<float*>(act.data()), act_q.view()), 0);
    const std::vector<float> got_act = host_copy<float>(act, k * width);
    for (int i : {0, 2}) {
      for (int j = 0; j < width; ++j) {
        double abs_g = 0, abs_u = 0;
        const double g = row_times(slab.parts[choices[i].slot * 3], hidden, j, x, abs_g);
        const double u = row_times(slab.parts[choices[i].slot * 3 + 1], hidden, j, x, abs_u);
        EXPECT_NEAR(got_act[i * width + j], g / (1 + std::exp(-g)) * u, 1e-4 * (1 + std::fabs(g * u)))
            << "choice " << i << " row " << j;
      }
    }
    HostQ8 act_host = host_q8(act_q);
    for (int i : {0, 2}) {  // the host's choice (1) is not computed here
      const std::vector<float> row(got_act.begin() + i * width, got_act.begin() + (i + 1) * width);
      const HostQ8 expected = quantise(row);
      for (int j = 0; j < width; ++j) EXPECT_EQ(act_host.values[i * width + j], expected.values[j]) << i << " " << j;
      for (int b = 0; b < width / dk::kQ8Block; ++b) {
        EXPECT_EQ(act_host.blocks[i * width / dk::kQ8Block + b].scale, expected.blocks[b].scale);
        EXPECT_EQ(act_host.blocks[i * width / dk::kQ8Block + b].sum, expected.blocks[b].sum);
      }
    }
    ASSERT_EQ(dk::expert_down_add_q8(nullptr, e, act_q.view(), static_cast<float*>(dshared.data()),
                                     static_cast<float*>(dgate.data()), static_cast<float*>(dres.data())),
              0);
    // The same with the host's rows added later (host_later, then add_host_rows).
    DeviceBuffer dres_later = device_copy(residual);
    dk::Experts later = e;
    later.host_later = true;
    ASSERT_EQ(dk::expert_down_add_q8(nullptr, later, act_q.view(), static_cast<float*>(dshared.data()),
                                     static_cast<float*>(dgate.data()), static_cast<float*>(dres_later.data())),
              0);
    ASSERT_EQ(dk::add_host_rows(nullptr, later, static_cast<float*>(dres_later.data())), 0);
    const std::vector<float> got = host_copy<float>(dres, hidden), got_later = host_copy<float>(dres_later, hidden);
    for (int r = 0; r < hidden; ++r) {
      double expected = residual[r] + 1 / (1 + std::exp(-0.3)) * shared[r], sum_abs = std::fabs(expected);
      for (int i = 0; i < k; ++i) {
        if (choices[i].slot < 0) {
          expected += choices[i].weight * host_rows[i * hidden + r];
          continue;
        }
        const FormatMatrix& down = slab.parts[choices[i].slot * 3 + 2];
        for (int j = 0; j < width; ++j) {
          const double term = choices[i].weight * down.values[static_cast<std::size_t>(r) * width + j] *
                              act_host.at(static_cast<std::size_t>(i) * width + j);
          expected += term;
          sum_abs += std::fabs(term);
        }
      }
      EXPECT_NEAR(got[r], expected, float_sum_tolerance(k * width, sum_abs) + 1e-6) << "row " << r;
      EXPECT_NEAR(got_later[r], expected, float_sum_tolerance(k * width, sum_abs) + 1e-6) << "row " << r << ", later";
    }
  }
}

// A choice whose slot is outside the slab and no host rows: its act block
// scales turn NaN, and so does every row of the output.
TEST(CudaInt8Kernels, AChoiceWithoutASlotTurnsTheOutputNaN) {
  REQUIRE_CUDA();
  std::mt19937 rng(25);
  const int hidden = 64, width = 64, slots = 1, k = 2;
  ExpertSlab slab = make_slab(WeightFormat::q4_g64, hidden, width, slots, rng);
  const HostQ8 x = quantise(random_floats(rng, hidden));
  const std::vector<ExpertChoice> choices = {{0, 0.5f}, {7, 0.5f}};
  DeviceBuffer dslab = device_copy(slab.bytes), dchoices = device_copy(choices);
  DeviceBuffer act = device_copy(std::vector<float>(k * width)), dres = device_copy(std::vector<float>(hidden));
  const DeviceQ8 dx = device_q8(hidden, &x), act_q = device_q8(k * width);
  const dk::Experts e{slab.layout, static_cast<std::uint8_t*>(dslab.data()), slots,
                      static_cast<ExpertChoice*>(dchoices.data()), k, nullptr};
  ASSERT_EQ(dk::expert_gate_up_q8(nullptr, e, dx.view(), static_cast<float*>(act.data()), act_q.view()), 0);
  ASSERT_EQ(dk::expert_down_add_q8(nullptr, e, act_q.view(), nullptr, nullptr, static_cast<float*>(dres.data())), 0);
  const HostQ8 act_host = host_q8(act_q);
  EXPECT_FALSE(std::isnan(act_host.blocks[0].scale));
  EXPECT_TRUE(std::isnan(act_host.blocks[width / dk::kQ8Block].scale));
  for (float v : host_copy<float>(dres, hidden)) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace coli::kernels::cuda
