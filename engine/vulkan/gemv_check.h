// Checking a GPU GEMV against the scalar CPU reference, and the deterministic
// test data both the self-test and the unit tests use.
//
// The error measure. Each y[r] is a sum of n = cols products. An fp32 sum in
// any order errs by at most (n-1)·u·Σ|terms| (u = 2^-24), but the rounding
// errors are independent and of either sign, so what kernels actually show
// grows like √n·u·Σ|terms| whatever the order (sequential, strided threads,
// tree or subgroup reductions). So the error of row r is measured relative to
// S_r = Σ_c |w_rc·x_c| (times the scale), not to |y_r| (which cancellation can
// make arbitrarily small), and the tolerance is
//     (4·√n + 16)·u
// 4√n: a four-sigma margin on the random-walk growth; 16u: the rounding of
// each product, of the scale multiply and of per-group partial sums (q4).
// A kernel that drops or doubles one element errs by about S_r/n, which is
// above this tolerance for every n below ~26000 (n = 4096: 16x above).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/gemv_reference.h"

namespace coli::vulkan {

struct GemvComparison {
  double max_relative_error = 0;  // max over rows of |gpu - reference| / S_r
  double tolerance = 0;
  int worst_row = -1;
  bool passed = false;            // also false for any NaN/inf in the GPU result
};

double gemv_tolerance(int cols);

GemvComparison compare_with_reference(const kernels::Q8RowMatrix& w, std::span<const float> x,
                                      std::span<const float> gpu_y);
GemvComparison compare_with_reference(const kernels::Q4G64Matrix& w, std::span<const float> x,
                                      std::span<const float> gpu_y);

// Uniform values in [-1, 1), the same for the same seed.
std::vector<float> random_values(std::size_t count, std::uint64_t seed);

}  // namespace coli::vulkan
