#include "cuda/cuda_prefill.h"

#include <utility>

#include "cuda/decoder_batch.h"
#include "cuda/expert_parallel.h"
#include "cuda/pinned.h"

namespace coli::cuda {
namespace {

namespace k = kernels::cuda::decoder;
using kernels::cuda::ExpertChoice;

std::string format_of(const Matrix& m) { return std::string(name_of(m.format)); }

// A SwiGLU's intermediate rows between its two launches: f16 (in the f32
// buffer's place) when both its launches are tensor-core formats.
void half_intermediate(const Matrix& gate, const Matrix& down, k::GemmRows& first, k::GemmRows& down_rows) {
  if (gate.format == WeightFormat::f32 || down.format == WeightFormat::f32) return;
  first.y_half = reinterpret_cast<std::uint16_t*>(first.y);
  first.y = nullptr;
  down_rows.x_half = first.y_half;
  down_rows.x = nullptr;
}

// One batch of one layer: its shape, buffers and the launches.
class BatchLayer {
 public:
  BatchLayer(LaunchRecorder& r, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& step, BatchBuffers& b,
             int tokens, bool exact, BatchHostExperts* host)
      : r_(r), c_(c), w_(w), step_(step), b_(b), host_(host), tokens_(tokens), exact_(exact),
        hidden_(static_cast<int>(c.hidden_size)), eps_(static_cast<float>(c.rms_norm_eps)) {}

  Status attention(const CudaLayer& l, int layer);
  Status moe(const CudaLayer& l);
  Status dense_mlp(const CudaLayer& l);

 private:
  // x_half: x's f16 copy (the tensor-core formats read it), or none.
  k::GemmRows dense_rows(const DeviceBuffer& x, const DeviceBuffer* x_half, DeviceBuffer& y) const {
    k::GemmRows rows;
    rows.x = at(x);
    rows.x_half = x_half != nullptr ? at<const std::uint16_t>(*x_half) : nullptr;
    rows.y = at(y);
    rows.tokens = tokens_;
    return rows;
  }
  Status gemm(const Matrix& m, const DeviceBuffer& x, const DeviceBuffer* x_half, DeviceBuffer& y,
              const float* bias = nullptr, bool accumulate = false) {
    return r_.check("prefill gemm " + format_of(m), k::gemm(r_.stream(), m, dense_rows(x, x_half, y), bias, accumulate));
  }
  // The f16 copy of `width` floats per token.
  Status to_half(const DeviceBuffer& from, DeviceBuffer& to, std::size_t width) {
    return r_.check("prefill to_half", k::to_half_rows(r_.stream(), at(from), at<std::uint16_t>(to),
                                                       static_cast<std::size_t>(tokens_) * width));
  }
  Status norm(const float* weight) {
    const Status s = r_.check("prefill rms_norm", k::rms_norm_rows(r_.stream(), at(b_.x), weight, at(b_.h), hidden_, tokens_, eps_));
    return s ? to_half(b_.h, b_.h_half, static_cast<std::size_t>(hidden_)) : s;
  }
  Status route(const CudaLayer& l);
  Status zero(DeviceBuffer& buffer, std::size_t floats, const char* what) {
    return cuda_call(std::string("cudaMemsetAsync (") + what + ")",
                     cudaMemsetAsync(buffer.data(), 0, floats * sizeof(float), static_cast<cudaStream_t>(r_.stream())));
  }
  Status experts(const CudaLayer& l);
  Status swiglu_mlp(const CudaLayer& l, DeviceBuffer& out, bool accumulate);

  LaunchRecorder& r_;
  const model::ModelConfig& c_;
  const CudaWeights& w_;
  StepBuffers& step_;
  BatchBuffers& b_;
  BatchHostExperts* host_;
  int tokens_;
  bool exact_;
  int hidden_;
  float eps_;
};

Status BatchLayer::attention(const CudaLayer& l, int layer) {
  const AttentionArgs args = attention_args(c_, l, step_, layer, at(b_.q), at(b_.k), at(b_.v), at(b_.attn), nullptr);
  const std::size_t q_width = static_cast<std::size_t>(c_.num_attention_heads * c_.head_dim);
  const auto math = exact_ || l.q.format == WeightFormat::f32 ? k::AttentionMath::f32 : k::AttentionMath::f16_tensor;
  for (Status s : {norm(l.input_norm), gemm(l.q, b_.h, &b_.h_half, b_.q, l.q_bias),
                   gemm(l.k, b_.h, &b_.h_half, b_.k, l.k_bias), gemm(l.v, b_.h, &b_.h_half, b_.v, l.v_bias),
                   r_.check("prefill qk_prep", k::qk_prep_rows(r_.stream(), args.prep, tokens_)),
                   r_.check("prefill attention", k::attention_rows(r_.stream(), args.attention, tokens_, math)),
                   to_half(b_.attn, b_.attn_half, q_width), gemm(l.o, b_.attn, &b_.attn_half, b_.x, l.o_bias, true)}) {
    if (!s) return s;
  }
  return Ok{};
}

// silu(h gate^T) * (h up^T) into mlp_a (f16 rows for a tensor-core down
// projection), then its down projection into `out`.
Status BatchLayer::swiglu_mlp(const CudaLayer& l, DeviceBuffer& out, bool accumulate) {
  k::GemmRows first_rows = dense_rows(b_.h, &b_.h_half, b_.mlp_a);
  k::GemmRows down_rows = dense_rows(b_.mlp_a, nullptr, out);
  half_intermediate(l.mlp_gate, l.mlp_down, first_rows, down_rows);
  const Status first = r_.check("prefill gemm_swiglu " + format_of(l.mlp_gate),
                                k::gemm_swiglu(r_.stream(), l.mlp_gate, l.mlp_up, first_rows));
  if (!first) return first;
  return r_.check("prefill gemm " + format_of(l.mlp_down), k::gemm(r_.stream(), l.mlp_down, down_rows, nullptr, accumulate));
}

Status BatchLayer::dense_mlp(const CudaLayer& l) {
  if (Status s = norm(l.post_norm); !s) return s;
  return swiglu_mlp(l, b_.x, true);
}

// h = the post-attention norm of x; the batch's choices [tokens][top_k].
Status BatchLayer::route(const CudaLayer& l) {
  const int experts = static_cast<int>(c_.num_experts);
  const auto moe = static_cast<std::size_t>(l.moe);
  const k::Route route{at(b_.router_logits), at<const int>(w_.experts.slot_tables, moe * experts),
                       at<ExpertChoice>(b_.choices), nullptr, at<unsigned>(step_.counts, moe * experts), experts,
                       static_cast<int>(c_.num_experts_per_tok),
                       c_.router_normalization != model::RouterNormalization::SoftmaxTopK};
  if (k::norm_route_fits(l.router, hidden_)) {
    const k::NormRoute fused{at(b_.x), l.post_norm, at(b_.h), hidden_, eps_, l.router, route};
    const Status s = r_.check("prefill norm_route " + format_of(l.router), k::norm_route_rows(r_.stream(), fused, tokens_));
    return s ? to_half(b_.h, b_.h_half, static_cast<std::size_t>(hidden_)) : s;
  }
  for (Status s : {norm(l.post_norm), gemm(l.router, b_.h, &b_.h_half, b_.router_logits),
                   r_.check("prefill route_topk", k::route_rows(r_.stream(), route, tokens_))}) {
    if (!s) return s;
  }
  return Ok{};
}

// The routed experts: the VRAM slots' choices grouped by slot on the
// device, one grouped gate/up and one grouped down launch over every slot;
// at a hybrid layer the host's experts between those and the weighted sum.
Status BatchLayer::experts(const CudaLayer& l) {
  const kernels::cuda::ExpertRecordLayout& layout = w_.experts.layout;
  const auto moe = static_cast<std::size_t>(l.moe);
  const int top_k = static_cast<int>(c_.num_experts_per_tok), slots = w_.experts.slot_counts[moe];
  const int experts = static_cast<int>(c_.num_experts);
  const bool hybrid = w_.experts.hybrid(moe);
  if (hybrid && host_ == nullptr) return make_error("MoE layer " + std::to_string(l.moe) + " has experts outside VRAM but no host expert store");
  // Expert parallel: another GPU's choices add zero rows here.
  const std::size_t rows = static_cast<std::size_t>(tokens_) * static_cast<std::size_t>(top_k) * static_cast<std::size_t>(hidden_);
  if (w_.experts.remote(moe)) {
    if (Status s = zero(b_.rows, rows, "expert-parallel remote rows"); !s) return s;
  }
  if (hybrid) {
    if (Status s = host_->send(l.moe, tokens_); !s) return s;
  }
  if (slots > 0) {
    for (Status s : {r_.check("prefill group_by_slot", k::group_by_slot(r_.stream(), at<const ExpertChoice>(b_.choices),
                                                                       tokens_ * top_k, slots, at<int>(b_.offsets), at<int>(b_.order))),
                     record_grouped_experts(r_, layout, at<const std::uint8_t>(w_.experts.slabs[moe]), slots,
                                            at<const int>(b_.order), at<const int>(b_.offsets), b_, tokens_, top_k)}) {
      if (!s) return s;
    }
  }
  if (hybrid) {
    if (Status s = host_->complete(l.moe, tokens_); !s) return s;
  }
  // Every slot number, the host's too, has its rows by now. Another
  // expert-parallel rank adds the residual and the shared expert.
  const bool keeps_residual = step_.reduce == nullptr || step_.reduce->keeps_residual();
  if (!keeps_residual) {
    if (Status s = zero(b_.x, static_cast<std::size_t>(tokens_) * hidden_, "expert-parallel output"); !s) return s;
  }
  const bool shared = l.has_shared && keeps_residual;
  const k::ExpertCombine combine{at<const ExpertChoice>(b_.choices), at(b_.rows),
                                 shared ? at(b_.shared_out) : nullptr,
                                 shared ? at(b_.shared_gate) : nullptr,
                                 at(b_.x), tokens_, top_k, hidden_, experts};
  if (Status s = r_.check("prefill combine_experts", k::combine_experts(r_.stream(), combine)); !s || !step_.reduce) return s;
  return step_.reduce->sum(r_.stream(), at(b_.x), exchange_floats(c_.hidden_size, static_cast<u64>(tokens_)));
}

Status BatchLayer::moe(const CudaLayer& l) {
  if (Status s = route(l); !s) return s;
  if (l.has_shared && (step_.reduce == nullptr || step_.reduce->keeps_residual())) {
    if (Status s = swiglu_mlp(l, b_.shared_out, false); !s) return s;
    if (Status s = gemm(l.shared_gate, b_.h, &b_.h_half, b_.shared_gate); !s) return s;  // qwen2_moe's sigmoid gate
  }
  return experts(l);
}

}  // namespace

Status record_grouped_experts(LaunchRecorder& r, const kernels::cuda::ExpertRecordLayout& layout,
                              const std::uint8_t* slab, int slots, const int* order, const int* offsets,
                              BatchBuffers& b, int tokens, int top_k) {
  const Matrix gate{layout.format, layout.width, layout.hidden, slab + layout.gate_weights, slab + layout.gate_scales};
  const Matrix up{layout.format, layout.width, layout.hidden, slab + layout.up_weights, slab + layout.up_scales};
  const Matrix down{layout.format, layout.hidden, layout.width, slab + layout.down_weights, slab + layout.down_scales};
  k::GemmRows grouped;
  grouped.x = at(b.h);
  grouped.x_half = at<const std::uint16_t>(b.h_half);
  grouped.y = at(b.act);
  grouped.tokens = tokens;
  grouped.order = order;
  grouped.offsets = offsets;
  grouped.slots = slots;
  grouped.x_divisor = top_k;
  grouped.slot_stride = layout.record_stride;
  k::GemmRows grouped_down = grouped;
  grouped_down.x = at(b.act);
  grouped_down.x_half = nullptr;
  grouped_down.y = at(b.rows);
  grouped_down.x_divisor = 1;
  half_intermediate(gate, down, grouped, grouped_down);
  const std::string format(name_of(layout.format));
  if (Status s = r.check("prefill expert gate_up " + format, k::gemm_swiglu(r.stream(), gate, up, grouped)); !s) return s;
  return r.check("prefill expert down " + format, k::gemm(r.stream(), down, grouped_down, nullptr, false));
}

std::array<const DeviceBuffer*, 20> BatchBuffers::all() const {
  return {&x, &h, &h_half, &q, &k, &v, &attn, &attn_half, &mlp_a, &shared_out, &shared_gate, &router_logits, &choices,
          &offsets, &order, &act, &rows, &staging, &staged_order, &staged_offsets};
}

std::uint64_t BatchBuffers::bytes() const {
  std::uint64_t sum = 0;
  for (const DeviceBuffer* d : all()) sum += d->bytes();
  return sum;
}

std::uint64_t BatchBuffers::page_rounding() const {
  std::uint64_t sum = 0;
  for (const DeviceBuffer* d : all()) sum += cuda::page_rounding(d->bytes());
  return sum;
}

Result<BatchBuffers> make_batch_buffers(const model::ModelConfig& c, int tokens, int staging_records,
                                        std::uint64_t record_stride) {
  BatchBuffers b;
  const BatchBufferBytes n = batch_buffer_bytes(c, static_cast<u64>(std::max(tokens, 0)),
                                                static_cast<u64>(std::max(staging_records, 0)), record_stride);
  if (n.total() == 0) return b;
  b.tokens = tokens;
  b.staging_records = std::max(staging_records, 0);
  const std::pair<DeviceBuffer*, u64> sizes[] = {
      {&b.x, n.x}, {&b.h, n.h}, {&b.h_half, n.h_half}, {&b.q, n.q}, {&b.k, n.k}, {&b.v, n.v}, {&b.attn, n.attn},
      {&b.attn_half, n.attn_half}, {&b.mlp_a, n.mlp_a},
      {&b.shared_out, n.shared_out}, {&b.shared_gate, n.shared_gate}, {&b.router_logits, n.router_logits},
      {&b.choices, n.choices}, {&b.offsets, n.offsets}, {&b.order, n.order}, {&b.act, n.act}, {&b.rows, n.rows},
      {&b.staging, n.staging}, {&b.staged_order, n.staged_order}, {&b.staged_offsets, n.staged_offsets}};
  for (const auto& [buffer, bytes] : sizes) {
    auto made = DeviceBuffer::allocate(bytes);
    if (!made) return make_error("the CUDA decoder's prefill batch of " + std::to_string(tokens) + " tokens: " + made.error().message);
    *buffer = std::move(*made);
  }
  return b;
}

Status record_batch(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& step,
                    BatchBuffers& batch, int tokens, bool exact, std::map<std::string, int>& launches,
                    BatchHostExperts* host, LaunchObserver* observer) {
  if (tokens < 1 || tokens > batch.tokens) {
    return make_error("a prefill batch of " + std::to_string(tokens) + " tokens (the buffers take " +
                      std::to_string(batch.tokens) + ")");
  }
  LaunchRecorder r(stream, launches, observer);
  BatchLayer run(r, c, w, step, batch, tokens, exact, host);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const CudaLayer& layer = w.layers[i];
    if (Status s = run.attention(layer, static_cast<int>(i)); !s) return s;
    if (Status s = layer.moe >= 0 ? run.moe(layer) : run.dense_mlp(layer); !s) return s;
  }
  return Ok{};
}

}  // namespace coli::cuda
