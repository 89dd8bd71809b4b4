#include "vulkan/gemv_check.h"

#include <cmath>
#include <cstdlib>

namespace coli::vulkan {
namespace {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // fp32, round to nearest

// `row_magnitude[r]` is S_r, the sum the row's rounding errors scale with.
GemvComparison compare(std::span<const float> reference, std::span<const double> row_magnitude,
                       std::span<const float> gpu_y, int cols) {
  GemvComparison result;
  result.tolerance = gemv_tolerance(cols);
  if (gpu_y.size() != reference.size()) {
    result.max_relative_error = INFINITY;
    return result;
  }
  bool all_finite = true;
  for (std::size_t r = 0; r < reference.size(); ++r) {
    if (!std::isfinite(gpu_y[r])) all_finite = false;
    const double difference = std::fabs(static_cast<double>(gpu_y[r]) - reference[r]);
    // An all-zero row must come out exactly zero.
    const double error = row_magnitude[r] > 0 ? difference / row_magnitude[r] : (difference > 0 ? INFINITY : 0);
    if (!(error <= result.max_relative_error)) {  // also catches NaN
      result.max_relative_error = std::isnan(error) ? INFINITY : error;
      result.worst_row = static_cast<int>(r);
    }
  }
  result.passed = all_finite && result.max_relative_error <= result.tolerance;
  return result;
}

}  // namespace

double gemv_tolerance(int cols) { return (4.0 * std::sqrt(static_cast<double>(cols)) + 16.0) * kUnitRoundoff; }

GemvComparison compare_with_reference(const kernels::Q8RowMatrix& w, std::span<const float> x,
                                      std::span<const float> gpu_y) {
  std::vector<float> reference(static_cast<std::size_t>(w.rows));
  kernels::gemv_reference(w, x, reference);
  std::vector<double> magnitude(static_cast<std::size_t>(w.rows), 0.0);
  for (int r = 0; r < w.rows; ++r) {
    double sum = 0;
    for (int c = 0; c < w.cols; ++c) {
      sum += std::abs(static_cast<int>(w.weights[static_cast<std::size_t>(r) * w.cols + c])) * std::fabs(x[c]);
    }
    magnitude[r] = sum * std::fabs(w.scales[r]);
  }
  return compare(reference, magnitude, gpu_y, w.cols);
}

GemvComparison compare_with_reference(const kernels::Q4G64Matrix& w, std::span<const float> x,
                                      std::span<const float> gpu_y) {
  std::vector<float> reference(static_cast<std::size_t>(w.rows));
  kernels::gemv_reference(w, x, reference);
  const int groups = w.cols / kernels::kQ4GroupSize;
  std::vector<double> magnitude(static_cast<std::size_t>(w.rows), 0.0);
  for (int r = 0; r < w.rows; ++r) {
    double sum = 0;
    for (int c = 0; c < w.cols; ++c) {
      const std::uint8_t byte = w.nibbles[(static_cast<std::size_t>(r) * w.cols + c) / 2];
      const int value = (c % 2 == 0 ? byte & 0x0f : byte >> 4) - 8;
      const float scale = kernels::half_to_float(w.scales[static_cast<std::size_t>(r) * groups + c / kernels::kQ4GroupSize]);
      sum += std::abs(value) * std::fabs(x[c]) * std::fabs(scale);
    }
    magnitude[r] = sum;
  }
  return compare(reference, magnitude, gpu_y, w.cols);
}

std::vector<float> random_values(std::size_t count, std::uint64_t seed) {
  // splitmix64: the same numbers on every platform and standard library.
  std::uint64_t state = seed;
  std::vector<float> values(count);
  for (float& value : values) {
    state += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    value = static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
  return values;
}

}  // namespace coli::vulkan
