#include "cuda/cuda_step.h"

#include <cmath>
#include <vector>

#include "coli/forward/ops.h"
#include "cuda/cuda_layout.h"
#include "cuda/kernel_launch.h"

namespace coli::cuda {
namespace {

namespace k = kernels::cuda::decoder;
using kernels::cuda::ExpertChoice;

using Recorder = LaunchRecorder;

std::string matvec_name(const Matrix& m) { return "matvec " + std::string(name_of(m.format)); }

Status matvec(Recorder& r, const Matrix& m, const float* x, float* y, const float* bias = nullptr, bool accumulate = false) {
  return r.check(matvec_name(m), k::matvec(r.stream(), m, x, y, bias, accumulate));
}

// q, k and v of h: one launch when they share a format and cols (always,
// for the containers coli convert writes), else three.
Status qkv(Recorder& r, const CudaLayer& w, StepBuffers& b) {
  if (w.q.format == w.k.format && w.q.format == w.v.format && w.q.cols == w.k.cols && w.q.cols == w.v.cols) {
    k::Matvecs m;
    m.w[0] = w.q, m.w[1] = w.k, m.w[2] = w.v;
    m.y[0] = at(b.q), m.y[1] = at(b.k), m.y[2] = at(b.v);
    m.bias[0] = w.q_bias, m.bias[1] = w.k_bias, m.bias[2] = w.v_bias;
    m.count = 3;
    return r.check("matvec q/k/v " + std::string(name_of(w.q.format)), k::matvecs(r.stream(), m, at(b.h)));
  }
  for (Status s : {matvec(r, w.q, at(b.h), at(b.q), w.q_bias), matvec(r, w.k, at(b.h), at(b.k), w.k_bias),
                   matvec(r, w.v, at(b.h), at(b.v), w.v_bias)}) {
    if (!s) return s;
  }
  return Ok{};
}

Status attention_block(Recorder& r, const model::ModelConfig& c, const CudaLayer& w, StepBuffers& b, int layer) {
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const int hidden = static_cast<int>(c.hidden_size);
  if (Status s = r.check("rms_norm", k::rms_norm(r.stream(), at(b.x), w.input_norm, at(b.h), hidden, eps)); !s) return s;
  if (Status s = qkv(r, w, b); !s) return s;
  const AttentionArgs args = attention_args(c, w, b, layer, at(b.q), at(b.k), at(b.v), at(b.attn), at(b.scores));
  for (Status s : {r.check("qk_prep", k::qk_prep(r.stream(), args.prep)),
                   r.check("attention", k::attention(r.stream(), args.attention)),
                   matvec(r, w.o, at(b.attn), at(b.x), w.o_bias, true)}) {
    if (!s) return s;
  }
  return Ok{};
}

// SwiGLU MLP of h: added to x (a dense layer) or written to shared_out.
Status mlp_block(Recorder& r, const CudaLayer& w, StepBuffers& b) {
  const bool dense = w.moe < 0;
  if (Status s = r.check("swiglu " + std::string(name_of(w.mlp_gate.format)),
                         k::swiglu(r.stream(), w.mlp_gate, w.mlp_up, at(b.h), at(b.mlp_a)));
      !s) {
    return s;
  }
  return matvec(r, w.mlp_down, at(b.mlp_a), dense ? at(b.x) : at(b.shared_out), nullptr, dense);
}

// h = the post-attention RMSNorm of x, then the router's choice: one launch
// for float routers (norm_route, its rows over several blocks), else
// rms_norm, the router's matvec and route_topk.
Status norm_and_route(Recorder& r, const model::ModelConfig& c, const CudaLayer& w, StepBuffers& b, const k::Route& route) {
  const int hidden = static_cast<int>(c.hidden_size);
  const auto eps = static_cast<float>(c.rms_norm_eps);
  if (k::norm_route_fits(w.router, hidden)) {
    const k::NormRoute fused{at(b.x), w.post_norm, at(b.h), hidden, eps, w.router, route, at<unsigned>(b.arrivals),
                             at(b.router_logits)};
    return r.check("norm_route " + std::string(name_of(w.router.format)), k::norm_route(r.stream(), fused));
  }
  for (Status s : {r.check("rms_norm", k::rms_norm(r.stream(), at(b.x), w.post_norm, at(b.h), hidden, eps)),
                   matvec(r, w.router, at(b.h), at(b.router_logits)), r.check("route_topk", k::route_topk(r.stream(), route))}) {
    if (!s) return s;
  }
  return Ok{};
}

Status moe_block(Recorder& r, const model::ModelConfig& c, const CudaWeights& weights, const CudaLayer& w, StepBuffers& b,
                 StepSegments& segments) {
  const int experts = static_cast<int>(c.num_experts);
  const int top_k = static_cast<int>(c.num_experts_per_tok);
  const auto moe = static_cast<std::size_t>(w.moe);
  const bool hybrid = weights.experts.slot_counts[moe] < experts;
  auto* choices = at<ExpertChoice>(b.choices, moe * static_cast<std::size_t>(top_k));
  // As the CPU engine: every normalisation but SoftmaxTopK renormalises the chosen k.
  const k::Route route{at(b.router_logits), at<const int>(weights.experts.slot_tables, moe * experts), choices,
                       hybrid ? at<int>(b.ids) : nullptr, at<unsigned>(b.counts, moe * experts), experts, top_k,
                       c.router_normalization != model::RouterNormalization::SoftmaxTopK};
  if (Status s = norm_and_route(r, c, w, b, route); !s) return s;
  // The host computes the choices without a VRAM slot between two segments.
  if (hybrid) {
    if (Status s = segments.end(w.moe); !s) return s;
  }
  if (w.has_shared) {
    if (Status s = mlp_block(r, w, b); !s) return s;
    if (Status s = matvec(r, w.shared_gate, at(b.h), at(b.shared_gate)); !s) return s;
  }
  const k::Experts e{weights.experts.layout, at<const std::uint8_t>(weights.experts.slabs[moe]),
                     weights.experts.slot_counts[moe], choices, top_k, hybrid ? at<const float>(b.host_rows) : nullptr};
  const std::string format(name_of(e.layout.format));
  if (Status s = r.check("expert_gate_up " + format, k::expert_gate_up(r.stream(), e, at(b.h), at(b.act))); !s) return s;
  return r.check("expert_down_add " + format,
                 k::expert_down_add(r.stream(), e, at(b.act), w.has_shared ? at(b.shared_out) : nullptr,
                                    w.has_shared ? at(b.shared_gate) : nullptr, at(b.x)));
}

}  // namespace

AttentionArgs attention_args(const model::ModelConfig& c, const CudaLayer& w, StepBuffers& step, int layer, float* q,
                             float* k, float* v, float* out, float* scores) {
  const int kv_width = static_cast<int>(c.num_key_value_heads * c.head_dim);
  const std::size_t kv_layer = static_cast<std::size_t>(step.context) * kv_width;
  float* k_cache = at(step.kv, 2 * static_cast<std::size_t>(layer) * kv_layer);
  AttentionArgs args;
  k::QkPrep& prep = args.prep;
  prep.q = q;
  prep.k = k;
  prep.v = v;
  prep.k_cache = k_cache;
  prep.v_cache = k_cache + kv_layer;
  prep.q_norm = w.q_norm;
  prep.k_norm = w.k_norm;
  prep.rope = at(step.rope);
  prep.position = at<const int>(step.position);
  prep.heads = static_cast<int>(c.num_attention_heads);
  prep.kv_heads = static_cast<int>(c.num_key_value_heads);
  prep.head_dim = static_cast<int>(c.head_dim);
  prep.norm_mode = c.qk_norm == model::QkNorm::PerHead ? 1 : c.qk_norm == model::QkNorm::FullProjection ? 2 : 0;
  prep.clip = c.clip_qkv ? static_cast<float>(*c.clip_qkv) : 0.0f;
  prep.eps = static_cast<float>(c.rms_norm_eps);
  args.attention = k::Attention{q, prep.k_cache, prep.v_cache, out, scores, prep.position, prep.heads, prep.kv_heads,
                                prep.head_dim, step.context, static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)))};
  return args;
}

std::uint64_t StepBuffers::activation_bytes() const {
  std::uint64_t sum = 0;
  for (const DeviceBuffer* d : {&x, &h, &q, &k, &v, &attn, &scores, &mlp_a, &router_logits, &act, &shared_out,
                                &shared_gate, &final_h, &logits, &position, &choices, &counts, &ids, &host_rows, &rope,
                                &arrivals}) {
    sum += d->bytes();
  }
  return sum;
}

Result<StepBuffers> make_step_buffers(const model::ModelConfig& c, const CudaWeights& w, int context) {
  static_assert(static_cast<u64>(k::kAttentionChunk) == kLayoutAttentionChunk, "cuda_layout.h prices attention's chunks");
  StepBuffers b;
  b.context = context;
  const StepBufferBytes n = step_buffer_bytes(c, w.experts.slabs.size(), static_cast<u64>(w.lm_head.rows),
                                              static_cast<u64>(context));
  const std::pair<DeviceBuffer*, u64> sizes[] = {
      {&b.x, n.x}, {&b.h, n.h}, {&b.q, n.q}, {&b.k, n.k}, {&b.v, n.v}, {&b.attn, n.attn}, {&b.scores, n.scores},
      {&b.mlp_a, n.mlp_a}, {&b.router_logits, n.router_logits}, {&b.act, n.act}, {&b.shared_out, n.shared_out},
      {&b.shared_gate, n.shared_gate}, {&b.final_h, n.final_h}, {&b.logits, n.logits}, {&b.position, n.position},
      {&b.choices, n.choices}, {&b.counts, n.counts}, {&b.ids, n.ids}, {&b.host_rows, n.host_rows}, {&b.rope, n.rope},
      {&b.arrivals, n.arrivals}, {&b.kv, n.kv}};
  for (const auto& [buffer, bytes] : sizes) {
    auto made = DeviceBuffer::allocate(bytes);
    if (!made) return make_error("the CUDA decoder's working memory: " + made.error().message);
    *buffer = std::move(*made);
  }
  const u64 f = sizeof(float);
  const std::vector<float> table = forward::Rope(static_cast<int>(c.head_dim), c.rope_theta).cos_sin_table(context);
  if (Status s = b.rope.upload(table.data(), table.size() * f); !s) return s.error();
  // Zeroed: the uncaptured first step runs before any host rows exist.
  for (DeviceBuffer* zeroed : {&b.counts, &b.host_rows, &b.arrivals}) {
    const std::vector<std::byte> zeros(zeroed->bytes());
    if (Status s = zeroed->upload(zeros.data(), zeros.size()); !s) return s.error();
  }
  return b;
}

Status record_step(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& b,
                   std::map<std::string, int>& launches, StepSegments& segments, LaunchObserver* observer) {
  Recorder r(stream, launches, observer);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const CudaLayer& layer = w.layers[i];
    if (Status s = attention_block(r, c, layer, b, static_cast<int>(i)); !s) return s;
    if (layer.moe >= 0) {  // its post-attention norm is part of the routing
      if (Status s = moe_block(r, c, w, layer, b, segments); !s) return s;
      continue;
    }
    const auto eps = static_cast<float>(c.rms_norm_eps);
    if (Status s = r.check("rms_norm", k::rms_norm(r.stream(), at(b.x), layer.post_norm, at(b.h), static_cast<int>(c.hidden_size), eps));
        !s) {
      return s;
    }
    if (Status s = mlp_block(r, layer, b); !s) return s;
  }
  return Ok{};
}

Status record_head(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& b,
                   std::map<std::string, int>& launches, LaunchObserver* observer) {
  Recorder r(stream, launches, observer);
  const auto hidden = static_cast<int>(c.hidden_size);
  if (Status s = r.check("rms_norm", k::rms_norm(stream, at(b.x), w.final_norm, at(b.final_h), hidden,
                                                  static_cast<float>(c.rms_norm_eps)));
      !s) {
    return s;
  }
  return matvec(r, w.lm_head, at(b.final_h), at(b.logits));
}

}  // namespace coli::cuda
