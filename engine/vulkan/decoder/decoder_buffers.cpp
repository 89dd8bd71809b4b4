#include <algorithm>

#include "coli/forward/ops.h"
#include "vulkan/decoder/decoder_recorder.h"

namespace coli::vulkan {

Result<DecoderBuffers> DecoderBuffers::create(ComputeContext& context, StagingRing& ring,
                                              const model::ModelConfig& c, const DecoderModel& model,
                                              const GpuWeights& weights) {
  DecoderBuffers b;
  b.context_ = model.max_context;
  const DecoderShape shape = decoder_shape(c, weights.experts.slot_of.size(), static_cast<std::uint64_t>(model.max_context),
                                           static_cast<std::uint64_t>(std::max(1, model.max_batch_tokens)));
  for (const GpuLayer& layer : weights.layers) {
    if (layer.mlp_gate.rows > shape.mlp_width) {
      return make_error("a dense MLP of " + std::to_string(layer.mlp_gate.rows) + " rows is wider than the config says (" +
                        std::to_string(shape.mlp_width) + "): convert the model again");
    }
  }
  b.layout_ = layout_decoder(shape);
  auto scratch = AddressedBuffer::create(context, b.layout_.device_bytes, Placement::device, "decoder activations");
  if (!scratch) return scratch.error();
  b.scratch_ = std::move(*scratch);
  const std::vector<float> table = forward::Rope(static_cast<int>(c.head_dim), c.rope_theta).cos_sin_table(b.context_);
  if (Status st = ring.upload(*b.scratch_, b.layout_.device[rope], std::as_bytes(std::span(table))); !st) return st.error();
  if (Status st = ring.finish(); !st) return st.error();
  auto kv = AddressedBuffer::create(context, b.layout_.kv_bytes, Placement::device,
                                    "KV cache (" + std::to_string(b.context_) + " positions)");
  if (!kv) return kv.error();
  b.kv_ = std::move(*kv);
  auto host = AddressedBuffer::create(context, b.layout_.host_bytes, Placement::host, "decoder input/output (host-visible)");
  if (!host) return host.error();
  b.host_ = std::move(*host);
  return b;
}

VkDeviceAddress DecoderBuffers::route_ids_of(int moe_layer) const {
  return at(route_ids) + static_cast<std::size_t>(moe_layer) * route_stride_bytes();
}
VkDeviceAddress DecoderBuffers::route_weights_of(int moe_layer) const {
  return at(route_weights) + static_cast<std::size_t>(moe_layer) * route_stride_bytes();
}
VkDeviceAddress DecoderBuffers::k_cache(int layer) const {
  return kv_->address() + static_cast<std::size_t>(2 * layer) * layout_.kv_layer_bytes;
}
VkDeviceAddress DecoderBuffers::v_cache(int layer) const {
  return kv_->address() + static_cast<std::size_t>(2 * layer + 1) * layout_.kv_layer_bytes;
}

namespace {
template <typename T>
std::span<T> host_span(const AddressedBuffer& host, std::size_t offset, std::size_t count) {
  return {reinterpret_cast<T*>(host.mapped().data() + offset), count};
}
}  // namespace

std::span<std::uint32_t> DecoderBuffers::step() const { return host_span<std::uint32_t>(*host_, layout_.host[h_step], 4); }
std::span<float> DecoderBuffers::host_input() const {
  return host_span<float>(*host_, layout_.host[h_input], (layout_.host[h_logits] - layout_.host[h_input]) / 4);
}
std::span<float> DecoderBuffers::host_logits() const {
  return host_span<float>(*host_, layout_.host[h_logits], (layout_.host[h_ids] - layout_.host[h_logits]) / 4);
}
std::span<const int> DecoderBuffers::host_ids(int moe_layer) const {
  return host_span<const int>(*host_, layout_.host[h_ids] + static_cast<std::size_t>(moe_layer) * route_stride_bytes(), layout_.choices);
}
std::span<float> DecoderBuffers::host_hidden() const {
  return host_span<float>(*host_, layout_.host[h_hidden], (layout_.host[h_rows] - layout_.host[h_hidden]) / 4);
}
std::span<float> DecoderBuffers::host_expert_rows() const {
  return host_span<float>(*host_, layout_.host[h_rows], (host_->size() - layout_.host[h_rows]) / 4);
}

}  // namespace coli::vulkan
