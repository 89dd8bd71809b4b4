// The transformer operations of an MoE decoder, on float32 activations, as
// Hugging Face computes them (the reference the engine is tested against).
// Weights come in their container dtype; activations are always f32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "coli/base/weight_format.h"

namespace coli::forward {

float bf16_to_float(std::uint16_t bits);

// A row-major [rows][cols] weight matrix in its stored float format (f32,
// bf16 or f16: traits(format).cpu_float_kernels), no copy.
struct DenseMatrix {
  WeightFormat dtype = WeightFormat::f32;
  int rows = 0;
  int cols = 0;
  const void* data = nullptr;
};

// y[r] = sum_c W[r][c] x[c] (+ bias[r] when given); rows split over `threads`.
void gemv_dense(const DenseMatrix& w, std::span<const float> x, std::span<float> y, int threads,
                std::span<const float> bias = {});

// Y[t] = W X[t] (+ bias) for t < count, for several matrices over the same
// activations (x: count * cols floats; each y: count * rows, row t after
// row t-1), all in one parallel region over the rows of every product. Each
// weight row is read from memory once per tile of 8 tokens (from L1 for the
// rest of the tile); every Y[t] equals gemv_dense of X[t] bit for bit (the
// same dot product per token).
struct DenseProduct {
  DenseMatrix w;
  std::span<float> y;
  std::span<const float> bias;  // w.rows floats, or empty
};
void gemv_dense_many(std::span<const DenseProduct> products, std::span<const float> x, int count, int threads);

// gemv_dense_many's work per member of a team of `threads`: rows
// [first_row, last_row) of product `product` for tokens [first_token,
// last_token). The rows are split evenly, each cut at the nearest whole
// 64-byte line of its product's output rows (so no two threads write one
// line); where that leaves members without rows (narrow matrices), chunks of
// one line with their tokens split at tiles of 8.
struct DenseWorkItem {
  std::size_t product = 0;
  int first_row = 0, last_row = 0;
  int first_token = 0, last_token = 0;
};
// One list in member order (a decode token makes a few calls per layer: no
// list per member to allocate each time).
struct DenseWorkShares {
  std::vector<DenseWorkItem> items;  // member m's: items[first[m], first[m + 1])
  std::vector<std::size_t> first;    // one per member, then items.size()
  std::size_t members() const { return first.size() - 1; }
  std::span<const DenseWorkItem> share(std::size_t m) const {
    return std::span<const DenseWorkItem>(items).subspan(first[m], first[m + 1] - first[m]);
  }
};
DenseWorkShares dense_work_shares(std::span<const DenseProduct> products, int count, int threads);

// One row of W as float32 (embedding lookup).
void dense_row(const DenseMatrix& w, int row, std::span<float> out);

// out = x / sqrt(mean(x^2) + eps) * weight
void rms_norm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out);

// RMSNorm applied to each of `groups` consecutive slices of x (per-head q/k
// norms use head_dim slices; a whole-projection norm uses one group).
void rms_norm_groups(std::span<float> x, int groups, std::span<const float> weight, float eps);

// Rotary embedding, "rotate half" (NeoX) pairing (i, i + head_dim/2), as
// Llama/Qwen/Mixtral/OLMoE use it in transformers.
class Rope {
 public:
  Rope(int head_dim, double theta);
  void apply(std::span<float> x, int heads, int position) const;  // x: heads * head_dim, in place
  // cos and sin of every (position, pair) for positions 0..positions-1, as
  // float[positions][head_dim / 2][2], computed in double as apply() does:
  // the GPU decoders' RoPE tables.
  std::vector<float> cos_sin_table(int positions) const;

 private:
  void rotate(std::span<float> x, int heads, const std::vector<double>& cosines, const std::vector<double>& sines) const;
  int head_dim_;
  std::vector<double> inv_freq_;
  std::uint64_t id_;  // which Rope a thread's cached cos/sin belong to (addresses are reused)
};

void softmax(std::span<float> x);
// Greedy decoding's pick: the index of the largest finite logit (the first
// of equal ones), or -1 when none is finite. What every greedy token costs
// after its pass (a serial scan of the vocabulary): the sampler, the
// benchmarks and the probe's tuning phase (which times it) share it.
int greedy_token(std::span<const float> logits);
float silu(float x);
// gate[i] = silu(gate[i]) * up[i]: the SwiGLU between an FFN's gate/up and
// its down, on every CPU path (experts, dense MLPs, shared experts). Its exp
// is a polynomial the compiler vectorises, per instruction set and with the
// same bits on each (src/vector_math.cpp); silu within 2.2 ulp of the exact
// formula (tests/unit/forward_ops_test.cpp). silu() above computes the same
// values one at a time.
void swiglu(std::span<float> gate, std::span<const float> up);
// x[i] = e^(x[i] - shift) with swiglu's exp, vectorised: the CPU attention's
// softmax weights (libm's expf, one call per position, was 14% of a tiny
// model's 512-token prefill at one thread). Within 2 ulp of std::exp.
void exp_shifted(std::span<float> x, float shift);

// out += weight * y, element by element: the one place expert outputs are
// summed (the engine's and the CPU backend's weighted sums), so every caller
// rounds exactly alike.
void add_scaled(float weight, std::span<const float> y, std::span<float> out);

// How router probabilities become expert weights (see engine/model for which
// architecture uses which).
enum class RouterNorm {
  softmax_topk,          // softmax over all experts, keep the top-k probabilities (olmoe, qwen*_moe w/o norm_topk_prob)
  softmax_topk_renorm,   // ... then divide by their sum (mixtral, qwen*_moe with norm_topk_prob)
};

struct Routing {
  std::vector<int> experts;   // top-k, highest probability first
  std::vector<float> weights;
};

Routing route(std::span<const float> router_logits, int top_k, RouterNorm norm);

// The engine's attention before issue 13 (forward::attention in
// coli/forward/attention.h replaced it), kept as the baseline its benchmark
// compares with: one query position over `positions` cached f32 keys and
// values, scores in double, one thread per head.
// q: heads*head_dim; k_cache, v_cache: [positions][kv_heads*head_dim].
void attention_by_position(std::span<const float> q, std::span<const float> k_cache, std::span<const float> v_cache,
                           int positions, int heads, int kv_heads, int head_dim, std::span<float> out, int threads = 1);

}  // namespace coli::forward
