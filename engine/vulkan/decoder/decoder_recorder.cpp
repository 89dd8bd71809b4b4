#include "vulkan/decoder/decoder_recorder.h"

#include <cmath>

namespace coli::vulkan {
namespace {

std::uint32_t groups(std::uint64_t items, std::uint32_t per_group) {
  return static_cast<std::uint32_t>((items + per_group - 1) / per_group);
}

}  // namespace

Status DecoderRecorder::begin_segment() {
  const auto& fn = context_.fn();
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = pool_;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  if (VkResult r = fn.vkAllocateCommandBuffers(context_.device(), &alloc, &cmd_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkAllocateCommandBuffers", r);
  }
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};  // replayed: no one-time flag
  if (VkResult r = fn.vkBeginCommandBuffer(cmd_, &begin); r != VK_SUCCESS) return vulkan_call_failed("vkBeginCommandBuffer", r);
  segment_first_query_ = profile_ ? profile_->begin_segment(cmd_) : 0;
  return Ok{};
}

Status DecoderRecorder::end_segment(int host_layer) {
  barrier();
  if (VkResult r = context_.fn().vkEndCommandBuffer(cmd_); r != VK_SUCCESS) return vulkan_call_failed("vkEndCommandBuffer", r);
  out_.segments.push_back(cmd_);
  out_.host_layer_after.push_back(host_layer);
  out_.queries.push_back({segment_first_query_, profile_ ? profile_->end_segment() : 0});
  cmd_ = VK_NULL_HANDLE;
  return Ok{};
}

void DecoderRecorder::barrier() { record_full_barrier(context_, cmd_); }

void DecoderRecorder::dispatch(const Kernel& kernel, const void* push, std::uint32_t x, std::uint32_t y,
                               const char* role) {
  kernel.record(cmd_, push, x, y);
  if (profile_) profile_->stamp(cmd_, *role ? kernel.desc().name + " (" + role + ")" : kernel.desc().name);
}

void DecoderRecorder::copy(VkBuffer from, std::size_t from_offset, VkBuffer to, std::size_t to_offset, std::size_t bytes) {
  VkBufferCopy region{from_offset, to_offset, bytes};
  context_.fn().vkCmdCopyBuffer(cmd_, from, to, 1, &region);
}

void DecoderRecorder::matvec(const char* role, const GpuMatrix& m, VkDeviceAddress x, std::uint32_t x_stride, VkDeviceAddress y,
                             std::uint32_t y_stride, std::uint32_t tokens, VkDeviceAddress bias, bool accumulate) {
  const auto& pair = k_.matvec[static_cast<std::size_t>(m.format)];
  const bool batched = tokens > 1 && pair[1];
  const Kernel& kernel = *pair[batched ? 1 : 0];
  const std::uint32_t per_group = batched ? k_.shape.batch_tokens : 1;
  MatvecPush push{m.w, m.s, x, y, bias, m.rows, m.cols, x_stride, y_stride, tokens, accumulate ? 1u : 0u};
  dispatch(kernel, &push, groups(m.rows, k_.shape.rows), groups(tokens, per_group), role);
}

void DecoderRecorder::rms_norm(VkDeviceAddress x, VkDeviceAddress out, VkDeviceAddress weight, std::uint32_t tokens,
                               std::uint32_t x_stride) {
  const auto hidden = static_cast<std::uint32_t>(c_.hidden_size);
  RmsNormPush push{x, out, weight, hidden, x_stride, hidden, static_cast<float>(c_.rms_norm_eps)};
  dispatch(*k_.rms_norm, &push, tokens);
}

void DecoderRecorder::silu_mul(VkDeviceAddress a, VkDeviceAddress b, std::uint32_t n) {
  SiluMulPush push{a, b, n};
  dispatch(*k_.silu_mul, &push, groups(n, k_.norm_workgroup));
}

void DecoderRecorder::attention_block(const GpuLayer& w, int index) {
  using B = DeviceRole;
  const auto hidden = static_cast<std::uint32_t>(c_.hidden_size);
  const auto heads = static_cast<std::uint32_t>(c_.num_attention_heads);
  const auto kv_heads = static_cast<std::uint32_t>(c_.num_key_value_heads);
  const auto head_dim = static_cast<std::uint32_t>(c_.head_dim);
  rms_norm(b_.at(B::x), b_.at(B::h), w.input_norm, tokens_, hidden);
  barrier();
  matvec("q",w.q, b_.at(B::h), hidden, b_.at(B::q), heads * head_dim, tokens_, w.q_bias);
  matvec("k",w.k, b_.at(B::h), hidden, b_.at(B::k), kv_heads * head_dim, tokens_, w.k_bias);
  matvec("v",w.v, b_.at(B::h), hidden, b_.at(B::v), kv_heads * head_dim, tokens_, w.v_bias);
  barrier();
  const std::uint32_t norm_mode = c_.qk_norm == model::QkNorm::PerHead ? 1 : c_.qk_norm == model::QkNorm::FullProjection ? 2 : 0;
  QkPrepPush prep{b_.at(B::q), b_.at(B::k), b_.at(B::v), b_.k_cache(index), b_.v_cache(index), w.q_norm, w.k_norm,
                  b_.at(B::rope), b_.at(B::step_copy), heads, kv_heads, head_dim, norm_mode,
                  c_.clip_qkv ? static_cast<float>(*c_.clip_qkv) : 0.0f, static_cast<float>(c_.rms_norm_eps)};
  dispatch(*k_.qk_prep, &prep, tokens_);
  barrier();
  AttentionPush attention{b_.at(B::q), b_.k_cache(index), b_.v_cache(index), b_.at(B::attn), b_.at(B::scores),
                          b_.at(B::step_copy), heads, kv_heads, head_dim, static_cast<std::uint32_t>(b_.context()),
                          static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))};
  dispatch(*k_.attention, &attention, heads, tokens_);
  barrier();
  matvec("o",w.o, b_.at(B::attn), heads * head_dim, b_.at(B::x), hidden, tokens_, w.o_bias, true);
  barrier();
  rms_norm(b_.at(B::x), b_.at(B::h), w.post_norm, tokens_, hidden);
  barrier();
}

// SwiGLU MLP of h into `out` (accumulating into x for a dense layer).
void DecoderRecorder::mlp_block(const GpuLayer& w) {
  using B = DeviceRole;
  const auto hidden = static_cast<std::uint32_t>(c_.hidden_size);
  const std::uint32_t width = w.mlp_gate.rows;
  matvec("mlp gate",w.mlp_gate, b_.at(B::h), hidden, b_.at(B::mlp_a), width, tokens_);
  matvec("mlp up",w.mlp_up, b_.at(B::h), hidden, b_.at(B::mlp_b), width, tokens_);
  barrier();
  silu_mul(b_.at(B::mlp_a), b_.at(B::mlp_b), width * tokens_);
  barrier();
  const bool dense = w.moe < 0;
  matvec("mlp down",w.mlp_down, b_.at(B::mlp_a), width, b_.at(dense ? B::x : B::shared_out), hidden, tokens_, 0, dense);
}

Status DecoderRecorder::moe_block(const GpuLayer& w) {
  using B = DeviceRole;
  const auto hidden = static_cast<std::uint32_t>(c_.hidden_size);
  const auto top_k = static_cast<std::uint32_t>(c_.num_experts_per_tok);
  const auto experts = static_cast<std::uint32_t>(c_.num_experts);
  const GpuExperts& e = w_.experts;
  matvec("router",w.router, b_.at(B::h), hidden, b_.at(B::router_logits), experts, tokens_);
  barrier();
  // As the CPU engine: every normalisation but SoftmaxTopK renormalises the chosen k.
  const bool renormalize = c_.router_normalization != model::RouterNormalization::SoftmaxTopK;
  RouteTopkPush route{b_.at(B::router_logits), b_.route_ids_of(w.moe), b_.route_weights_of(w.moe), experts, top_k,
                      renormalize ? 1u : 0u};
  dispatch(*k_.route_topk, &route, tokens_);
  const bool host_part = !e.all_in_vram(w.moe);
  const std::size_t choices = static_cast<std::size_t>(tokens_) * top_k;
  if (host_part) {
    // The host needs this layer's choices and input, then sends its rows back.
    barrier();
    const std::size_t ids_at = b_.offset(B::route_ids) + static_cast<std::size_t>(w.moe) * b_.route_stride_bytes();
    copy(b_.scratch().handle(), ids_at, b_.host().handle(),
         b_.host_offset(h_ids) + static_cast<std::size_t>(w.moe) * b_.route_stride_bytes(),
         choices * 4);
    copy(b_.scratch().handle(), b_.offset(B::h), b_.host().handle(), b_.host_offset(h_hidden),
         static_cast<std::size_t>(tokens_) * hidden * 4);
    if (Status s = end_segment(w.moe); !s) return s;
    if (Status s = begin_segment(); !s) return s;
    copy(b_.host().handle(), b_.host_offset(h_rows), b_.scratch().handle(), b_.offset(B::y_host_copy),
         choices * hidden * 4);
  }
  barrier();
  const VkDeviceAddress slots = e.slot_tables->address() + static_cast<std::size_t>(w.moe) * experts * 4;
  const VkDeviceAddress records = e.layers[static_cast<std::size_t>(w.moe)] ? e.layers[static_cast<std::size_t>(w.moe)]->address() : 0;
  if (records != 0 && tokens_ > 1 && k_.gate_up_grouped) {
    // Prefill: each expert's choices together, its weights read once per group.
    RouteGroupPush group{b_.route_ids_of(w.moe), b_.at(B::group_offsets), b_.at(B::group_members),
                         static_cast<std::uint32_t>(choices), experts};
    dispatch(*k_.route_group, &group, 1);
    barrier();
    ExpertGateUpGroupedPush gate_up{records, slots, b_.at(B::group_offsets), b_.at(B::group_members), b_.at(B::h),
                                    b_.at(B::act), e.stride, hidden, e.width, top_k, e.gate_w, e.gate_s, e.up_w, e.up_s};
    dispatch(*k_.gate_up_grouped, &gate_up, groups(e.width, k_.shape.rows), experts);
    barrier();
    ExpertDownGroupedPush down{records, slots, b_.at(B::group_offsets), b_.at(B::group_members), b_.at(B::act),
                               b_.at(B::y), e.stride, hidden, e.width, e.down_w, e.down_s};
    dispatch(*k_.down_grouped, &down, groups(hidden, k_.shape.rows), experts);
  } else if (records != 0) {
    ExpertGateUpPush gate_up{records, slots, b_.route_ids_of(w.moe), b_.at(B::h), b_.at(B::act), e.stride, hidden,
                             e.width, top_k, e.gate_w, e.gate_s, e.up_w, e.up_s};
    dispatch(*k_.gate_up, &gate_up, groups(e.width, k_.shape.rows), static_cast<std::uint32_t>(choices));
    barrier();
    ExpertDownPush down{records, slots, b_.route_ids_of(w.moe), b_.at(B::act), b_.at(B::y), e.stride, hidden, e.width,
                        e.down_w, e.down_s};
    dispatch(*k_.down, &down, groups(hidden, k_.shape.rows), static_cast<std::uint32_t>(choices));
  }
  if (w.has_shared) {
    mlp_block(w);
    matvec("shared gate",w.shared_gate, b_.at(B::h), hidden, b_.at(B::shared_gate), 1, tokens_);
  }
  barrier();
  MoeCombinePush combine{b_.at(B::x), b_.at(B::y), b_.at(B::y_host_copy), slots, b_.route_ids_of(w.moe),
                         b_.route_weights_of(w.moe), w.has_shared ? b_.at(B::shared_out) : 0,
                         w.has_shared ? b_.at(B::shared_gate) : 0, hidden, top_k};
  dispatch(*k_.moe_combine, &combine, tokens_);
  barrier();
  return Ok{};
}

Result<RecordedForward> DecoderRecorder::record(int tokens) {
  using B = DeviceRole;
  tokens_ = static_cast<std::uint32_t>(tokens);
  out_ = {};
  const auto hidden = static_cast<std::uint32_t>(c_.hidden_size);
  if (Status s = begin_segment(); !s) return s.error();
  copy(b_.host().handle(), b_.host_offset(h_step), b_.scratch().handle(), b_.offset(B::step_copy), 16);
  copy(b_.host().handle(), b_.host_offset(h_input), b_.scratch().handle(), b_.offset(B::x),
       static_cast<std::size_t>(tokens) * hidden * 4);
  barrier();
  for (std::size_t i = 0; i < w_.layers.size(); ++i) {
    const GpuLayer& layer = w_.layers[i];
    attention_block(layer, static_cast<int>(i));
    if (layer.moe < 0) {
      mlp_block(layer);
      barrier();
    } else if (Status s = moe_block(layer); !s) {
      return s.error();
    }
  }
  const VkDeviceAddress last = b_.at(B::x) + static_cast<std::size_t>(tokens - 1) * hidden * 4;
  rms_norm(last, b_.at(B::final_h), w_.final_norm, 1, hidden);
  barrier();
  const VkDeviceAddress logits = b_.host().address() + b_.host_offset(h_logits);
  matvec("lm_head",w_.lm_head, b_.at(B::final_h), hidden, logits, w_.lm_head.rows, 1);
  barrier();
  // Every layer's choices, for the usage history.
  const std::size_t all_ids = b_.route_stride_bytes() * w_.experts.slot_of.size();
  if (all_ids > 0) copy(b_.scratch().handle(), b_.offset(B::route_ids), b_.host().handle(), b_.host_offset(h_ids), all_ids);
  if (Status s = end_segment(-1); !s) return s.error();
  return std::move(out_);
}

}  // namespace coli::vulkan
