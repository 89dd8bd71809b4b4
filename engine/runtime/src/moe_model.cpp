#include "coli/runtime/moe_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "coli/backend/backend.h"
#include "coli/base/process_memory.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/forward/ops.h"
#include "coli/model/model_config.h"
#include "coli/model/tensor_layout.h"
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
  std::vector<std::vector<float>> k_cache, v_cache;
  std::unique_ptr<GpuRun> gpu;  // backend "vulkan": the decoder on the GPU
  std::unique_ptr<OpTimes> op_times;  // ModelOptions::op_timing on the CPU backend
  // scratch
  std::vector<float> h, q, k, v, attn, o, router_logits, moe_out, mlp_a, mlp_b, shared_out;

  Status load_layers();
  void attention_step(std::size_t l, std::span<float> x_t, int position);
  Status mlp_step(std::size_t l, std::span<float> xs, int count);
  Status forward_cpu(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits);
  void dense_mlp(const LayerWeights& w, std::span<const float> in, std::span<float> out);
  Status watch_rss();
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

void MoeModel::State::dense_mlp(const LayerWeights& w, std::span<const float> in, std::span<float> out) {
  mlp_a.resize(static_cast<std::size_t>(w.mlp_gate.rows));
  mlp_b.resize(mlp_a.size());
  backend->matmul(w.mlp_gate, in, mlp_a);
  backend->matmul(w.mlp_up, in, mlp_b);
  for (std::size_t i = 0; i < mlp_a.size(); ++i) mlp_a[i] = forward::silu(mlp_a[i]) * mlp_b[i];
  backend->matmul(w.mlp_down, mlp_a, out);
}

// Attention of one token at `position` for layer `l`; x += its output.
void MoeModel::State::attention_step(std::size_t l, std::span<float> x_t, int position) {
  const auto& c = config;
  const LayerWeights& w = layers[l];
  const int heads = static_cast<int>(c.num_attention_heads), kv_heads = static_cast<int>(c.num_key_value_heads);
  const int head_dim = static_cast<int>(c.head_dim);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::size_t kv_width = static_cast<std::size_t>(kv_heads) * head_dim;
  OpPhase phase(op_times.get(), Op::norm_rope);
  forward::rms_norm(x_t, w.input_norm, eps, h);
  phase.to(Op::attention_qkv);
  backend->matmul(w.q, h, q, w.q_bias);
  backend->matmul(w.k, h, k, w.k_bias);
  backend->matmul(w.v, h, v, w.v_bias);
  if (c.clip_qkv) {
    const float clip = static_cast<float>(*c.clip_qkv);
    for (auto* t : {&q, &k, &v}) for (float& value : *t) value = std::clamp(value, -clip, clip);
  }
  phase.to(Op::norm_rope);
  if (c.qk_norm == model::QkNorm::PerHead) {
    forward::rms_norm_groups(q, heads, w.q_norm, eps);
    forward::rms_norm_groups(k, kv_heads, w.k_norm, eps);
  } else if (c.qk_norm == model::QkNorm::FullProjection) {
    forward::rms_norm_groups(q, 1, w.q_norm, eps);
    forward::rms_norm_groups(k, 1, w.k_norm, eps);
  }
  rope->apply(q, heads, position);
  rope->apply(k, kv_heads, position);
  phase.to(Op::attention_core);
  std::copy(k.begin(), k.end(), k_cache[l].begin() + static_cast<std::ptrdiff_t>(position * kv_width));
  std::copy(v.begin(), v.end(), v_cache[l].begin() + static_cast<std::ptrdiff_t>(position * kv_width));
  forward::attention(q, k_cache[l], v_cache[l], position + 1, heads, kv_heads, head_dim, attn,
                     backend->props().threads);
  phase.to(Op::attention_output);
  backend->matmul(w.o, attn, o, w.o_bias);
  for (std::size_t i = 0; i < x_t.size(); ++i) x_t[i] += o[i];
}

// The MLP half of layer `l` for `count` tokens (rows of xs). MoE layers run
// in rounds sized by the expert store: each round leases the union of its
// tokens' experts once (each distinct expert is read once per round), then
// every token adds its experts in routing order, exactly as one by one.
Status MoeModel::State::mlp_step(std::size_t l, std::span<float> xs, int count) {
  const auto& c = config;
  const LayerWeights& w = layers[l];
  const std::size_t hidden = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  OpPhase phase(op_times.get(), Op::norm_rope);
  std::vector<float> normed(static_cast<std::size_t>(count) * hidden);
  for (int t = 0; t < count; ++t) {
    forward::rms_norm(xs.subspan(t * hidden, hidden), w.post_norm, eps, std::span(normed).subspan(t * hidden, hidden));
  }
  phase.to(Op::dense_mlp);
  if (w.moe_index < 0) {
    for (int t = 0; t < count; ++t) {
      dense_mlp(w, std::span(normed).subspan(t * hidden, hidden), moe_out);
      for (std::size_t i = 0; i < hidden; ++i) xs[t * hidden + i] += moe_out[i];
    }
    return Ok{};
  }
  phase.to(Op::router);
  std::vector<forward::Routing> routings;
  std::vector<float> expert_rows;  // per (token, expert) of a round: the FFN output
  for (int t = 0; t < count; ++t) {
    backend->matmul(w.router, std::span(normed).subspan(t * hidden, hidden), router_logits);
    routings.push_back(forward::route(router_logits, static_cast<int>(c.num_experts_per_tok),
                                      router_norm(c.router_normalization)));
    for (int expert : routings.back().experts) ++routing_counts[static_cast<std::size_t>(w.moe_index)][static_cast<std::size_t>(expert)];
  }
  const int round = experts.tokens_per_round(std::max(1, options.prefill_round_tokens));
  for (int first = 0; first < count; first += round) {
    const int last = std::min(count, first + round);
    std::vector<int> needed;
    for (int t = first; t < last; ++t) needed.insert(needed.end(), routings[t].experts.begin(), routings[t].experts.end());
    phase.to(Op::expert_io_wait);
    if (Status s = experts.begin(w.moe_index, needed); !s) return s;
    phase.to(Op::experts);
    // Experts run in the store's order (resident ones while the misses are
    // still being read); each (token, expert) output gets its own row, so
    // below every token still sums its experts in routing order, bit for bit.
    const std::size_t top_k = c.num_experts_per_tok;
    expert_rows.resize(static_cast<std::size_t>(last - first) * top_k * hidden);
    const auto row_index = [&](int t, std::size_t i) { return static_cast<int>(static_cast<std::size_t>(t - first) * top_k + i); };
    const auto row = [&](int t, std::size_t i) {
      return std::span(expert_rows).subspan(static_cast<std::size_t>(row_index(t, i)) * hidden, hidden);
    };
    // Two batches: the experts already resident (computed while the misses
    // are read), then the misses once they have landed.
    std::vector<ExpertStore::FfnTask> resident, missed;
    std::vector<int> missing;
    for (int e : experts.round_order(w.moe_index)) {
      const bool ready = experts.landed(w.moe_index, e);
      if (!ready) missing.push_back(e);
      for (int t = first; t < last; ++t) {
        for (std::size_t i = 0; i < routings[t].experts.size(); ++i) {
          if (routings[t].experts[i] != e) continue;
          (ready ? resident : missed).push_back({e, t, row_index(t, i)});
        }
      }
    }
    experts.ffn_batch(w.moe_index, normed, expert_rows, resident);
    phase.to(Op::expert_io_wait);
    for (int e : missing) {
      if (Status s = experts.wait(w.moe_index, e); !s) return s;
    }
    phase.to(Op::experts);
    experts.ffn_batch(w.moe_index, normed, expert_rows, missed);
    for (int t = first; t < last; ++t) {
      const auto h_t = std::span<const float>(normed).subspan(t * hidden, hidden);
      std::fill(moe_out.begin(), moe_out.end(), 0.0f);
      for (std::size_t i = 0; i < routings[t].experts.size(); ++i) {
        ExpertStore::add_scaled(routings[t].weights[i], row(t, i), moe_out);
      }
      if (w.has_shared) {
        phase.to(Op::dense_mlp);
        dense_mlp(w, h_t, shared_out);
        float gate_logit = 0;
        backend->matmul(w.shared_gate, h_t, std::span(&gate_logit, 1));
        const float gate = 1.0f / (1.0f + std::exp(-gate_logit));
        for (std::size_t i = 0; i < hidden; ++i) moe_out[i] += gate * shared_out[i];
        phase.to(Op::experts);
      }
      for (std::size_t i = 0; i < hidden; ++i) xs[t * hidden + i] += moe_out[i];
    }
    experts.end(w.moe_index);
  }
  return Ok{};
}

MoeModel::MoeModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
MoeModel::MoeModel(MoeModel&&) noexcept = default;
MoeModel& MoeModel::operator=(MoeModel&&) noexcept = default;
MoeModel::~MoeModel() = default;

Result<MoeModel> MoeModel::load(const std::filesystem::path& path, const ModelOptions& options) {
  auto state = std::make_unique<State>();
  state->options = options;
  auto reader = container::ContainerReader::open(path);
  if (!reader) return reader.error();
  state->reader = std::make_unique<container::ContainerReader>(std::move(*reader));
  auto config = model::parse_model_config(state->reader->index().config_json, path.string() + " (config)");
  if (!config) return config.error();
  if (Status s = model::check_engine_support(*config, path.string()); !s) return s.error();
  state->config = std::move(*config);
  const auto& c = state->config;
  if (c.rope_scaling.type != "default") {
    return make_error(path.string() + ": rope_scaling is not supported by the engine yet; convert a model without it");
  }
  if (options.backend != "cpu" && options.backend != "vulkan") {
    return make_error("backend '" + options.backend + "' is not one this engine runs (cpu, vulkan)");
  }
  // On the GPU the host keeps only the embedding table (its row lookups);
  // the decoder reads every other dense tensor from the container into VRAM.
  const bool on_gpu = options.backend == "vulkan";
  auto dense = DenseWeights::load(*state->reader, on_gpu ? std::function<bool(const std::string&)>(
                                                               [](const std::string& name) { return name == kEmbedding; })
                                                         : nullptr);
  if (!dense) return dense.error();
  state->dense = std::move(*dense);
  auto backend = backend::create_backend(cpu_backend_props(options));
  if (!backend) return backend.error();
  state->backend = std::move(*backend);
  // I/O threads inherit the creating thread's affinity: create them unpinned.
  if (Status s = kernels::cpu::release_openmp_team(); !s) return s.error();
  // With every expert in VRAM the host keeps no expert cache at all.
  std::vector<std::vector<int>> vram;
  if (on_gpu) {
    auto chosen = vram_experts_of(options, state->reader->index().experts);
    if (!chosen) return chosen.error();
    vram = std::move(*chosen);
  }
  const bool host_experts = !on_gpu || !every_expert_in_vram(vram, state->reader->index().experts);
  if (host_experts) {
    auto experts = ExpertStore::create(*state->reader, *state->backend, static_cast<int>(c.num_experts_per_tok),
                                       options.cache_capacity, options.pins, ExpertIo{options.io_threads, options.direct_io});
    if (!experts) return experts.error();
    state->experts = std::move(*experts);
  }
  state->stats.io_mode = state->experts.io_mode();
  if (!on_gpu) {
    if (Status s = state->load_layers(); !s) return s.error();
  }
  const auto& layout = state->reader->index().experts;
  state->routing_counts.assign(layout.layers, std::vector<std::uint64_t>(layout.experts, 0));

  if (!options.compute_pus.empty()) {
    if (Status s = kernels::cpu::pin_openmp_team(options.compute_pus); !s) return s.error();
  }
  state->stats.cpu_kernel = state->backend->props().cpu_kernel;
  state->rope = std::make_unique<forward::Rope>(static_cast<int>(c.head_dim), c.rope_theta);

  const std::size_t hidden = c.hidden_size, q_width = c.num_attention_heads * c.head_dim;
  const std::size_t kv_width = c.num_key_value_heads * c.head_dim;
  for (auto* buffer : {&state->h, &state->o, &state->moe_out, &state->shared_out}) buffer->resize(hidden);
  state->q.resize(q_width);
  state->attn.resize(q_width);
  state->k.resize(kv_width);
  state->v.resize(kv_width);
  state->router_logits.resize(c.num_experts);
  state->stats.backend = options.backend;
  state->stats.rss_watchdog_limit = options.rss_limit_bytes;
  if (on_gpu) {
    auto gpu = GpuRun::start(options, *state->reader, c, state->dense, std::move(vram),
                             host_experts ? &state->experts : nullptr);
    if (!gpu) return gpu.error();
    state->gpu = std::move(*gpu);
    state->stats.gpu = state->gpu->memory();
  } else {
    state->k_cache.assign(c.num_hidden_layers, std::vector<float>(static_cast<std::size_t>(options.max_context) * kv_width));
    state->v_cache = state->k_cache;
    state->stats.kv_cache_bytes = 2ull * c.num_hidden_layers * static_cast<std::uint64_t>(options.max_context) * kv_width * 4;
  }
  if (options.op_timing && !on_gpu) state->op_times = std::make_unique<OpTimes>();
  state->stats.dense_bytes = state->dense.bytes();
  state->stats.expert_cache_bytes = state->experts.slab_bytes();
  if (options.commit_expert_cache) state->experts.commit_slabs();
  return MoeModel(std::move(state));
}

// Layer by layer over all tokens (a prefill round per layer), so each
// layer's experts are leased once for many tokens.
Status MoeModel::State::forward_cpu(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits) {
  const int count = static_cast<int>(tokens.size());
  const OpPass pass(op_times.get(), count);
  const std::size_t hidden = config.hidden_size;
  std::vector<float> xs(static_cast<std::size_t>(count) * hidden);
  for (int t = 0; t < count; ++t) forward::dense_row(embed, tokens[static_cast<std::size_t>(t)], std::span(xs).subspan(t * hidden, hidden));
  for (std::size_t l = 0; l < layers.size(); ++l) {
    for (int t = 0; t < count; ++t) attention_step(l, std::span(xs).subspan(t * hidden, hidden), start_position + t);
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
  const Status computed = s.gpu ? s.gpu->forward(tokens, start_position, logits, s.routing_counts)
                                : s.forward_cpu(tokens, start_position, logits);
  if (!computed) return computed;
  s.stats.tokens += static_cast<std::uint64_t>(count);
  s.used = start_position + count;
  s.stats.expert_hits = s.experts.hits();
  s.stats.expert_misses = s.experts.misses();
  s.stats.expert_bytes_read = s.experts.bytes_read();
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
const ModelStats& MoeModel::stats() const { return state_->stats; }
OpTimes* MoeModel::op_times() { return state_->op_times.get(); }
const std::vector<std::vector<std::uint64_t>>& MoeModel::routing_counts() const { return state_->routing_counts; }

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
