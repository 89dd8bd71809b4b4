// Quantised weight layouts for expert GEMV, and the scalar CPU reference that
// every GPU and SIMD kernel is tested against (design.md #8). The layouts are
// the contract: shaders (shaders/*.comp) read exactly these bytes.
//
// q8_row  (int8, one scale per row)
//   weights: int8  [rows][cols], row-major
//   scales:  float [rows]
//   y[r] = scales[r] * sum_c weights[r][c] * x[c]
//
// q4_g64  (int4, group size 64, planar: all nibbles first, then all scales)
//   cols is a multiple of 64
//   nibbles: uint8 [rows][cols/2]; element c of row r is in byte r*cols/2 + c/2,
//            low nibble for even c, high nibble for odd c; value = nibble - 8 (-8..7)
//   scales:  IEEE binary16 [rows][cols/64], as uint16
//   y[r] = sum_g float(scales[r][g]) * sum_{c in group g} value(r, c) * x[c]
//
// Buffers are read as 32-bit words by the shaders, so no 8/16-bit storage
// feature is needed; byte sizes are padded to a multiple of 4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace coli::kernels {

inline constexpr int kQ4GroupSize = 64;

struct Q8RowMatrix {
  int rows = 0;
  int cols = 0;
  std::vector<std::int8_t> weights;  // rows * cols
  std::vector<float> scales;         // rows
};

struct Q4G64Matrix {
  int rows = 0;
  int cols = 0;                      // multiple of 64
  std::vector<std::uint8_t> nibbles; // rows * cols / 2
  std::vector<std::uint16_t> scales; // rows * cols / 64, binary16
};

float half_to_float(std::uint16_t half);
std::uint16_t float_to_half(float value);  // round to nearest even

// Quantise a float matrix [rows][cols] (row-major) to each layout.
Q8RowMatrix quantize_q8_row(std::span<const float> matrix, int rows, int cols);
Q4G64Matrix quantize_q4_g64(std::span<const float> matrix, int rows, int cols);

// y = W x in the scalar reference: double accumulation, one row at a time.
void gemv_reference(const Q8RowMatrix& w, std::span<const float> x, std::span<float> y);
void gemv_reference(const Q4G64Matrix& w, std::span<const float> x, std::span<float> y);

// The same on raw pointers into a container's expert record (no copies):
// f32 activations, weights de-quantised on the fly, double accumulation.
// This is the engine's "exact" kernel: it computes what transformers
// computes on the de-quantised weights.
void gemv_reference_q8(const std::int8_t* weights, const float* scales, int rows, int cols, std::span<const float> x,
                       std::span<float> y);
void gemv_reference_q4(const std::uint8_t* nibbles, const std::uint16_t* scales, int rows, int cols,
                       std::span<const float> x, std::span<float> y);

// Bytes a GEMV must read for one call (weights + scales + x), for GB/s figures.
std::size_t gemv_bytes(const Q8RowMatrix& w);
std::size_t gemv_bytes(const Q4G64Matrix& w);

}  // namespace coli::kernels
