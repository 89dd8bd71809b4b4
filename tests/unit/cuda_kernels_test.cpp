// The CUDA kernels (kernels/cuda) against the scalar reference
// (kernels/reference/gemv_reference.h): q8_row and q4_g64 GEMV for 1..16
// tokens, and one MoE layer's experts (gate/up + SwiGLU, then the weighted
// down sum in routing order) for k = 1, 2, 8 with slots out of order.
// Without a CUDA device the device tests skip, unless COLI_REQUIRE_CUDA=1
// (the GPU machine's run sets it) makes that a failure. The argument checks
// and the no-driver behaviour run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_kernels.h"
#include "cuda_test_support.h"
#include "reference/gemv_reference.h"

namespace coli::kernels::cuda {
namespace {

// Float accumulation error bound. Each output is a sum of products computed
// by one warp: a lane adds the products of its 16- or 32-column chunks in a
// chain (chunk length + chunks per lane <= cols/32 + 32 additions), times a
// scale (1 rounding), then a 5-level butterfly. The classic bound for a
// float sum whose terms pass through at most n roundings is
// n * 2^-24 * sum |term|; n = cols/16 + 64 covers the chain with a factor of
// 2 to spare, and the reference's own float rounding (1 ulp of |y| <= sum).
// It is a worst case, not a statistical guess, so it cannot fail on a correct
// kernel, and it is ~100x below the error of one wrong nibble or column.
double sum_tolerance(int cols, double sum_abs_terms) {
  return (cols / 16.0 + 64.0) * std::ldexp(1.0, -24) * sum_abs_terms;
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float spread = 1.0f) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// A quantised matrix in either format, with the reference's view of it.
struct HostMatrix {
  WeightFormat format = WeightFormat::q8_row;
  int rows = 0;
  int cols = 0;
  std::vector<std::uint8_t> weights;  // the layout's bytes
  std::vector<std::uint8_t> scales;

  static HostMatrix random(WeightFormat format, int rows, int cols, std::mt19937& rng) {
    const std::vector<float> dense = random_floats(rng, static_cast<std::size_t>(rows) * cols);
    HostMatrix m{format, rows, cols, {}, {}};
    if (format == WeightFormat::q8_row) {
      const Q8RowMatrix q = quantize_q8_row(dense, rows, cols);
      m.weights.resize(q.weights.size());
      std::memcpy(m.weights.data(), q.weights.data(), q.weights.size());
      m.scales.resize(q.scales.size() * sizeof(float));
      std::memcpy(m.scales.data(), q.scales.data(), m.scales.size());
    } else {
      const Q4G64Matrix q = quantize_q4_g64(dense, rows, cols);
      m.weights = q.nibbles;
      m.scales.resize(q.scales.size() * sizeof(std::uint16_t));
      std::memcpy(m.scales.data(), q.scales.data(), m.scales.size());
    }
    return m;
  }

  // The reference GEMV for one token.
  std::vector<float> times(std::span<const float> x) const {
    std::vector<float> y(static_cast<std::size_t>(rows));
    if (format == WeightFormat::q8_row) {
      gemv_reference_q8(reinterpret_cast<const std::int8_t*>(weights.data()),
                        reinterpret_cast<const float*>(scales.data()), rows, cols, x, y);
    } else {
      gemv_reference_q4(weights.data(), reinterpret_cast<const std::uint16_t*>(scales.data()), rows, cols, x, y);
    }
    return y;
  }

  // De-quantised weight (r, c).
  double weight(int r, int c) const {
    const std::size_t at = static_cast<std::size_t>(r) * cols + c;
    if (format == WeightFormat::q8_row) {
      float scale;
      std::memcpy(&scale, scales.data() + sizeof(float) * r, sizeof scale);
      return static_cast<double>(static_cast<std::int8_t>(weights[at])) * scale;
    }
    const std::uint8_t byte = weights[at / 2];
    const int value = (c % 2 == 0 ? byte & 0x0f : byte >> 4) - 8;
    std::uint16_t half;
    std::memcpy(&half, scales.data() + sizeof half * (static_cast<std::size_t>(r) * (cols / 64) + c / 64), sizeof half);
    return value * static_cast<double>(half_to_float(half));
  }

  // Per row: sum_c |W[r][c] x[c]|, what the float error is relative to.
  std::vector<double> abs_sums(std::span<const float> x) const {
    std::vector<double> sums(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) sums[r] += std::fabs(weight(r, c) * x[c]);
    }
    return sums;
  }
};

template <class T>
DeviceBuffer upload(const std::vector<T>& host) {
  auto buffer = DeviceBuffer::allocate(host.size() * sizeof(T));
  EXPECT_TRUE(buffer.ok()) << buffer.error().message;
  if (!buffer.ok()) return DeviceBuffer{};
  const Status copied = buffer->upload(host.data(), host.size() * sizeof(T));
  EXPECT_TRUE(copied.ok()) << copied.error().message;
  return std::move(buffer).value();
}

std::vector<float> download(const DeviceBuffer& buffer) {
  std::vector<float> host(buffer.bytes() / sizeof(float));
  const Status copied = buffer.download(host.data(), buffer.bytes());
  EXPECT_TRUE(copied.ok()) << copied.error().message;
  return host;
}

// ---------------------------------------------------------------- everywhere

TEST(CudaKernels, DeviceCountGivesAReasonWhenThereIsNone) {
  const CudaDeviceCount found = cuda_device_count();
  EXPECT_GE(found.devices, 0);
  if (found.devices == 0) {
    EXPECT_NE(found.reason, "");
  } else {
    EXPECT_EQ(found.reason, "");
  }
}

TEST(CudaKernels, WithoutADeviceCallsReturnErrors) {
  if (cuda_device_count().devices > 0) GTEST_SKIP() << "a CUDA device is present; this checks machines without one";
  auto buffer = DeviceBuffer::allocate(1024);
  ASSERT_FALSE(buffer.ok());
  EXPECT_NE(buffer.error().message.find("cudaMalloc"), std::string::npos) << buffer.error().message;
  const Status synced = synchronize();
  ASSERT_FALSE(synced.ok());
  EXPECT_NE(synced.error().message.find("cudaDeviceSynchronize"), std::string::npos) << synced.error().message;
  DeviceBuffer empty;
  float host[4];
  EXPECT_FALSE(empty.download(host, sizeof host).ok());
  EXPECT_FALSE(empty.upload(host, sizeof host).ok());
}

// Checked before any CUDA call, so these run without a device too.
TEST(CudaKernels, BadArgumentsAreRefusedNamingTheField) {
  DeviceBuffer none;
  auto refused = [](const Status& status, const std::string& field) {
    ASSERT_FALSE(status.ok()) << field;
    EXPECT_NE(status.error().message.find(field), std::string::npos) << status.error().message;
  };
  refused(gemv({WeightFormat::f32, 4, 64, &none, &none}, none, none, 1), "has no CUDA kernel");
  refused(gemv({WeightFormat::q4_g64, 4, 100, &none, &none}, none, none, 1), "cols is 100");
  refused(gemv({WeightFormat::q8_row, 0, 64, &none, &none}, none, none, 1), "rows is 0");
  refused(gemv({WeightFormat::q8_row, 4, 64, &none, &none}, none, none, 0), "count is 0");
  refused(gemv({WeightFormat::q8_row, 4, 64, &none, &none}, none, none, kMaxGemvTokens + 1), "count is 17");
  refused(gemv({WeightFormat::q8_row, 4, 64, nullptr, &none}, none, none, 1), "weights is missing");
  refused(gemv({WeightFormat::q8_row, 4, 64, &none, &none}, none, none, 1), "weights holds 0 bytes; it needs 256");

  ExpertRecordLayout layout{WeightFormat::q4_g64, 128, 64, 65536, 0, 8192, 16384, 24576, 32768, 40960};
  const ExpertSelection selection{&none, 4, &none, 2};
  refused(expert_gate_up(layout, selection, none, none), "selection.slab holds 0 bytes");
  ExpertRecordLayout narrow = layout;
  narrow.width = 96;
  refused(expert_gate_up(narrow, selection, none, none), "layout.width is 96");
  ExpertRecordLayout unaligned = layout;
  unaligned.up_weights = 16384 + 8;
  refused(expert_down_sum(unaligned, selection, none, none), "layout.up_weights (16392) is not a multiple of 16");
  ExpertRecordLayout short_stride = layout;
  short_stride.record_stride = 40960;
  refused(expert_down_sum(short_stride, selection, none, none), "layout.down_scales end past record_stride");
  refused(expert_gate_up(layout, {&none, 4, &none, 0}, none, none), "selection.k is 0");
  refused(expert_gate_up(layout, {&none, 4, &none, kMaxSelectedExperts + 1}, none, none), "selection.k is 65");
}

// ---------------------------------------------------------------- on a device

void expect_gemv_matches_reference(WeightFormat format, int rows, int cols, int count, std::mt19937& rng) {
  SCOPED_TRACE(std::string(name_of(format)) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
               " count " + std::to_string(count));
  const HostMatrix w = HostMatrix::random(format, rows, cols, rng);
  const std::vector<float> x = random_floats(rng, static_cast<std::size_t>(count) * cols);
  const DeviceBuffer weights = upload(w.weights);
  const DeviceBuffer scales = upload(w.scales);
  const DeviceBuffer device_x = upload(x);
  auto y = DeviceBuffer::allocate(static_cast<std::size_t>(count) * rows * sizeof(float));
  ASSERT_TRUE(y.ok()) << y.error().message;
  const Status ran = gemv({format, rows, cols, &weights, &scales}, device_x, *y, count);
  ASSERT_TRUE(ran.ok()) << ran.error().message;
  const std::vector<float> got = download(*y);
  for (int t = 0; t < count; ++t) {
    const std::span<const float> token(x.data() + static_cast<std::size_t>(t) * cols, cols);
    const std::vector<float> want = w.times(token);
    const std::vector<double> sums = w.abs_sums(token);
    for (int r = 0; r < rows; ++r) {
      ASSERT_NEAR(got[static_cast<std::size_t>(t) * rows + r], want[r], sum_tolerance(cols, sums[r]))
          << "token " << t << " row " << r;
    }
  }
}

TEST(CudaKernels, GemvMatchesTheReference) {
  REQUIRE_CUDA();
  std::mt19937 rng(14);
  for (WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
    for (int rows : {1, 7, 64, 1000, 2048}) {
      for (int cols : {64, 128, 2048, 1024 + 64}) {
        for (int count : {1, 3, 16}) expect_gemv_matches_reference(format, rows, cols, count, rng);
      }
    }
  }
  // q8_row rows that are not 16-byte aligned take the byte-per-lane path;
  // 9 tokens leave one token in the second tile of 8.
  expect_gemv_matches_reference(WeightFormat::q8_row, 7, 100, 3, rng);
  expect_gemv_matches_reference(WeightFormat::q8_row, 1000, 100, 16, rng);
  expect_gemv_matches_reference(WeightFormat::q4_g64, 64, 2048, 9, rng);
}

// ------------------------------------------------ one MoE layer's experts

struct HostExperts {
  ExpertRecordLayout layout;
  std::vector<std::uint8_t> slab;
  std::vector<HostMatrix> gate, up, down;  // per slot
};

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// `slots` records laid out as the container does: every matrix's weights and
// scales at 64-byte boundaries, records back to back.
HostExperts make_experts(WeightFormat format, int hidden, int width, int slots, std::mt19937& rng) {
  HostExperts e;
  for (int s = 0; s < slots; ++s) {
    e.gate.push_back(HostMatrix::random(format, width, hidden, rng));
    e.up.push_back(HostMatrix::random(format, width, hidden, rng));
    e.down.push_back(HostMatrix::random(format, hidden, width, rng));
  }
  ExpertRecordLayout& l = e.layout;
  l.format = format;
  l.hidden = hidden;
  l.width = width;
  std::size_t at = 0;
  auto place = [&at](std::size_t bytes) {
    const std::size_t offset = at;
    at = round_up(at + bytes, 64);
    return offset;
  };
  l.gate_weights = place(e.gate[0].weights.size());
  l.gate_scales = place(e.gate[0].scales.size());
  l.up_weights = place(e.up[0].weights.size());
  l.up_scales = place(e.up[0].scales.size());
  l.down_weights = place(e.down[0].weights.size());
  l.down_scales = place(e.down[0].scales.size());
  l.record_stride = at;
  e.slab.assign(l.record_stride * slots, 0xAB);  // padding that would show if read
  for (int s = 0; s < slots; ++s) {
    std::uint8_t* record = e.slab.data() + l.record_stride * s;
    auto put = [record](std::size_t offset, const std::vector<std::uint8_t>& bytes) {
      std::memcpy(record + offset, bytes.data(), bytes.size());
    };
    put(l.gate_weights, e.gate[s].weights);
    put(l.gate_scales, e.gate[s].scales);
    put(l.up_weights, e.up[s].weights);
    put(l.up_scales, e.up[s].scales);
    put(l.down_weights, e.down[s].weights);
    put(l.down_scales, e.down[s].scales);
  }
  return e;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// Kernel A against silu(g) * u from the reference GEMVs. With |g' - g| <= tg
// and |u' - u| <= tu (the GEMV bound), and |silu'| <= 1.1 everywhere:
// |silu(g')u' - silu(g)u| <= 1.1 tg (|u| + tu) + (|silu(g)| + 1.1 tg) tu,
// plus a few roundings of the float silu and product (16 ulp of |h|).
void expect_activations_match(const HostExperts& e, const std::vector<ExpertChoice>& choices,
                              const std::vector<float>& x, const std::vector<float>& got) {
  const int width = e.layout.width;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const int slot = choices[i].slot;
    const std::vector<float> g = e.gate[slot].times(x);
    const std::vector<float> u = e.up[slot].times(x);
    const std::vector<double> g_sums = e.gate[slot].abs_sums(x);
    const std::vector<double> u_sums = e.up[slot].abs_sums(x);
    for (int j = 0; j < width; ++j) {
      const double tg = sum_tolerance(e.layout.hidden, g_sums[j]);
      const double tu = sum_tolerance(e.layout.hidden, u_sums[j]);
      const double want = silu(g[j]) * u[j];
      const double tolerance = 1.1 * tg * (std::fabs(u[j]) + tu) + (std::fabs(silu(g[j])) + 1.1 * tg) * tu +
                               16 * std::ldexp(std::fabs(want), -24);
      ASSERT_NEAR(got[i * width + j], want, tolerance) << "expert " << i << " (slot " << slot << ") row " << j;
    }
  }
}

// Kernel B against sum_e weight_e * down_e h_e over the device's own h (so
// this checks kernel B alone), in routing order: the down GEMV bound per
// expert, weighted, plus k + 2 roundings of the weighted float sum.
void expect_down_sum_matches(const HostExperts& e, const std::vector<ExpertChoice>& choices,
                             const std::vector<float>& h, const std::vector<float>& got) {
  const int hidden = e.layout.hidden;
  const int width = e.layout.width;
  std::vector<double> want(hidden), tolerance(hidden), sum_abs(hidden);
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const std::span<const float> h_e(h.data() + i * width, width);
    const HostMatrix& down = e.down[choices[i].slot];
    const std::vector<float> d = down.times(h_e);
    const std::vector<double> sums = down.abs_sums(h_e);
    const double weight = choices[i].weight;
    for (int r = 0; r < hidden; ++r) {
      want[r] += weight * d[r];
      tolerance[r] += std::fabs(weight) * sum_tolerance(width, sums[r]);
      sum_abs[r] += std::fabs(weight * d[r]);
    }
  }
  for (int r = 0; r < hidden; ++r) {
    const double rounding = (static_cast<double>(choices.size()) + 2) * std::ldexp(sum_abs[r], -24);
    ASSERT_NEAR(got[r], want[r], tolerance[r] + rounding) << "row " << r;
  }
}

void expect_experts_match(WeightFormat format, int hidden, int width, std::vector<ExpertChoice> choices,
                          std::mt19937& rng) {
  SCOPED_TRACE(std::string(name_of(format)) + " hidden " + std::to_string(hidden) + " width " +
               std::to_string(width) + " k " + std::to_string(choices.size()));
  constexpr int kSlots = 12;
  const HostExperts e = make_experts(format, hidden, width, kSlots, rng);
  const std::vector<float> x = random_floats(rng, static_cast<std::size_t>(hidden));
  const DeviceBuffer slab = upload(e.slab);
  const DeviceBuffer device_choices = upload(choices);
  const DeviceBuffer device_x = upload(x);
  const int k = static_cast<int>(choices.size());
  auto activations = DeviceBuffer::allocate(static_cast<std::size_t>(k) * width * sizeof(float));
  auto out = DeviceBuffer::allocate(static_cast<std::size_t>(hidden) * sizeof(float));
  ASSERT_TRUE(activations.ok() && out.ok());
  const ExpertSelection selection{&slab, kSlots, &device_choices, k};
  const Status a = expert_gate_up(e.layout, selection, device_x, *activations);
  ASSERT_TRUE(a.ok()) << a.error().message;
  const Status b = expert_down_sum(e.layout, selection, *activations, *out);
  ASSERT_TRUE(b.ok()) << b.error().message;
  const std::vector<float> h = download(*activations);
  const std::vector<float> first = download(*out);
  expect_activations_match(e, choices, x, h);
  expect_down_sum_matches(e, choices, h, first);

  // The same inputs give the same bits (fixed order, no atomics).
  ASSERT_TRUE(expert_gate_up(e.layout, selection, device_x, *activations).ok());
  ASSERT_TRUE(expert_down_sum(e.layout, selection, *activations, *out).ok());
  const std::vector<float> again = download(*out);
  EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0);
}

TEST(CudaKernels, ExpertsMatchTheReference) {
  REQUIRE_CUDA();
  std::mt19937 rng(1414);
  // Slots out of routing order, repeated weights; OLMoE's shape and a small one.
  const std::vector<ExpertChoice> one = {{7, 1.0f}};
  const std::vector<ExpertChoice> two = {{9, 0.5f}, {2, 0.5f}};
  const std::vector<ExpertChoice> eight = {{11, 0.25f}, {3, 0.25f}, {0, 0.125f}, {8, 0.125f},
                                           {5, 0.0625f}, {1, 0.0625f}, {10, 0.0625f}, {4, 0.0625f}};
  for (WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
    for (const auto& choices : {one, two, eight}) {
      expect_experts_match(format, 2048, 1024, choices, rng);
      expect_experts_match(format, 128, 64, choices, rng);
    }
  }
}

TEST(CudaKernels, ASlotOutsideTheSlabGivesNaNNotAStrayRead) {
  REQUIRE_CUDA();
  std::mt19937 rng(7);
  const HostExperts e = make_experts(WeightFormat::q4_g64, 128, 64, 3, rng);
  const std::vector<ExpertChoice> choices = {{1, 0.5f}, {3, 0.5f}};  // slot 3 of 3
  const DeviceBuffer slab = upload(e.slab);
  const DeviceBuffer device_choices = upload(choices);
  const DeviceBuffer x = upload(random_floats(rng, 128));
  auto activations = DeviceBuffer::allocate(2 * 64 * sizeof(float));
  auto out = DeviceBuffer::allocate(128 * sizeof(float));
  ASSERT_TRUE(activations.ok() && out.ok());
  const ExpertSelection selection{&slab, 3, &device_choices, 2};
  ASSERT_TRUE(expert_gate_up(e.layout, selection, x, *activations).ok());
  ASSERT_TRUE(expert_down_sum(e.layout, selection, *activations, *out).ok());
  const std::vector<float> h = download(*activations);
  EXPECT_TRUE(std::none_of(h.begin(), h.begin() + 64, [](float v) { return std::isnan(v); }));
  EXPECT_TRUE(std::all_of(h.begin() + 64, h.end(), [](float v) { return std::isnan(v); }));
  const std::vector<float> result = download(*out);
  EXPECT_TRUE(std::all_of(result.begin(), result.end(), [](float v) { return std::isnan(v); }));
}

}  // namespace
}  // namespace coli::kernels::cuda
