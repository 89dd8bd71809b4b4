#include <algorithm>
#include <cmath>

#include "vulkan/decoder/decoder_recorder.h"

namespace coli::vulkan {
namespace {

constexpr std::size_t kAlign = 256;

// Lays out regions one after another, each aligned.
class Layout {
 public:
  std::size_t add(std::size_t bytes) {
    const std::size_t at = size_;
    size_ = (size_ + std::max<std::size_t>(bytes, 4) + kAlign - 1) / kAlign * kAlign;
    return at;
  }
  std::size_t size() const { return size_; }

 private:
  std::size_t size_ = 0;
};

// cos/sin of every (position, pair), computed in double as forward::Rope does.
std::vector<float> rope_table(const model::ModelConfig& c, int context) {
  const std::size_t half = c.head_dim / 2;
  std::vector<float> table(static_cast<std::size_t>(context) * half * 2);
  for (std::size_t i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(c.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
    for (int p = 0; p < context; ++p) {
      const double angle = p * inv_freq;
      table[(static_cast<std::size_t>(p) * half + i) * 2] = static_cast<float>(std::cos(angle));
      table[(static_cast<std::size_t>(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

}  // namespace

Result<DecoderBuffers> DecoderBuffers::create(ComputeContext& context, StagingRing& ring,
                                              const model::ModelConfig& c, const DecoderModel& model,
                                              const GpuWeights& weights) {
  DecoderBuffers b;
  b.max_tokens_ = std::max(1, model.max_batch_tokens);
  b.context_ = model.max_context;
  b.moe_layers_ = static_cast<int>(weights.experts.slot_of.size());
  const std::size_t t = static_cast<std::size_t>(b.max_tokens_), f = 4;
  const std::size_t hidden = c.hidden_size, q_width = c.num_attention_heads * c.head_dim;
  const std::size_t kv_width = c.num_key_value_heads * c.head_dim;
  b.choices_ = t * c.num_experts_per_tok;
  std::size_t mlp_width = 1;
  for (const GpuLayer& layer : weights.layers) mlp_width = std::max<std::size_t>(mlp_width, layer.mlp_gate.rows);
  Layout s;
  b.offsets_[x] = s.add(t * hidden * f);
  b.offsets_[h] = s.add(t * hidden * f);
  b.offsets_[q] = s.add(t * q_width * f);
  b.offsets_[k] = s.add(t * kv_width * f);
  b.offsets_[v] = s.add(t * kv_width * f);
  b.offsets_[attn] = s.add(t * q_width * f);
  b.offsets_[scores] = s.add(t * c.num_attention_heads * static_cast<std::size_t>(b.context_) * f);
  b.offsets_[mlp_a] = s.add(t * mlp_width * f);
  b.offsets_[mlp_b] = s.add(t * mlp_width * f);
  b.offsets_[router_logits] = s.add(t * std::max<std::uint64_t>(c.num_experts, 1) * f);
  b.offsets_[act] = s.add(b.choices_ * std::max<std::uint64_t>(c.moe_intermediate_size, 1) * f);
  b.offsets_[y] = s.add(b.choices_ * hidden * f);
  b.offsets_[y_host_copy] = s.add(b.choices_ * hidden * f);
  b.offsets_[shared_out] = s.add(t * hidden * f);
  b.offsets_[shared_gate] = s.add(t * f);
  b.offsets_[route_ids] = s.add(static_cast<std::size_t>(b.moe_layers_) * b.choices_ * 4);
  b.offsets_[route_weights] = s.add(static_cast<std::size_t>(b.moe_layers_) * b.choices_ * f);
  b.offsets_[final_h] = s.add(hidden * f);
  const std::vector<float> table = rope_table(c, b.context_);
  b.offsets_[rope] = s.add(table.size() * f);
  b.offsets_[step_copy] = s.add(16);
  auto scratch = AddressedBuffer::create(context, s.size(), Placement::device, "decoder activations");
  if (!scratch) return scratch.error();
  b.scratch_ = std::move(*scratch);
  if (Status st = ring.upload(*b.scratch_, b.offsets_[rope], std::as_bytes(std::span(table))); !st) return st.error();
  if (Status st = ring.finish(); !st) return st.error();

  b.kv_layer_bytes_ = static_cast<std::size_t>(b.context_) * kv_width * f;
  auto kv = AddressedBuffer::create(context, c.num_hidden_layers * 2 * b.kv_layer_bytes_, Placement::device,
                                    "KV cache (" + std::to_string(b.context_) + " positions)");
  if (!kv) return kv.error();
  b.kv_ = std::move(*kv);

  Layout hl;
  b.host_offsets_[h_step] = hl.add(16);
  b.host_offsets_[h_input] = hl.add(t * hidden * f);
  b.host_offsets_[h_logits] = hl.add(c.vocab_size * f);
  b.host_offsets_[h_ids] = hl.add(static_cast<std::size_t>(b.moe_layers_) * b.choices_ * 4);
  b.host_offsets_[h_hidden] = hl.add(t * hidden * f);
  b.host_offsets_[h_rows] = hl.add(b.choices_ * hidden * f);
  auto host = AddressedBuffer::create(context, hl.size(), Placement::host, "decoder input/output (host-visible)");
  if (!host) return host.error();
  b.host_ = std::move(*host);
  return b;
}

VkDeviceAddress DecoderBuffers::route_ids_of(int moe_layer) const {
  return at(route_ids) + static_cast<std::size_t>(moe_layer) * choices_ * 4;
}
VkDeviceAddress DecoderBuffers::route_weights_of(int moe_layer) const {
  return at(route_weights) + static_cast<std::size_t>(moe_layer) * choices_ * 4;
}
VkDeviceAddress DecoderBuffers::k_cache(int layer) const {
  return kv_->address() + static_cast<std::size_t>(2 * layer) * kv_layer_bytes_;
}
VkDeviceAddress DecoderBuffers::v_cache(int layer) const {
  return kv_->address() + static_cast<std::size_t>(2 * layer + 1) * kv_layer_bytes_;
}

namespace {
template <typename T>
std::span<T> host_span(const AddressedBuffer& host, std::size_t offset, std::size_t count) {
  return {reinterpret_cast<T*>(host.mapped().data() + offset), count};
}
}  // namespace

std::span<std::uint32_t> DecoderBuffers::step() const { return host_span<std::uint32_t>(*host_, host_offsets_[h_step], 4); }
std::span<float> DecoderBuffers::host_input() const {
  return host_span<float>(*host_, host_offsets_[h_input], (host_offsets_[h_logits] - host_offsets_[h_input]) / 4);
}
std::span<float> DecoderBuffers::host_logits() const {
  return host_span<float>(*host_, host_offsets_[h_logits], (host_offsets_[h_ids] - host_offsets_[h_logits]) / 4);
}
std::span<const int> DecoderBuffers::host_ids(int moe_layer) const {
  return host_span<const int>(*host_, host_offsets_[h_ids] + static_cast<std::size_t>(moe_layer) * choices_ * 4, choices_);
}
std::span<float> DecoderBuffers::host_hidden() const {
  return host_span<float>(*host_, host_offsets_[h_hidden], (host_offsets_[h_rows] - host_offsets_[h_hidden]) / 4);
}
std::span<float> DecoderBuffers::host_expert_rows() const {
  return host_span<float>(*host_, host_offsets_[h_rows], (host_->size() - host_offsets_[h_rows]) / 4);
}

}  // namespace coli::vulkan
