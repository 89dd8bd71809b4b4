#include "coli/runtime/moe_model.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "coli/backend/backend.h"
#include "coli/base/pass_shape.h"  // kPassSlice, kParallelTokens
#include "coli/base/process_memory.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/forward/attention.h"
#include "coli/forward/kv_cache.h"
#include "coli/forward/ops.h"
#include "coli/runtime/op_timing.h"
#include "coli/model/model_config.h"
#include "coli/model/tensor_layout.h"
#include "cpu/parallel_for.h"
#include "cpu/thread_placement.h"
#include "dense_weights.h"
#include "expert_store.h"
#include "gpu_run.h"

namespace coli::runtime {
namespace {

using forward::DenseMatrix;

struct LayerWeights {
  std::vector<float> input_norm, post_norm, q_norm, k_norm;
  Linear q, k, v, o;
  std::vector<float> q_bias, k_bias, v_bias, o_bias;
  int moe_index = -1;  // index into the container's MoE layers; -1: dense MLP
  Linear router;
  Linear mlp_gate, mlp_up, mlp_down;  // dense layer or qwen2_moe shared expert
  Linear shared_gate;                 // qwen2_moe: sigmoid gate of the shared expert
  bool has_shared = false;
};

constexpr const char* kEmbedding = "model.embed_tokens.weight";

// The CPU backend as the options ask for it (kernel variant or "exact",
// threads, their PUs).
backend::BackendProps cpu_backend_props(const ModelOptions& options) {
  backend::BackendProps props;
  props.kind = backend::BackendKind::cpu;
  props.name = "cpu";
  props.unified_memory = true;
  props.cpu_kernel = options.cpu_kernel;
  props.threads = std::max(1, options.threads);
  props.compute_pus = options.compute_pus;
  return props;
}

// A team's size: its PUs when pinned, else the thread count (at least one).
int team_size(const CpuSet& pus, int threads) { return pus.empty() ? std::max(1, threads) : pus.size(); }

forward::RouterNorm router_norm(model::RouterNormalization n) {
  return n == model::RouterNormalization::SoftmaxTopK ? forward::RouterNorm::softmax_topk
                                                      : forward::RouterNorm::softmax_topk_renorm;
}

}  // namespace

struct MoeModel::State {
  std::unique_ptr<container::ContainerReader> reader;
  model::ModelConfig config;
  DenseWeights dense;
  std::unique_ptr<backend::Backend> backend;  // every matmul and expert batch; outlives the slots it made
  ExpertStore experts;
  std::vector<LayerWeights> layers;
  DenseMatrix embed;
  Linear lm_head;
  std::vector<float> final_norm;
  std::unique_ptr<forward::Rope> rope;
  ModelOptions options;
  ModelStats stats;
  int used = 0;  // KV positions filled
  std::vector<std::vector<std::uint64_t>> routing_counts;  // [MoE layer][expert], for the usage history
  experts::ReuseDistances reuse{1, 1};  // the CPU passes' LRU stack distances, for the usage history
  experts::RoutingTrace trace;          // the CPU passes' recent routings, for the usage history
  std::unique_ptr<OpTimes> op_times;  // ModelOptions::op_timing on the CPU backend
  forward::KvCache kv;  // every layer's K and V (CPU backend; the GPU keeps its own)
  std::unique_ptr<GpuRun> gpu;  // backend "vulkan" or "cuda": the decoder on the GPU
  // scratch, rows of every token of a pass
  std::vector<float> h, normed, q_rows, k_rows, v_rows, attn_rows, o_rows, router_rows, moe_out, mlp_a, mlp_b,
      shared_rows, shared_gates, expert_rows;

  // MoeModel::load's steps, in order.
  Status open(const std::filesystem::path& path);
  Result<std::vector<std::vector<int>>> load_weights(bool on_gpu, bool& host_experts);
  void start_routing_record();
  Status start_decoder(bool on_gpu, std::vector<std::vector<int>> vram, bool host_experts);
  Status preload_host_experts();
  Status load_layers();
  void attention_pass(std::size_t l, std::span<float> xs, int count, int first_position);
  void rotate_and_norm(const LayerWeights& w, std::span<float> q, std::span<float> k, std::span<float> v, int position);
  void store_kv(std::size_t l, int count, int first_position);
  void attend(std::size_t l, std::span<const float> q, int count, int first_position, std::span<float> out);
  Status mlp_step(std::size_t l, std::span<float> xs, int count);
  Status forward_cpu(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits);
  std::vector<forward::Routing> route_tokens(const LayerWeights& w, int count, bool with_shared_gate_up);
  void expert_batch(int moe_layer, std::span<const ExpertStore::FfnTask> tasks,
                    std::span<const backend::WeightedOutput> sums = {}, std::span<float> sum_into = {});
  Status moe_round(const LayerWeights& w, std::span<float> xs, int first, int last,
                   const std::vector<forward::Routing>& routings, bool shared_gate_up_done);
  void dense_mlp(const LayerWeights& w, std::span<const float> in, int count, std::span<float> out);
  void norm_rows(std::span<const float> xs, std::span<const float> weight, int count, std::vector<float>& out) const;
  // step(t) for t < count: on the backend's team from kParallelTokens on (prefill), else here (decode).
  template <class Step>
  void for_tokens(std::size_t count, const Step& step) const {
    kernels::cpu::parallel_for(count, backend->props().threads, count >= kParallelTokens, step);
  }
  std::vector<backend::MatmulOutput> mlp_gate_up(const LayerWeights& w, int count);
  void mlp_down(const LayerWeights& w, int count, std::span<float> out);
  Status watch_rss();
  Status use_thread_set(int count);
  Status prefetch_next_layer(std::size_t l, std::span<const float> xs, int count);
  std::vector<std::vector<int>> predicted;  // per MoE layer: experts the previous layer predicted
  std::vector<float> spec_normed, spec_logits;
  bool on_prefill_set = false;  // the team runs (and is pinned to) the prefill set now
  bool warned_floor = false;  // the watchdog said once that the cache cannot shrink further
  int layers_with_experts() const { return static_cast<int>(routing_counts.size()); }
};

Status MoeModel::State::load_layers() {
  const auto& c = config;
  auto get = [&](const std::string& name, Linear& out) -> Status {
    auto m = dense.linear(name);
    if (!m) return m.error();
    out = *m;
    return Ok{};
  };
  // A norm the container lacks (or holds at another width) would be read past its end.
  auto check_norm = [&](const std::string& name, const std::vector<float>& norm) -> Status {
    if (norm.size() == c.hidden_size) return Ok{};
    return make_error("the container's " + name + " has " + std::to_string(norm.size()) + " values, not hidden_size " +
                      std::to_string(c.hidden_size) + ": convert the model again");
  };
  auto embedding = dense.matrix(kEmbedding);
  if (!embedding) return embedding.error();
  embed = *embedding;
  if (Status s = get(c.tie_word_embeddings ? kEmbedding : "lm_head.weight", lm_head); !s) return s;
  final_norm = dense.vector("model.norm.weight");
  if (Status s = check_norm("model.norm.weight", final_norm); !s) return s;
  const auto& moe_layers = reader->index().experts.model_layers;
  const bool mixtral = c.architecture == model::Architecture::Mixtral;
  for (std::uint64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights w;
    w.input_norm = dense.vector(p + "input_layernorm.weight");
    w.post_norm = dense.vector(p + "post_attention_layernorm.weight");
    if (Status s = check_norm(p + "input_layernorm.weight", w.input_norm); !s) return s;
    if (Status s = check_norm(p + "post_attention_layernorm.weight", w.post_norm); !s) return s;
    for (auto [name, matrix] : {std::pair{"q", &w.q}, {"k", &w.k}, {"v", &w.v}, {"o", &w.o}}) {
      if (Status s = get(p + "self_attn." + name + "_proj.weight", *matrix); !s) return s;
    }
    w.q_bias = dense.vector(p + "self_attn.q_proj.bias");
    w.k_bias = dense.vector(p + "self_attn.k_proj.bias");
    w.v_bias = dense.vector(p + "self_attn.v_proj.bias");
    w.o_bias = dense.vector(p + "self_attn.o_proj.bias");
    w.q_norm = dense.vector(p + "self_attn.q_norm.weight");
    w.k_norm = dense.vector(p + "self_attn.k_norm.weight");
    const auto moe = std::find(moe_layers.begin(), moe_layers.end(), i);
    if (moe != moe_layers.end()) {
      w.moe_index = static_cast<int>(moe - moe_layers.begin());
      if (Status s = get(p + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"), w.router); !s) return s;
      if (c.has_shared_expert()) {
        w.has_shared = true;
        for (auto [name, matrix] : {std::pair{"gate", &w.mlp_gate}, {"up", &w.mlp_up}, {"down", &w.mlp_down}}) {
          if (Status s = get(p + "mlp.shared_expert." + name + "_proj.weight", *matrix); !s) return s;
        }
        if (Status s = get(p + "mlp.shared_expert_gate.weight", w.shared_gate); !s) return s;
      }
    } else {
      for (auto [name, matrix] : {std::pair{"gate", &w.mlp_gate}, {"up", &w.mlp_up}, {"down", &w.mlp_down}}) {
        if (Status s = get(p + "mlp." + name + "_proj.weight", *matrix); !s) return s;
      }
    }
    layers.push_back(std::move(w));
  }
  return Ok{};
}

// RMSNorm of each of the `count` hidden rows of xs with `weight`, into out.
void MoeModel::State::norm_rows(std::span<const float> xs, std::span<const float> weight, int count,
                                std::vector<float>& out) const {
  const std::size_t hidden = config.hidden_size, rows = static_cast<std::size_t>(count);
  out.resize(rows * hidden);
  for_tokens(rows, [&](std::size_t t) {
    forward::rms_norm(xs.subspan(t * hidden, hidden), weight, static_cast<float>(config.rms_norm_eps),
                      std::span(out).subspan(t * hidden, hidden));
  });
}

// The dense MLP (or qwen2_moe's shared expert) over `count` rows: gate and
// up in one call (mlp_gate_up), then SwiGLU and down (mlp_down).
void MoeModel::State::dense_mlp(const LayerWeights& w, std::span<const float> in, int count, std::span<float> out) {
  backend->matmul_rows(in, count, mlp_gate_up(w, count));
  mlp_down(w, count, out);
}

// Gate and up of `count` rows into mlp_a / mlp_b, and for a shared expert its
// gate logit into shared_gates: outputs for one matmul_rows over the same input.
std::vector<backend::MatmulOutput> MoeModel::State::mlp_gate_up(const LayerWeights& w, int count) {
  const std::size_t rows = static_cast<std::size_t>(count) * static_cast<std::size_t>(w.mlp_gate.rows);
  mlp_a.resize(rows);
  mlp_b.resize(rows);
  std::vector<backend::MatmulOutput> outputs = {{w.mlp_gate, mlp_a, {}}, {w.mlp_up, mlp_b, {}}};
  if (w.has_shared) {
    shared_gates.resize(static_cast<std::size_t>(count));
    outputs.push_back({w.shared_gate, shared_gates, {}});
  }
  return outputs;
}

void MoeModel::State::mlp_down(const LayerWeights& w, int count, std::span<float> out) {
  const std::size_t rows = static_cast<std::size_t>(count) * static_cast<std::size_t>(w.mlp_gate.rows);
  forward::swiglu(std::span(mlp_a).first(rows), std::span<const float>(mlp_b).first(rows));
  backend->matmul_rows(w.mlp_down, mlp_a, count, out);
}

// The attention half of layer `l` for `count` tokens at first_position..:
// every projection is one call over all the tokens (q, k and v together),
// the per-token steps (clip, q/k norms, rope) in between; xs += the output.
void MoeModel::State::attention_pass(std::size_t l, std::span<float> xs, int count, int first_position) {
  const auto& c = config;
  const LayerWeights& w = layers[l];
  const std::size_t hidden = c.hidden_size, rows = static_cast<std::size_t>(count);
  const std::size_t q_width = c.num_attention_heads * c.head_dim, kv_width = c.num_key_value_heads * c.head_dim;
  OpPhase phase(op_times.get(), Op::norm_rope);
  norm_rows(xs, w.input_norm, count, normed);
  q_rows.resize(rows * q_width);
  k_rows.resize(rows * kv_width);
  v_rows.resize(rows * kv_width);
  const backend::MatmulOutput qkv[] = {{w.q, q_rows, w.q_bias}, {w.k, k_rows, w.k_bias}, {w.v, v_rows, w.v_bias}};
  phase.to(Op::attention_qkv);
  backend->matmul_rows(normed, count, qkv);
  phase.to(Op::norm_rope);
  for_tokens(rows, [&](std::size_t t) {
    rotate_and_norm(w, std::span(q_rows).subspan(t * q_width, q_width), std::span(k_rows).subspan(t * kv_width, kv_width),
                    std::span(v_rows).subspan(t * kv_width, kv_width), first_position + static_cast<int>(t));
  });
  phase.to(Op::attention_core);
  store_kv(l, count, first_position);
  attn_rows.resize(rows * q_width);
  attend(l, q_rows, count, first_position, attn_rows);
  phase.to(Op::attention_output);
  o_rows.resize(rows * hidden);
  backend->matmul_rows(w.o, attn_rows, count, o_rows, w.o_bias);
  for_tokens(rows, [&](std::size_t t) {
    for (std::size_t i = t * hidden; i < (t + 1) * hidden; ++i) xs[i] += o_rows[i];
  });
}

// One token's q, k, v after the projections: clip, q/k norms, rope at `position`.
void MoeModel::State::rotate_and_norm(const LayerWeights& w, std::span<float> q, std::span<float> k, std::span<float> v,
                                      int position) {
  const auto& c = config;
  const int heads = static_cast<int>(c.num_attention_heads), kv_heads = static_cast<int>(c.num_key_value_heads);
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (c.clip_qkv) {
    const float clip = static_cast<float>(*c.clip_qkv);
    for (auto t : {q, k, v}) for (float& value : t) value = std::clamp(value, -clip, clip);
  }
  if (c.qk_norm == model::QkNorm::PerHead) {
    forward::rms_norm_groups(q, heads, w.q_norm, eps);
    forward::rms_norm_groups(k, kv_heads, w.k_norm, eps);
  } else if (c.qk_norm == model::QkNorm::FullProjection) {
    forward::rms_norm_groups(q, 1, w.q_norm, eps);
    forward::rms_norm_groups(k, 1, w.k_norm, eps);
  }
  rope->apply(q, heads, position);
  rope->apply(k, kv_heads, position);
}

// The KV cache: k_rows / v_rows of `count` tokens stored at first_position..
void MoeModel::State::store_kv(std::size_t l, int count, int first_position) {
  const std::size_t kv_width = config.num_key_value_heads * config.head_dim;
  // Each token its own position; f16/bf16 rounding is per value, so prefill's run across the team.
  for_tokens(static_cast<std::size_t>(count), [&](std::size_t t) {
    const std::size_t at = t * kv_width;
    kv.store(static_cast<int>(l), first_position + static_cast<int>(t), std::span<const float>(k_rows).subspan(at, kv_width),
             std::span<const float>(v_rows).subspan(at, kv_width));
  });
}

// Attention of `count` tokens at first_position.. of layer `l` (their K and
// V stored), q and out token-major: the one call into forward::attention.
void MoeModel::State::attend(std::size_t l, std::span<const float> q, int count, int first_position,
                             std::span<float> out) {
  forward::attention(kv, static_cast<int>(l), q, count, first_position, static_cast<int>(config.num_attention_heads),
                     out, backend->props().threads);
}

// The MLP half of layer `l` for `count` tokens (rows of xs). MoE layers run
// in rounds sized by the expert store: each round leases the union of its
// tokens' experts once (each distinct expert is read once per round), then
// every token adds its experts in routing order, exactly as one by one.
Status MoeModel::State::mlp_step(std::size_t l, std::span<float> xs, int count) {
  const auto& c = config;
  const LayerWeights& w = layers[l];
  const std::size_t hidden = c.hidden_size, rows = static_cast<std::size_t>(count);
  OpPhase phase(op_times.get(), Op::norm_rope);
  norm_rows(xs, w.post_norm, count, normed);
  if (w.moe_index < 0) {
    phase.to(Op::dense_mlp);
    for (std::size_t first = 0; first < rows; first += kPassSlice) {
      const std::size_t slice = std::min<std::size_t>(kPassSlice, rows - first);
      moe_out.resize(slice * hidden);
      dense_mlp(w, std::span<const float>(normed).subspan(first * hidden, slice * hidden), static_cast<int>(slice), moe_out);
      for_tokens(slice, [&](std::size_t t) {
        for (std::size_t i = t * hidden; i < (t + 1) * hidden; ++i) xs[first * hidden + i] += moe_out[i];
      });
    }
    return Ok{};
  }
  const int round = experts.tokens_per_round(std::max(1, options.prefill_round_tokens));
  // One round (every decode token): the shared expert's gate and up share the router's call.
  const bool shared_with_router = w.has_shared && count <= round;
  phase.to(Op::router);
  const std::vector<forward::Routing> routings = route_tokens(w, count, shared_with_router);
  phase.stop();  // moe_round times its own phases
  if (options.speculative_prefetch && count <= round) {
    if (Status s = prefetch_next_layer(l, xs, count); !s) return s;
  }
  for (int first = 0; first < count; first += round) {
    if (Status s = moe_round(w, xs, first, std::min(count, first + round), routings, shared_with_router); !s) return s;
  }
  return Ok{};
}

// Speculative prefetch: the next MoE layer's router on this layer's
// post-attention hidden state (xs, normed with the next layer's own
// post-attention norm: the residual stream changes little from one layer to
// the next), and reads started for its top-k experts that are not resident.
// They land in the next layer's cache while this layer's experts compute.
Status MoeModel::State::prefetch_next_layer(std::size_t l, std::span<const float> xs, int count) {
  std::size_t next = l + 1;
  while (next < layers.size() && layers[next].moe_index < 0) ++next;
  if (next >= layers.size()) return Ok{};
  const LayerWeights& w = layers[next];
  const auto& c = config;
  const std::size_t n_experts = c.num_experts, rows = static_cast<std::size_t>(count);
  norm_rows(xs, w.post_norm, count, spec_normed);
  spec_logits.resize(rows * n_experts);
  backend->matmul_rows(w.router, spec_normed, count, spec_logits);
  std::vector<int>& guess = predicted[static_cast<std::size_t>(w.moe_index)];
  guess.clear();
  for (std::size_t t = 0; t < rows; ++t) {
    const forward::Routing r = forward::route(std::span(spec_logits).subspan(t * n_experts, n_experts),
                                              static_cast<int>(c.num_experts_per_tok), router_norm(c.router_normalization));
    for (int e : r.experts) {
      if (std::find(guess.begin(), guess.end(), e) == guess.end()) guess.push_back(e);
    }
  }
  return experts.prefetch(w.moe_index, guess);
}

// The router over all `count` rows of `normed` in one call (with the shared
// expert's gate and up when asked: the same input), then each token's top-k.
std::vector<forward::Routing> MoeModel::State::route_tokens(const LayerWeights& w, int count, bool with_shared_gate_up) {
  const auto& c = config;
  const std::size_t n_experts = c.num_experts;
  router_rows.resize(static_cast<std::size_t>(count) * n_experts);
  std::vector<backend::MatmulOutput> outputs;
  if (with_shared_gate_up) outputs = mlp_gate_up(w, count);
  outputs.push_back({w.router, router_rows, {}});
  backend->matmul_rows(normed, count, outputs);
  // Each token's top-k on the team (a prompt's tokens are independent),
  // then the records in token order on this thread.
  std::vector<forward::Routing> routings(static_cast<std::size_t>(count));
  for_tokens(routings.size(), [&](std::size_t t) {
    routings[t] = forward::route(std::span(router_rows).subspan(t * n_experts, n_experts),
                                 static_cast<int>(c.num_experts_per_tok), router_norm(c.router_normalization));
  });
  for (const forward::Routing& routing : routings) {
    for (int expert : routing.experts) ++routing_counts[static_cast<std::size_t>(w.moe_index)][static_cast<std::size_t>(expert)];
    reuse.record(w.moe_index, routing.experts, count == 1);  // a single-token pass: a generated token
    trace.record(w.moe_index, routing.experts);
  }
  // How well the previous layer predicted these experts (speculative prefetch).
  std::vector<int>& guess = predicted[static_cast<std::size_t>(w.moe_index)];
  for (int e : guess) {
    const bool routed = std::any_of(routings.begin(), routings.end(), [&](const forward::Routing& r) {
      return std::find(r.experts.begin(), r.experts.end(), e) != r.experts.end();
    });
    ++stats.predicted_experts;
    stats.predicted_correct += routed ? 1 : 0;
  }
  guess.clear();
  return routings;
}

// One expert batch of a round (normed rows in, expert_rows out), kept with
// its wall time and each expert's rows where the op times keep batches.
void MoeModel::State::expert_batch(int moe_layer, std::span<const ExpertStore::FfnTask> tasks,
                                   std::span<const backend::WeightedOutput> sums, std::span<float> sum_into) {
  if (!op_times || !op_times->keeps_batches() || tasks.empty()) {
    experts.ffn_batch(moe_layer, normed, expert_rows, tasks, sums, sum_into);
    return;
  }
  const auto start = OpPhase::Clock::now();
  experts.ffn_batch(moe_layer, normed, expert_rows, tasks, sums, sum_into);
  ExpertBatchTiming batch{moe_layer, std::chrono::duration<double>(OpPhase::Clock::now() - start).count(), {}};
  for (const ExpertStore::FfnTask& task : tasks) {  // the store's order: an expert's tasks are adjacent
    if (batch.expert_rows.empty() || batch.expert_rows.back().first != task.expert) batch.expert_rows.emplace_back(task.expert, 0);
    ++batch.expert_rows.back().second;
  }
  op_times->add_batch(std::move(batch));
}

// Tokens [first, last) of an MoE layer: lease their experts, run the FFNs
// (resident experts while the misses are read, then the misses), the shared
// expert, and add each token's sum to xs.
Status MoeModel::State::moe_round(const LayerWeights& w, std::span<float> xs, int first, int last,
                                  const std::vector<forward::Routing>& routings, bool shared_gate_up_done) {
  const std::size_t hidden = config.hidden_size, top_k = config.num_experts_per_tok;
  std::vector<int> needed;
  for (int t = first; t < last; ++t) needed.insert(needed.end(), routings[t].experts.begin(), routings[t].experts.end());
  OpPhase phase(op_times.get(), Op::expert_io_wait);
  if (Status s = experts.begin(w.moe_index, needed); !s) return s;
  phase.to(Op::experts);
  // Experts run in the store's order; each (token, expert) output gets its
  // own row, so below every token still sums its experts in routing order, bit for bit.
  // Kept between rounds: a fresh 32 MiB vector per layer and round was
  // page-faulted and zeroed again each time (every row is written below).
  expert_rows.resize(static_cast<std::size_t>(last - first) * top_k * hidden);
  const auto row_index = [&](int t, std::size_t i) { return static_cast<int>(static_cast<std::size_t>(t - first) * top_k + i); };
  std::vector<ExpertStore::FfnTask> resident, missed;
  std::vector<int> missing;
  for (int e : experts.round_order(w.moe_index)) {
    const bool ready = experts.landed(w.moe_index, e);
    if (!ready) missing.push_back(e);
    for (int t = first; t < last; ++t) {
      for (std::size_t i = 0; i < routings[t].experts.size(); ++i) {
        if (routings[t].experts[i] == e) (ready ? resident : missed).push_back({e, t, row_index(t, i)});
      }
    }
  }
  // One batch with nothing after it (every expert resident, no shared
  // expert): the backend's threads add each token's weighted sum to xs,
  // in routing order as below, instead of the calling thread afterwards.
  const bool sums_in_batch = missing.empty() && !w.has_shared;
  std::vector<backend::WeightedOutput> sums;
  for (int t = first; t < last && sums_in_batch; ++t) {
    for (std::size_t i = 0; i < routings[t].experts.size(); ++i) sums.push_back({t, row_index(t, i), routings[t].weights[i]});
  }
  expert_batch(w.moe_index, resident, sums, xs);
  if (sums_in_batch) {
    experts.end(w.moe_index);
    return Ok{};
  }
  phase.to(Op::expert_io_wait);
  for (int e : missing) {
    if (Status s = experts.wait(w.moe_index, e); !s) return s;
  }
  phase.to(Op::experts);
  expert_batch(w.moe_index, missed);
  const int round_count = last - first;
  if (w.has_shared) {
    phase.to(Op::dense_mlp);
    shared_rows.resize(static_cast<std::size_t>(round_count) * hidden);
    if (!shared_gate_up_done) {
      backend->matmul_rows(std::span<const float>(normed).subspan(first * hidden, round_count * hidden), round_count,
                           mlp_gate_up(w, round_count));
    }
    mlp_down(w, round_count, shared_rows);
    phase.to(Op::experts);
  }
  // Each token adds its experts in routing order (then the shared expert).
  for_tokens(static_cast<std::size_t>(round_count), [&](std::size_t index) {
    const int t = first + static_cast<int>(index);
    thread_local std::vector<float> sum;
    sum.assign(hidden, 0.0f);
    for (std::size_t i = 0; i < routings[t].experts.size(); ++i) {
      const auto row = std::span<const float>(expert_rows).subspan(static_cast<std::size_t>(row_index(t, i)) * hidden, hidden);
      forward::add_scaled(routings[t].weights[i], row, sum);
    }
    if (w.has_shared) {
      const float gate = 1.0f / (1.0f + std::exp(-shared_gates[static_cast<std::size_t>(t - first)]));
      const float* shared_out = shared_rows.data() + static_cast<std::size_t>(t - first) * hidden;
      for (std::size_t i = 0; i < hidden; ++i) sum[i] += gate * shared_out[i];
    }
    for (std::size_t i = 0; i < hidden; ++i) xs[t * hidden + i] += sum[i];
  });
  experts.end(w.moe_index);
  return Ok{};
}

MoeModel::MoeModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
MoeModel::MoeModel(MoeModel&&) noexcept = default;
MoeModel& MoeModel::operator=(MoeModel&&) noexcept = default;
MoeModel::~MoeModel() = default;

// The container and its config, checked for what this engine runs.
Status MoeModel::State::open(const std::filesystem::path& path) {
  auto opened = container::ContainerReader::open(path);
  if (!opened) return opened.error();
  reader = std::make_unique<container::ContainerReader>(std::move(*opened));
  reader->release_runtime_files();  // the tokenizer is the caller's (coli run loads it apart)
  auto parsed = model::parse_model_config(reader->index().config_json, path.string() + " (config)");
  if (!parsed) return parsed.error();
  if (Status s = model::check_engine_support(*parsed, path.string()); !s) return s.error();
  config = std::move(*parsed);
  if (config.rope_scaling.type != "default") {
    return make_error(path.string() + ": rope_scaling is not supported by the engine yet; convert a model without it");
  }
  if (options.backend != "cpu" && options.backend != "vulkan" && options.backend != "cuda") {
    return make_error("backend '" + options.backend + "' is not one this engine runs (cpu, vulkan, cuda)");
  }
  return Ok{};
}

// The host's dense weights (on the GPU only the embedding table, for its row lookups: the decoder
// reads every other dense tensor from the container into VRAM), the backend, and the expert store
// (none with every expert in VRAM: host_experts false). Returns the experts each MoE layer keeps in VRAM.
Result<std::vector<std::vector<int>>> MoeModel::State::load_weights(bool on_gpu, bool& host_experts) {
  auto loaded = DenseWeights::load(*reader, on_gpu ? std::function<bool(const std::string&)>(
                                                         [](const std::string& name) { return name == kEmbedding; })
                                                   : nullptr);
  if (!loaded) return loaded.error();
  dense = std::move(*loaded);
  auto created = backend::create_backend(cpu_backend_props(options));
  if (!created) return created.error();
  backend = std::move(*created);
  // I/O threads inherit the creating thread's affinity: create them unpinned.
  if (Status s = kernels::cpu::release_openmp_team(); !s) return s.error();
  std::vector<std::vector<int>> vram;
  if (on_gpu) {
    auto chosen = vram_experts_of(options, reader->index().experts);
    if (!chosen) return chosen.error();
    vram = std::move(*chosen);
  }
  host_experts = !on_gpu || !every_expert_in_vram(vram, reader->index().experts);
  if (host_experts) {
    auto store = ExpertStore::create(*reader, *backend, static_cast<int>(config.num_experts_per_tok), options.cache_capacity,
                                     options.pins,
                                     ExpertIo{options.io_threads, options.direct_io, team_size(options.compute_pus, options.threads)});
    if (!store) return store.error();
    experts = std::move(*store);
  }
  stats.io_mode = experts.io_mode();
  stats.experts_stream = experts.experts_stream();
  if (!on_gpu) {
    if (Status s = load_layers(); !s) return s.error();
  }
  return vram;
}

// What the passes keep of their routings for the usage history, and the layers' predictions.
void MoeModel::State::start_routing_record() {
  const auto& layout = reader->index().experts;
  routing_counts.assign(layout.layers, std::vector<std::uint64_t>(layout.experts, 0));
  reuse = experts::ReuseDistances(static_cast<int>(layout.layers), static_cast<int>(layout.experts));
  if (auto created = experts::RoutingTrace::create(static_cast<int>(layout.layers), static_cast<int>(config.num_experts_per_tok))) {
    trace = std::move(*created);
  }
  predicted.assign(layout.layers, {});
  // Prefetching pays only when experts stream.
  options.speculative_prefetch = options.speculative_prefetch && experts.experts_stream();
}

// Every expert when all are resident; the usage history's most used where
// experts stream (ModelOptions::preload_by_use), as many as there are slots.
Status MoeModel::State::preload_host_experts() {
  if (!experts.experts_stream()) {
    if (Status s = experts.load_every_expert(); !s) return s;
    stats.preloaded_experts = static_cast<std::uint64_t>(config.num_experts) * static_cast<std::uint64_t>(experts.moe_layers());
    return Ok{};
  }
  if (options.preload_by_use.empty()) return Ok{};
  if (Status s = experts.load_experts(options.preload_by_use); !s)
    return make_error("reading the usage history's most used experts at load: " + s.error().message);
  for (const auto& layer : options.preload_by_use) stats.preloaded_experts += layer.size();
  return Ok{};
}

// The pinned team, RoPE and scratch, then the GPU decoder or the host's KV cache; the expert cache
// committed or preloaded as asked.
Status MoeModel::State::start_decoder(bool on_gpu, std::vector<std::vector<int>> vram, bool host_experts) {
  if (!options.compute_pus.empty()) {
    if (Status s = kernels::cpu::pin_openmp_team(options.compute_pus); !s) return s.error();
  }
  const auto& c = config;
  stats.cpu_kernel = backend->props().cpu_kernel;
  rope = std::make_unique<forward::Rope>(static_cast<int>(c.head_dim), c.rope_theta);
  h.resize(c.hidden_size);
  stats.backend = options.backend;
  stats.rss_watchdog_limit = options.rss_limit_bytes;
  if (on_gpu) {
    auto started = GpuRun::start(options, *reader, c, dense, std::move(vram), host_experts ? &experts : nullptr);
    if (!started) return started.error();
    gpu = std::move(*started);
    stats.gpu = gpu->memory();
  } else {
    kv = forward::KvCache(static_cast<int>(c.num_hidden_layers), static_cast<int>(c.num_key_value_heads),
                          static_cast<int>(c.head_dim), options.max_context, options.kv_type);
    stats.kv_cache_bytes = kv.bytes();
    stats.kv_type = options.kv_type;
  }
  stats.dense_bytes = dense.bytes();
  stats.expert_cache_bytes = experts.slab_bytes();
  if (options.commit_expert_cache) experts.commit_slabs();
  if (options.preload_experts && host_experts) {
    if (Status s = preload_host_experts(); !s) return s.error();
  }
  if (options.op_timing && !on_gpu) op_times = std::make_unique<OpTimes>();
  return Ok{};
}

Result<MoeModel> MoeModel::load(const std::filesystem::path& path, const ModelOptions& options) {
  auto state = std::make_unique<State>();
  state->options = options;
  if (Status s = state->open(path); !s) return s.error();
  const bool on_gpu = options.backend == "vulkan" || options.backend == "cuda";
  bool host_experts = true;
  auto vram = state->load_weights(on_gpu, host_experts);
  if (!vram) return vram.error();
  state->start_routing_record();
  if (Status s = state->start_decoder(on_gpu, std::move(*vram), host_experts); !s) return s.error();
  return MoeModel(std::move(state));
}

namespace {

// "2 threads on PUs 0-1" / "2 threads, not pinned".
std::string thread_set_text(int threads, const CpuSet& pus) {
  return std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
         (pus.empty() ? ", not pinned" : " on PUs " + pus.to_list());
}

}  // namespace

// A pass of several tokens runs on the prefill set when the options carry
// one, a single token on the decode set. The team is re-pinned and resized
// only when the phase changes: at most once per forward call, and not at
// all while decoding (libgomp rebuilds its team when a region's size differs).
Status MoeModel::State::use_thread_set(int count) {
  const bool prefill = count > 1 && (options.prefill_threads > 0 || !options.prefill_pus.empty());
  const CpuSet& pus = prefill ? options.prefill_pus : options.compute_pus;
  const int threads = team_size(pus, prefill ? options.prefill_threads : options.threads);
  if (prefill != on_prefill_set) {
    const Status placed = pus.empty() ? kernels::cpu::release_openmp_team() : kernels::cpu::pin_openmp_team(pus);
    if (!placed) return placed;
    backend->set_threads(threads);
    on_prefill_set = prefill;
  }
  std::string& phase_set = count > 1 ? stats.prefill_thread_set : stats.decode_thread_set;
  if (phase_set.empty()) phase_set = thread_set_text(threads, pus) + (prefill ? " (prefill set)" : " (decode set)");
  return Ok{};
}

// Layer by layer over all tokens (a prefill round per layer), so each
// layer's experts are leased once for many tokens.
Status MoeModel::State::forward_cpu(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits) {
  const int count = static_cast<int>(tokens.size());
  const OpPass pass(op_times.get(), count);
  if (Status s = use_thread_set(count); !s) return s;
  trace.begin_pass(count, start_position);
  const std::size_t hidden = config.hidden_size;
  std::vector<float> xs(static_cast<std::size_t>(count) * hidden);
  for (int t = 0; t < count; ++t) forward::dense_row(embed, tokens[static_cast<std::size_t>(t)], std::span(xs).subspan(t * hidden, hidden));
  for (std::size_t l = 0; l < layers.size(); ++l) {
    // In slices of the prompt, so the per-token scratch stays bounded
    // (the plan prices only the hidden rows per prompt token).
    for (int first = 0; first < count; first += kPassSlice) {
      const int slice = std::min(kPassSlice, count - first);
      attention_pass(l, std::span(xs).subspan(first * hidden, slice * hidden), slice, start_position + first);
    }
    if (Status st = mlp_step(l, xs, count); !st) return st;
  }
  OpPhase phase(op_times.get(), Op::norm_rope);
  forward::rms_norm(std::span(xs).subspan((count - 1) * hidden, hidden), final_norm,
                    static_cast<float>(config.rms_norm_eps), h);
  phase.to(Op::lm_head);
  backend->matmul(lm_head, h, logits);
  return Ok{};
}

Status MoeModel::forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits) {
  State& s = *state_;
  const int count = static_cast<int>(tokens.size());
  if (count == 0) return make_error("forward needs at least one token");
  if (start_position < 0 || start_position + count > s.options.max_context) {
    return make_error("context of " + std::to_string(start_position + count) + " tokens exceeds --ctx " +
                      std::to_string(s.options.max_context));
  }
  for (std::int32_t token : tokens) {
    if (token < 0 || static_cast<std::uint64_t>(token) >= s.config.vocab_size) {
      return make_error("token id " + std::to_string(token) + " is outside the vocabulary");
    }
  }
  s.experts.begin_pass(count == 1);  // a generated token's read rounds are priced apart from a prompt's
  const auto pass_start = std::chrono::steady_clock::now();
  const Status computed = s.gpu ? s.gpu->forward(tokens, start_position, logits, s.routing_counts)
                                : s.forward_cpu(tokens, start_position, logits);
  if (!computed) return computed;
  if (!s.gpu) s.experts.end_pass(std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count());
  // A prompt's batches change what the decoder reports (a hybrid prefill's placements and costs).
  if (s.gpu && count > 1) s.stats.gpu.kernels = s.gpu->memory().kernels;
  s.stats.tokens += static_cast<std::uint64_t>(count);
  s.used = start_position + count;
  s.stats.expert_hits = s.experts.hits();
  s.stats.expert_misses = s.experts.misses();
  s.stats.expert_bytes_read = s.experts.bytes_read();
  s.stats.expert_read_seconds = s.experts.read_seconds();
  s.stats.expert_reads_timed = s.experts.timed_reads();
  s.stats.expert_read_rounds = s.experts.read_rounds();
  s.stats.prefetch_reads = s.experts.prefetched();
  s.stats.prefetch_reads_used = s.experts.prefetch_used();
  return s.watch_rss();
}

// The plan priced every component; when the process still grows past the
// plan plus its margin (an allocator, a library, a driver the plan did not
// see: field note 5), give expert-cache slots back rather than be OOM-killed.
Status MoeModel::State::watch_rss() {
  const std::uint64_t limit = options.rss_limit_bytes;
  if (limit == 0) return Ok{};
  const std::uint64_t rss = coli::process_resident_bytes();
  if (rss <= limit) return Ok{};
  const std::uint64_t per_slot = static_cast<std::uint64_t>(layers_with_experts()) * experts.slot_stride();
  const auto wanted = static_cast<int>((rss - limit + per_slot - 1) / std::max<std::uint64_t>(per_slot, 1));
  const int retirable = experts.retirable_slots();
  auto released = experts.retire_slots(std::min(wanted, retirable));
  if (!released) return released.error();
  stats.expert_cache_bytes = experts.slab_bytes();
  std::string message = "RSS " + format_bytes(rss) + " is past the plan's limit " + format_bytes(limit) + ": ";
  if (*released > 0) {
    ++stats.rss_watchdog_shrinks;
    stats.rss_watchdog_released += *released;
    message += "gave " + std::to_string(std::min(wanted, retirable)) + " expert-cache slot(s) per layer back (" +
               format_bytes(*released) + "); the cache now holds " + format_bytes(stats.expert_cache_bytes);
  } else {
    message += "the expert cache is already at top_k evictable slots per layer and cannot shrink further; "
               "re-plan with a smaller --ctx or --ram";
  }
  if (options.on_warning && (*released > 0 || !warned_floor)) options.on_warning(message);
  warned_floor = warned_floor || *released == 0;
  return Ok{};
}

void MoeModel::reset() { state_->used = 0; }
int MoeModel::vocab_size() const { return static_cast<int>(state_->config.vocab_size); }
int MoeModel::context_used() const { return state_->used; }
int MoeModel::max_context() const { return state_->options.max_context; }
const ModelStats& MoeModel::stats() const { return state_->stats; }
OpTimes* MoeModel::op_times() { return state_->op_times.get(); }
const std::vector<std::vector<std::uint64_t>>& MoeModel::routing_counts() const { return state_->routing_counts; }
const std::vector<std::vector<std::uint64_t>>& MoeModel::reuse_distances() const { return state_->reuse.counts(); }
const std::vector<std::vector<std::uint64_t>>& MoeModel::decode_reuse_distances() const {
  return state_->reuse.decode_counts();
}
const experts::RoutingTrace& MoeModel::routing_trace() const { return state_->trace; }

namespace {

ModelShape shape_of(const container::ContainerReader& reader, const model::ModelConfig& config) {
  // The same identity inputs as the planner's (canonical config, expected
  // tensor names), so a plan, a run and a usage history recognise each other.
  const auto& layout = reader.index().experts;
  std::vector<std::string> names;
  for (const model::ExpectedTensor& t : model::expected_tensors(config)) names.push_back(t.name);
  return ModelShape{static_cast<int>(layout.layers), static_cast<int>(layout.experts),
                    static_cast<int>(config.num_experts_per_tok),
                    model::canonical_config_json(reader.index().config_json), std::move(names),
                    layout.format, reader.index().dense_format()};
}

}  // namespace

experts::UsageHistoryKey usage_history_key(const ModelShape& shape) {
  return {shape.moe_layers, shape.experts, shape.top_k, experts::usage_model_identity(shape.config_json, shape.tensor_names)};
}

Result<experts::UsageHistory> usage_history_of(const MoeModel& model, const experts::ReadRounds* rounds_before) {
  auto history = experts::UsageHistory::create(usage_history_key(model.shape()));
  if (!history) return history.error();
  if (Status s = history->add_counts(model.routing_counts(), model.stats().tokens); !s) return s.error();
  if (Status s = history->add_reuse(model.reuse_distances()); !s) return s.error();
  if (Status s = history->add_decode_reuse(model.decode_reuse_distances()); !s) return s.error();
  if (Status s = history->add_trace(model.routing_trace()); !s) return s.error();
  const experts::ReadRounds& rounds = model.stats().expert_read_rounds;
  if (Status s = history->set_read_rounds(rounds_before ? experts::ReadRounds::between(*rounds_before, rounds) : rounds); !s)
    return s.error();
  return history;
}

Result<ModelShape> MoeModel::read_shape(const std::filesystem::path& path) {
  auto reader = container::ContainerReader::open(path);
  if (!reader) return reader.error();
  auto config = model::parse_model_config(reader->index().config_json, path.string() + " (config)");
  if (!config) return config.error();
  if (Status s = model::check_engine_support(*config, path.string()); !s) return s.error();
  return shape_of(*reader, *config);
}

ModelShape MoeModel::shape() const { return shape_of(*state_->reader, state_->config); }


}  // namespace coli::runtime
