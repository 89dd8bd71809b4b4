// The CUDA decoder's prefill kernels (issue 14): a batch of a prompt's
// tokens through one layer at a time, as matrix-matrix work. Same plain C++
// API as decoder_kernels.h (raw device pointers, an opaque stream, the CUDA
// error of the launch as an int); rows are tokens, [tokens][width] floats.
//
// Matrices: every weight tile is read once per 64 tokens instead of once
// per token. Precision follows the weight format: f32 weights are computed
// in f32 on the CUDA cores (the reference models match transformers to
// 1e-4 through this path too); bf16, f16, q8_row and q4_g64 weights are
// de-quantised to f16 tiles and multiplied on the tensor cores with the
// activations rounded to f16 (saturated at +-65504) and f32 accumulation:
// the int8/int4 formats' own rounding is larger than f16's.
//
// The routed experts are grouped on the device: group_by_slot() sorts the
// batch's choices by VRAM slot, one grouped GEMM then runs every slot's
// tokens (its blocks read the counts; blocks past a slot's count exit), and
// combine_experts() adds each token's k rows, weighted, in routing order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/decoder_kernels.h"

namespace coli::kernels::cuda::decoder {

// Tokens per tile of the matrix kernels (and per block of their grids).
inline constexpr int kGemmTileTokens = 64;

// The rows a matrix kernel reads and writes. Dense: row t of x is token t.
// Grouped (order != nullptr): block z is slot z, whose choices are
// order[offsets[z] .. offsets[z + 1]); a choice c reads x row c / x_divisor
// (k for gate/up: the token; 1 for down: the choice's own activations) and
// writes y row c. The slot's matrices start slot * slot_stride bytes after
// the given weights and scales.
//
// Activations by weight format: f32 matrices (the CUDA-core kernel) read x
// and write y; the tensor-core formats read x_half (f16 bits, rows as x's,
// from to_half_rows or a gemm_swiglu) and write y, or, for gemm_swiglu,
// y_half when it is given (f16 for the down projection that reads it).
struct GemmRows {
  const float* x = nullptr;
  float* y = nullptr;
  const std::uint16_t* x_half = nullptr;
  std::uint16_t* y_half = nullptr;
  int tokens = 0;              // dense: rows of x and y; grouped: the most rows one slot can have (the batch's tokens)
  const int* order = nullptr;  // grouped only
  const int* offsets = nullptr;
  int slots = 1;
  int x_divisor = 1;
  std::size_t slot_stride = 0;
};

// y = (accumulate ? y : 0) + x W^T (+ bias): W [rows][cols], x [.][cols], y [.][rows].
int gemm(Stream stream, const Matrix& w, const GemmRows& rows, const float* bias, bool accumulate);
// y[.][j] = silu((x gate^T)[j]) * (x up^T)[j]: the first half of a SwiGLU MLP
// (a dense layer, the shared expert, or the grouped experts' gate and up).
int gemm_swiglu(Stream stream, const Matrix& gate, const Matrix& up, const GemmRows& rows);

// out[i] = x[i] as f16 bits (saturated at +-65504, NaN kept), i < count:
// the tensor-core GEMMs' activations.
int to_half_rows(Stream stream, const float* x, std::uint16_t* out, std::size_t count);

// RMSNorm of `rows` rows of n floats (one block per row).
int rms_norm_rows(Stream stream, const float* x, const float* weight, float* out, int n, int rows, float eps);

// qk_prep() for `tokens` tokens at positions *p.position + t: q, k and v are
// [tokens][width]; every token's k and v row lands in the caches.
int qk_prep_rows(Stream stream, const QkPrep& p, int tokens);

// How prefill attention computes: f32 on the CUDA cores (exact: the f32
// models' path and --gpu-kernel exact), or Q, K, V and the softmax weights
// in f16 on the tensor cores with f32 sums (heads of at most 128 dims;
// wider ones take f32).
enum class AttentionMath { f32, f16_tensor };

// Causal attention of `tokens` queries at positions *a.position + t over the
// cache rows 0..that position (the batch's own rows written by
// qk_prep_rows first); q and out are [tokens][heads * head_dim]. a.scores
// is not used.
int attention_rows(Stream stream, const Attention& a, int tokens, AttentionMath math = AttentionMath::f32);

// The router's choice for `tokens` tokens: the post-attention RMSNorm of x
// [tokens][hidden] into h, the logits and top-k, choices [tokens][top_k]
// (r.route.choices is token 0's; counts added atomically). Float routers
// (norm_route_fits); route_rows() takes logits [tokens][experts] from gemm().
int norm_route_rows(Stream stream, const NormRoute& r, int tokens);
int route_rows(Stream stream, const Route& r, int tokens);

// Sorts the batch's choices (ExpertChoice[count]) by slot: offsets[slot]
// (int[slots + 1]: where the slot's choices start in order; the last is
// the total) and order (int[count]: choice indices, grouped by slot; the
// order within a slot is arbitrary, as each row is computed alone). Choices
// whose slot is outside 0..slots-1 are left out (combine_experts makes them
// NaN). One block; slots <= kMaxRoutedExperts.
int group_by_slot(Stream stream, const ExpertChoice* choices, int count, int slots, int* offsets, int* order);

// x[t][r] += sum over j < k, in routing order, of choices[t k + j].weight *
// rows[t k + j][r] (NaN when the choice's slot is outside 0..slots-1),
// + (shared ? (shared_gate ? sigmoid(shared_gate[t]) : 1) * shared[t][r] : 0).
struct ExpertCombine {
  const ExpertChoice* choices = nullptr;
  const float* rows = nullptr;  // [tokens * k][hidden]
  const float* shared = nullptr;
  const float* shared_gate = nullptr;  // [tokens]
  float* x = nullptr;
  int tokens = 0, k = 0, hidden = 0, slots = 0;
};
int combine_experts(Stream stream, const ExpertCombine& c);

}  // namespace coli::kernels::cuda::decoder
