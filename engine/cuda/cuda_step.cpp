#include "cuda/cuda_step.h"

#include <cmath>
#include <vector>

#include "coli/forward/ops.h"
#include "cuda/cuda_layout.h"
#include "cuda/expert_parallel.h"
#include "cuda/kernel_launch.h"
#include "cuda/pinned.h"

namespace coli::cuda {
namespace {

namespace k = kernels::cuda::decoder;
using kernels::cuda::ExpertChoice;

using Recorder = LaunchRecorder;

// Kernels on int8 activations are named so ("matvec q4_g64 int8").
std::string kernel_name(const std::string& kernel, WeightFormat format, bool int8_activations) {
  return kernel + " " + std::string(name_of(format)) + (int8_activations ? " int8" : "");
}

// y (+)= W x (+ bias): on x8, x's int8 copy, when it is on and W takes it.
Status matvec(Recorder& r, const Matrix& m, const float* x, float* y, const float* bias = nullptr,
              bool accumulate = false, const k::Q8Activations& x8 = {}) {
  if (x8.on() && k::q8_input_fits(m)) {
    return r.check(kernel_name("matvec", m.format, true), k::matvec_q8(r.stream(), m, x8, y, bias, accumulate));
  }
  return r.check(kernel_name("matvec", m.format, false), k::matvec(r.stream(), m, x, y, bias, accumulate));
}

// h = RMSNorm(x), and h's int8 copy when the step quantises h.
Status norm_into_h(Recorder& r, const model::ModelConfig& c, const float* weight, StepBuffers& b, float* out) {
  const int hidden = static_cast<int>(c.hidden_size);
  const auto eps = static_cast<float>(c.rms_norm_eps);
  if (b.h8.on()) return r.check("rms_norm int8", k::rms_norm_q8(r.stream(), at(b.x), weight, out, b.h8, hidden, eps));
  return r.check("rms_norm", k::rms_norm(r.stream(), at(b.x), weight, out, hidden, eps));
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
    if (b.h8.on() && k::q8_input_fits(w.q) && k::q8_input_fits(w.k) && k::q8_input_fits(w.v)) {
      return r.check(kernel_name("matvec q/k/v", w.q.format, true), k::matvecs_q8(r.stream(), m, b.h8));
    }
    return r.check(kernel_name("matvec q/k/v", w.q.format, false), k::matvecs(r.stream(), m, at(b.h)));
  }
  for (Status s : {matvec(r, w.q, at(b.h), at(b.q), w.q_bias, false, b.h8),
                   matvec(r, w.k, at(b.h), at(b.k), w.k_bias, false, b.h8),
                   matvec(r, w.v, at(b.h), at(b.v), w.v_bias, false, b.h8)}) {
    if (!s) return s;
  }
  return Ok{};
}

Status attention_block(Recorder& r, const model::ModelConfig& c, const CudaLayer& w, StepBuffers& b, int layer) {
  if (Status s = norm_into_h(r, c, w.input_norm, b, at(b.h)); !s) return s;
  if (Status s = qkv(r, w, b); !s) return s;
  AttentionArgs args = attention_args(c, w, b, layer, at(b.q), at(b.k), at(b.v), at(b.attn), at(b.scores));
  args.attention.out_q = b.attn8;
  args.attention.arrivals = at<unsigned>(b.arrivals, 1);  // [0] is norm_route's
  for (Status s : {r.check("qk_prep", k::qk_prep(r.stream(), args.prep)),
                   r.check(b.attn8.on() ? "attention int8" : "attention", k::attention(r.stream(), args.attention)),
                   matvec(r, w.o, at(b.attn), at(b.x), w.o_bias, true, b.attn8)}) {
    if (!s) return s;
  }
  return Ok{};
}

// SwiGLU MLP of h: added to x (a dense layer) or written to shared_out.
Status mlp_block(Recorder& r, const CudaLayer& w, StepBuffers& b) {
  const bool dense = w.moe < 0;
  const bool int8 = b.h8.on() && k::q8_input_fits(w.mlp_gate) && k::q8_input_fits(w.mlp_up);
  const int launched = int8 ? k::swiglu_q8(r.stream(), w.mlp_gate, w.mlp_up, b.h8, at(b.mlp_a))
                            : k::swiglu(r.stream(), w.mlp_gate, w.mlp_up, at(b.h), at(b.mlp_a));
  if (Status s = r.check(kernel_name("swiglu", w.mlp_gate.format, int8), launched); !s) return s;
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
                             at(b.router_logits), b.h8};
    return r.check(kernel_name("norm_route", w.router.format, b.h8.on()), k::norm_route(r.stream(), fused));
  }
  for (Status s : {norm_into_h(r, c, w.post_norm, b, at(b.h)), matvec(r, w.router, at(b.h), at(b.router_logits), nullptr, false, b.h8),
                   r.check("route_topk", k::route_topk(r.stream(), route))}) {
    if (!s) return s;
  }
  return Ok{};
}

Status moe_block(Recorder& r, const model::ModelConfig& c, const CudaWeights& weights, const CudaLayer& w, StepBuffers& b,
                 StepSegments& segments) {
  const int experts = static_cast<int>(c.num_experts);
  const int top_k = static_cast<int>(c.num_experts_per_tok);
  const auto moe = static_cast<std::size_t>(w.moe);
  const bool hybrid = weights.experts.hybrid(moe);
  const bool keeps_residual = b.reduce == nullptr || b.reduce->keeps_residual();
  auto* choices = at<ExpertChoice>(b.choices, moe * static_cast<std::size_t>(top_k));
  // As the CPU engine: every normalisation but SoftmaxTopK renormalises the chosen k.
  const k::Route route{at(b.router_logits), at<const int>(weights.experts.slot_tables, moe * experts), choices,
                       hybrid ? at<int>(b.ids) : nullptr, at<unsigned>(b.counts, moe * experts), experts, top_k,
                       c.router_normalization != model::RouterNormalization::SoftmaxTopK};
  if (Status s = norm_and_route(r, c, w, b, route); !s) return s;
  // The host computes the choices without a VRAM slot while the device
  // runs its own; their rows are added once both are done.
  if (hybrid) {
    if (Status s = segments.send(w.moe); !s) return s;
  }
  // Another expert-parallel rank adds the residual and the shared expert.
  if (!keeps_residual) {
    const Status zeroed = cuda_call("cudaMemsetAsync (expert-parallel output)",
                                      cudaMemsetAsync(b.x.data(), 0, b.x.bytes(), static_cast<cudaStream_t>(r.stream())));
    if (!zeroed) return zeroed;
  }
  if (w.has_shared && keeps_residual) {
    if (Status s = mlp_block(r, w, b); !s) return s;
    if (Status s = matvec(r, w.shared_gate, at(b.h), at(b.shared_gate), nullptr, false, b.h8); !s) return s;
  }
  // Choices outside the slab are left for later: the host's added by
  // add_host_rows (remote ones there as the zero rows the host writes for
  // them), or, in a layer without host work, remote ones never (zero here).
  const bool later = hybrid || weights.experts.remote(moe);
  const k::Experts e{weights.experts.layout, at<const std::uint8_t>(weights.experts.slabs[moe]),
                     weights.experts.slot_counts[moe], choices, top_k, later ? at<const float>(b.host_rows) : nullptr,
                     later};
  const float* shared = w.has_shared && keeps_residual ? at(b.shared_out) : nullptr;
  const float* shared_gate = w.has_shared && keeps_residual ? at(b.shared_gate) : nullptr;
  const bool int8 = b.h8.on() && b.act8.on() && k::experts_q8_fit(e.layout);
  const int gate_up = int8 ? k::expert_gate_up_q8(r.stream(), e, b.h8, at(b.act), b.act8)
                           : k::expert_gate_up(r.stream(), e, at(b.h), at(b.act));
  if (Status s = r.check(kernel_name("expert_gate_up", e.layout.format, int8), gate_up); !s) return s;
  const int down = int8 ? k::expert_down_add_q8(r.stream(), e, b.act8, shared, shared_gate, at(b.x))
                        : k::expert_down_add(r.stream(), e, at(b.act), shared, shared_gate, at(b.x));
  if (Status s = r.check(kernel_name("expert_down_add", e.layout.format, int8), down); !s) return s;
  if (hybrid) {
    if (Status s = segments.end(w.moe); !s) return s;
    if (Status s = r.check("add_host_rows", k::add_host_rows(r.stream(), e, at(b.x))); !s) return s;
  }
  if (b.reduce == nullptr) return Ok{};
  return b.reduce->sum(r.stream(), at(b.x), exchange_floats(c.hidden_size, 1));
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

std::array<const DeviceBuffer*, 24> StepBuffers::activation_buffers() const {
  return {&x, &h, &q, &k, &v, &attn, &scores, &mlp_a, &router_logits, &act, &shared_out, &shared_gate, &final_h,
          &logits, &position, &choices, &counts, &ids, &host_rows, &rope, &arrivals, &h_q, &attn_q, &act_q};
}

std::uint64_t StepBuffers::activation_bytes() const {
  std::uint64_t sum = 0;
  for (const DeviceBuffer* d : activation_buffers()) sum += d->bytes();
  return sum;
}

std::uint64_t StepBuffers::page_rounding() const {
  std::uint64_t sum = cuda::page_rounding(kv.bytes());
  for (const DeviceBuffer* d : activation_buffers()) sum += cuda::page_rounding(d->bytes());
  return sum;
}

Result<StepBuffers> make_step_buffers(const model::ModelConfig& c, const CudaWeights& w, int context,
                                      bool int8_activations) {
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
      {&b.arrivals, n.arrivals}, {&b.h_q, n.h_q}, {&b.attn_q, n.attn_q}, {&b.act_q, n.act_q}, {&b.kv, n.kv}};
  for (const auto& [buffer, bytes] : sizes) {
    auto made = DeviceBuffer::allocate(bytes);
    if (!made) return make_error("the CUDA decoder's working memory: " + made.error().message);
    *buffer = std::move(*made);
  }
  if (int8_activations) {
    const auto view = [](const DeviceBuffer& buffer, u64 values) {
      if (values % k::kQ8Block != 0) return k::Q8Activations{};  // its consumers keep f32
      return k::Q8Activations{at<std::int8_t>(buffer), reinterpret_cast<k::Q8Block*>(at<std::int8_t>(buffer, values))};
    };
    b.h8 = view(b.h_q, c.hidden_size);
    b.attn8 = view(b.attn_q, c.num_attention_heads * c.head_dim);
    if (c.head_dim % k::kQ8Block != 0) b.attn8 = {};  // attention quantises a head's dims in blocks
    b.act8 = view(b.act_q, c.num_experts_per_tok * c.moe_intermediate_size);
    if (c.moe_intermediate_size % k::kQ8Block != 0) b.act8 = {};  // a block never spans two experts
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
    if (Status s = norm_into_h(r, c, layer.post_norm, b, at(b.h)); !s) return s;
    if (Status s = mlp_block(r, layer, b); !s) return s;
  }
  return Ok{};
}

Status record_head(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& b,
                   std::map<std::string, int>& launches, LaunchObserver* observer) {
  Recorder r(stream, launches, observer);
  if (Status s = norm_into_h(r, c, w.final_norm, b, at(b.final_h)); !s) return s;
  return matvec(r, w.lm_head, at(b.final_h), at(b.logits), nullptr, false, b.h8);
}

}  // namespace coli::cuda
