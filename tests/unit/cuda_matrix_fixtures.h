// Inputs and references shared by the CUDA kernel tests
// (cuda_decoder_kernels_test.cpp, cuda_prefill_kernels_test.cpp): random
// activations, device copies, a matrix in any container format with its
// exact de-quantised values, and attention in double.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_kernels.h"
#include "cuda/decoder_kernels.h"
#include "reference/gemv_reference.h"

namespace coli::kernels::cuda {

inline std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// Float accumulation over `cols` terms: a generous multiple of the worst
// case (the kernels' chains are at most cols/16 + 64 roundings long; the
// derivation is at cuda_kernels_test.cpp's sum_tolerance).
inline double float_sum_tolerance(int cols, double sum_abs) {
  return (cols / 16.0 + 64.0) * std::ldexp(1.0, -24) * sum_abs + 1e-30;
}

template <class T>
DeviceBuffer device_copy(const std::vector<T>& host) {
  auto buffer = DeviceBuffer::allocate(std::max<std::size_t>(host.size() * sizeof(T), 4));
  EXPECT_TRUE(buffer.ok());
  EXPECT_TRUE(buffer->upload(host.data(), host.size() * sizeof(T)).ok());
  return std::move(*buffer);
}

template <class T>
std::vector<T> host_copy(const DeviceBuffer& device, std::size_t n) {
  std::vector<T> out(n);
  const Status s = device.download(out.data(), n * sizeof(T));
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return out;
}

// A matrix in `format` with its exact (de-quantised, widened) values.
struct FormatMatrix {
  std::vector<std::uint8_t> weights, scales;
  std::vector<double> values;  // rows x cols
};

inline FormatMatrix make_matrix(WeightFormat format, int rows, int cols, std::mt19937& rng) {
  const std::vector<float> dense = random_floats(rng, static_cast<std::size_t>(rows) * cols);
  FormatMatrix m;
  m.values.resize(dense.size());
  auto put = [&](const void* bytes, std::size_t n, std::vector<std::uint8_t>& to) {
    to.resize(n);
    std::memcpy(to.data(), bytes, n);
  };
  if (format == WeightFormat::f32) {
    put(dense.data(), dense.size() * 4, m.weights);
    for (std::size_t i = 0; i < dense.size(); ++i) m.values[i] = dense[i];
  } else if (format == WeightFormat::bf16 || format == WeightFormat::f16) {
    std::vector<std::uint16_t> halves(dense.size());
    for (std::size_t i = 0; i < dense.size(); ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &dense[i], 4);
      halves[i] = format == WeightFormat::bf16 ? static_cast<std::uint16_t>(bits >> 16) : float_to_half(dense[i]);
      const std::uint32_t wide = static_cast<std::uint32_t>(halves[i]) << 16;
      float back;
      std::memcpy(&back, &wide, 4);
      m.values[i] = format == WeightFormat::bf16 ? back : half_to_float(halves[i]);
    }
    put(halves.data(), halves.size() * 2, m.weights);
  } else if (format == WeightFormat::q8_row) {
    const Q8RowMatrix q = quantize_q8_row(dense, rows, cols);
    put(q.weights.data(), q.weights.size(), m.weights);
    put(q.scales.data(), q.scales.size() * 4, m.scales);
    for (std::size_t i = 0; i < dense.size(); ++i) m.values[i] = static_cast<double>(q.weights[i]) * q.scales[i / cols];
  } else {
    const Q4G64Matrix q = quantize_q4_g64(dense, rows, cols);
    put(q.nibbles.data(), q.nibbles.size(), m.weights);
    put(q.scales.data(), q.scales.size() * 2, m.scales);
    for (std::size_t i = 0; i < dense.size(); ++i) {
      const std::size_t r = i / cols, c = i % cols;
      const std::uint8_t byte = q.nibbles[i / 2];
      const int value = (c % 2 == 0 ? byte & 0x0f : byte >> 4) - 8;
      m.values[i] = value * static_cast<double>(half_to_float(q.scales[r * (cols / 64) + c / 64]));
    }
  }
  return m;
}

// The attention kernel's arguments over these buffers (1 / sqrt(head_dim) scale).
inline decoder::Attention attention_of(const DeviceBuffer& q, const DeviceBuffer& k_cache, const DeviceBuffer& v_cache, DeviceBuffer& out,
                           DeviceBuffer& scores, const DeviceBuffer& position, int heads, int kv_heads, int head_dim,
                           int context) {
  return decoder::Attention{static_cast<const float*>(q.data()), static_cast<const float*>(k_cache.data()),
                       static_cast<const float*>(v_cache.data()), static_cast<float*>(out.data()),
                       static_cast<float*>(scores.data()), static_cast<const int*>(position.data()), heads, kv_heads,
                       head_dim, context, static_cast<float>(1.0 / std::sqrt(head_dim))};
}

// One token's attention over the first `tokens` cached rows (keys, values:
// [position][kv_heads * head_dim]), a softmax in double; [heads][head_dim].
inline std::vector<double> attention_in_double(const std::vector<float>& q, const std::vector<float>& keys,
                                        const std::vector<float>& values, int heads, int kv_heads, int head_dim, int tokens) {
  const int kv_width = kv_heads * head_dim;
  std::vector<double> out(static_cast<std::size_t>(heads) * head_dim);
  for (int h = 0; h < heads; ++h) {
    const int kv = h / (heads / kv_heads);
    std::vector<double> s(tokens);
    for (int p = 0; p < tokens; ++p) {
      for (int d = 0; d < head_dim; ++d) s[p] += static_cast<double>(q[h * head_dim + d]) * keys[p * kv_width + kv * head_dim + d];
      s[p] /= std::sqrt(static_cast<double>(head_dim));
    }
    const double peak = *std::max_element(s.begin(), s.end());
    double total = 0;
    for (double& v : s) total += (v = std::exp(v - peak));
    for (int d = 0; d < head_dim; ++d) {
      for (int p = 0; p < tokens; ++p) out[h * head_dim + d] += s[p] / total * values[p * kv_width + kv * head_dim + d];
    }
  }
  return out;
}

}  // namespace coli::kernels::cuda
