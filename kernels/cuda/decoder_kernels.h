// The CUDA decoder's kernels (engine/cuda), behind a plain C++ API like
// cuda_kernels.h: no CUDA header here, raw device pointers, a stream given as
// an opaque pointer (a cudaStream_t). Each launcher returns the CUDA error of
// its launch as an int (0 = success); the caller (CudaDecoder) has checked
// shapes, formats and buffer sizes once when it made its buffers, because
// these are called while a CUDA graph is captured, once per token count.
//
// Every kernel here computes one token (decode; a prompt's batches take
// decoder_batch.h's): one warp per output row for the matrix kernels, float
// accumulation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coli/base/weight_format.h"
#include "cuda/cuda_kernels.h"

namespace coli::kernels::cuda::decoder {

using Stream = void*;  // cudaStream_t

// A dense matrix [rows][cols] in any container format: f32, bf16, f16
// (weights only) or q8_row / q4_g64 (scales as the reference lays them out).
struct Matrix {
  WeightFormat format = WeightFormat::f32;
  int rows = 0;
  int cols = 0;
  const void* weights = nullptr;
  const void* scales = nullptr;  // quantised formats only
};

// Activations quantised once for the int8 dot products (dp4a) of q8_row
// and q4_g64 weights, as llama.cpp's q8_1 does: blocks of kQ8Block values,
// each with scale = max|x| / 127 (NaN when the block holds a NaN or inf, so
// the products that read it turn NaN) and the sum of its int8 values (q4's
// offset of 8 comes off as 8 * sum). The f32 path reads 4 bytes of x per
// weight through the L1 and converts every nibble to float; this one reads
// 1 byte and converts nothing (docs/backends.md, "int8 activations").
inline constexpr int kQ8Block = 32;
struct Q8Block {
  float scale = 0;
  int sum = 0;
};
static_assert(sizeof(Q8Block) == 8, "the device reads a Q8Block as one float2");
struct Q8Activations {
  std::int8_t* values = nullptr;  // n values; null: this step keeps f32 activations
  Q8Block* blocks = nullptr;      // n / kQ8Block blocks
  bool on() const { return values != nullptr; }
};
// Bytes of n activations' int8 copy (values, then blocks); n % kQ8Block == 0.
inline std::size_t q8_activation_bytes(std::size_t n) { return n + n / kQ8Block * sizeof(Q8Block); }
// True when W's int8 path applies: q8_row or q4_g64, cols a multiple of
// kQ8Block and weights 16-byte aligned (a lane reads 16 bytes at a time).
bool q8_input_fits(const Matrix& w);

// y[r] = (accumulate ? y[r] : 0) + (W x)[r] + (bias ? bias[r] : 0)
int matvec(Stream stream, const Matrix& w, const float* x, float* y, const float* bias, bool accumulate);
// Up to kMaxMatvecs products of the same x in one launch (q, k and v): y_i =
// W_i x (+ bias_i), the matrices of one format and one cols.
inline constexpr int kMaxMatvecs = 3;
struct Matvecs {
  Matrix w[kMaxMatvecs];
  float* y[kMaxMatvecs] = {};
  const float* bias[kMaxMatvecs] = {};
  int count = 0;
};
int matvecs(Stream stream, const Matvecs& m, const float* x);
// out[j] = silu((gate x)[j]) * (up x)[j] (a dense MLP or shared expert's first half)
int swiglu(Stream stream, const Matrix& gate, const Matrix& up, const float* x, float* out);
// out = x / sqrt(mean(x^2) + eps) * weight, n floats
int rms_norm(Stream stream, const float* x, const float* weight, float* out, int n, float eps);
// The same, also writing out's int8 copy to q (n % kQ8Block == 0).
int rms_norm_q8(Stream stream, const float* x, const float* weight, float* out, Q8Activations q, int n, float eps);
// matvec, matvecs and swiglu on x's int8 copy (q8_input_fits(W) for every W).
int matvec_q8(Stream stream, const Matrix& w, Q8Activations x, float* y, const float* bias, bool accumulate);
int matvecs_q8(Stream stream, const Matvecs& m, Q8Activations x);
int swiglu_q8(Stream stream, const Matrix& gate, const Matrix& up, Q8Activations x, float* out);

// Between the q/k/v projections and attention: clip (clip > 0), q/k RMSNorm
// (norm_mode 1: per head, 2: over the whole projection), RoPE from `rope`
// (float[context][head_dim/2][2]: cos, sin) at *position, then k and v
// written to row *position of this layer's caches (float[context][kv_width]).
struct QkPrep {
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  float* k_cache = nullptr;
  float* v_cache = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* rope = nullptr;
  const int* position = nullptr;  // device memory: one graph serves every position
  int heads = 0, kv_heads = 0, head_dim = 0, norm_mode = 0;
  float clip = 0, eps = 0;
};
int qk_prep(Stream stream, const QkPrep& p);

// Causal attention of one token over positions 0..*position, split across
// the positions (flash-decoding): one block per (head, chunk of
// kAttentionChunk positions) writes its softmax partials (max, sum, the
// unnormalised weighted sum of V) to `scores`, then one block per head
// merges its chunks in position order (the last chunk block to finish, with
// `arrivals`). The grid covers the whole context
// (a captured graph serves every position); chunks past the position exit.
// `scores` holds attention_scratch_floats() floats.
struct Attention {
  const float* q = nullptr;
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  float* out = nullptr;
  float* scores = nullptr;
  const int* position = nullptr;
  int heads = 0, kv_heads = 0, head_dim = 0, context = 0;
  float scale = 1;
  Q8Activations out_q;  // when on (head_dim % kQ8Block == 0): out's int8 copy too, for the o-proj
  // When given (heads zeroed counters): one launch, the last chunk block of
  // each head to finish (a fenced count) merges that head and zeroes its
  // counter again (a captured graph replays it); else a second launch merges.
  unsigned* arrivals = nullptr;
};
inline constexpr int kAttentionChunk = 32;
inline std::size_t attention_scratch_floats(int heads, int head_dim, int context) {
  const std::size_t chunks = (static_cast<std::size_t>(context) + kAttentionChunk - 1) / kAttentionChunk;
  return static_cast<std::size_t>(heads) * chunks * (static_cast<std::size_t>(head_dim) + 2);
}
inline constexpr int kMaxHeadDim = 512;
int attention(Stream stream, const Attention& a);

// The router's choice: softmax over the experts' logits, the top_k highest
// (ties keep the lower expert id), renormalised to sum 1 when asked; writes
// choices[i] = {slot_of[expert], weight} (slot -1: no VRAM slot), the expert
// ids when `ids` is given (for the host, in a hybrid layer) and adds 1 to
// counts[expert].
inline constexpr int kMaxRoutedExperts = 1024;  // the router's probabilities stay in registers
struct Route {
  const float* logits = nullptr;
  const int* slot_of = nullptr;  // this MoE layer's expert -> slot
  ExpertChoice* choices = nullptr;
  int* ids = nullptr;            // optional: int[top_k]
  unsigned* counts = nullptr;    // this MoE layer's experts
  int experts = 0, top_k = 0;
  bool renormalize = false;
};
int route_topk(Stream stream, const Route& r);

// The post-attention RMSNorm of x into h, the router's logits of h and
// route_topk's choice, in one block (one launch instead of three per MoE
// layer; a launch cost more than the router's 256 KB on an H200). For float
// routers (f32, bf16, f16) of at most kMaxRouterHidden columns; the caller
// launches the three kernels otherwise.
inline constexpr int kMaxRouterHidden = 8192;
struct NormRoute {
  const float* x = nullptr;
  const float* norm = nullptr;
  float* h = nullptr;
  int hidden = 0;
  float eps = 0;
  Matrix router;  // [experts][hidden]
  Route route;    // one block: its logits pointer is unused (they stay in shared memory)
  // Decode (norm_route): when given (a zeroed counter and experts floats),
  // the router's rows are split over several blocks, a warp per row taking
  // x's sum of squares in the same pass as its dot with x * norm, and
  // writing its logit; the last block to arrive routes and zeroes the
  // counter again (so a captured graph replays it); block 0 writes h.
  unsigned* arrivals = nullptr;
  float* logits = nullptr;
  Q8Activations h_q;  // decode, when on (hidden % kQ8Block == 0): h's int8 copy too, for the experts
};
bool norm_route_fits(const Matrix& router, int hidden);
int norm_route(Stream stream, const NormRoute& r);

// One MoE layer's selected experts (records as in cuda_kernels.h, any
// expert format: f32, q8_row, q4_g64). A choice whose slot is outside the
// slab is the host's when `host_rows` is given (a hybrid layer: its output
// row, [k][hidden], computed by the host), else its output is NaN (wrong
// output that shows, never a read outside the slab). host_later: the
// host's rows are not there yet: the down projection leaves them out and
// add_host_rows() adds them once they are (the device's experts run while
// the host computes its own).
struct Experts {
  ExpertRecordLayout layout;
  const std::uint8_t* slab = nullptr;
  int slot_count = 0;
  const ExpertChoice* choices = nullptr;
  int k = 0;
  const float* host_rows = nullptr;
  bool host_later = false;
};
// act[e][j] = silu(gate_e x)[j] * (up_e x)[j] (choices on the device)
int expert_gate_up(Stream stream, const Experts& e, const float* x, float* act);
// x[r] += sum_e weight_e y_e[r], y_e = (down_e act_e) on the device (summed
//         lane-wise over the experts, then over the warp) plus the host's
//         host_rows[e] in routing order,
//         + (shared ? sigmoid(*shared_gate) * shared[r] : 0)
// shared_gate null means the shared expert is added with weight 1.
int expert_down_add(Stream stream, const Experts& e, const float* act, const float* shared, const float* shared_gate,
                    float* x);
// x[r] += sum over the host's choices (no VRAM slot), in routing order, of
// weight_e host_rows[e][r]: a hybrid layer's second half (host_later).
int add_host_rows(Stream stream, const Experts& e, float* x);
// The same on int8 activations: gate/up read x's int8 copy and write act
// and its int8 copy act_q (float[k][width] and its blocks), which down reads.
// For experts_q8_fit(layout) only.
bool experts_q8_fit(const ExpertRecordLayout& layout);
int expert_gate_up_q8(Stream stream, const Experts& e, Q8Activations x, float* act, Q8Activations act_q);
int expert_down_add_q8(Stream stream, const Experts& e, Q8Activations act, const float* shared,
                       const float* shared_gate, float* x);

}  // namespace coli::kernels::cuda::decoder
