#include "vulkan/decoder/vulkan_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "coli/base/text.h"
#include "coli/shaders/decoder_modules.h"
#include "coli/forward/ops.h"
#include "vulkan/decoder/decoder_recorder.h"

namespace coli::vulkan {
namespace {

constexpr std::uint64_t kWaitTimeoutNs = 120ull * 1000 * 1000 * 1000;

// One embedding row as f32 (the lookup stays on the host: one row a token).
Status embedding_row(const DecoderTensor& embed, int token, std::span<float> out) {
  if (token < 0 || static_cast<std::uint64_t>(token) >= embed.shape[0]) {
    return make_error("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                      std::to_string(embed.shape[0] - 1) + ")");
  }
  forward::dense_row({embed.dtype, static_cast<int>(embed.shape[0]), static_cast<int>(out.size()), embed.bytes.data()},
                     token, out);
  return Ok{};
}

}  // namespace

struct VulkanDecoder::State {
  ComputeContext* context = nullptr;
  DecoderModel model;
  const DecoderTensor* embed = nullptr;
  std::unique_ptr<StagingRing> ring;
  GpuWeights weights;
  KernelSet kernels;
  DecoderBuffers buffers;
  DecoderMemory memory;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  std::map<int, RecordedForward> recorded;  // by batch size
  std::unique_ptr<KernelProfile> profile;   // COLI_GPU_PROFILE=1
  std::vector<std::vector<std::uint64_t>> counts;  // routing of the last forward
  std::vector<float> host_y;  // scratch for HostExperts

  ~State() {
    if (!context) return;
    const auto& fn = context->fn();
    fn.vkDeviceWaitIdle(context->device());
    if (fence) fn.vkDestroyFence(context->device(), fence, nullptr);
    if (pool) fn.vkDestroyCommandPool(context->device(), pool, nullptr);
  }
  Status init_commands();
  Result<const RecordedForward*> recorded_for(int tokens);
  Status submit(VkCommandBuffer cmd);
  Status run_chunk(std::span<const std::int32_t> tokens, int position, HostExperts* host);
  Status run_host_experts(int moe_layer, int tokens, HostExperts* host);
};

Status VulkanDecoder::State::init_commands() {
  const auto& fn = context->fn();
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.queueFamilyIndex = context->queue_family();
  if (VkResult r = fn.vkCreateCommandPool(context->device(), &pool_info, nullptr, &pool); r != VK_SUCCESS) {
    pool = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateCommandPool", r);
  }
  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (VkResult r = fn.vkCreateFence(context->device(), &fence_info, nullptr, &fence); r != VK_SUCCESS) {
    fence = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateFence", r);
  }
  return Ok{};
}

Result<const RecordedForward*> VulkanDecoder::State::recorded_for(int tokens) {
  auto found = recorded.find(tokens);
  if (found != recorded.end()) return &found->second;
  DecoderRecorder recorder(*context, pool, *model.config, weights, kernels, buffers, profile.get());
  auto forward = recorder.record(tokens);
  if (!forward) return forward.error();
  return &recorded.emplace(tokens, std::move(*forward)).first->second;
}

Status VulkanDecoder::State::submit(VkCommandBuffer cmd) {
  const auto& fn = context->fn();
  fn.vkResetFences(context->device(), 1, &fence);
  VkSubmitInfo info{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  info.commandBufferCount = 1;
  info.pCommandBuffers = &cmd;
  if (VkResult r = fn.vkQueueSubmit(context->queue(), 1, &info, fence); r != VK_SUCCESS) {
    return vulkan_call_failed("vkQueueSubmit", r);
  }
  if (VkResult r = fn.vkWaitForFences(context->device(), 1, &fence, VK_TRUE, kWaitTimeoutNs); r != VK_SUCCESS) {
    return vulkan_call_failed("vkWaitForFences (decoder)", r);
  }
  return Ok{};
}

// The choices of `moe_layer` whose expert has no VRAM slot, computed by the
// host into the host rows the next command buffer copies up.
Status VulkanDecoder::State::run_host_experts(int moe_layer, int tokens, HostExperts* host) {
  if (!host) return make_error("MoE layer " + std::to_string(moe_layer) + " has experts outside VRAM but no host expert store");
  const model::ModelConfig& c = *model.config;
  const std::size_t choices = static_cast<std::size_t>(tokens) * c.num_experts_per_tok;
  const auto ids = buffers.host_ids(moe_layer).first(choices);
  std::vector<std::uint8_t> on_gpu(choices);
  const auto& slots = weights.experts.slot_of[static_cast<std::size_t>(moe_layer)];
  for (std::size_t i = 0; i < choices; ++i) on_gpu[i] = slots[static_cast<std::size_t>(ids[i])] >= 0 ? 1 : 0;
  return host->run(moe_layer, ids, on_gpu, buffers.host_hidden().first(static_cast<std::size_t>(tokens) * c.hidden_size),
                   buffers.host_expert_rows().first(choices * c.hidden_size));
}

Status VulkanDecoder::State::run_chunk(std::span<const std::int32_t> tokens, int position, HostExperts* host) {
  const std::size_t hidden = model.config->hidden_size;
  buffers.step()[0] = static_cast<std::uint32_t>(position);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (Status s = embedding_row(*embed, tokens[t], buffers.host_input().subspan(t * hidden, hidden)); !s) return s;
  }
  auto forward = recorded_for(static_cast<int>(tokens.size()));
  if (!forward) return forward.error();
  const RecordedForward& f = **forward;
  for (std::size_t i = 0; i < f.segments.size(); ++i) {
    if (Status s = submit(f.segments[i]); !s) return s;
    if (profile) profile->collect(f.queries[i].first, f.queries[i].second);
    if (f.host_layer_after[i] >= 0) {
      if (Status s = run_host_experts(f.host_layer_after[i], static_cast<int>(tokens.size()), host); !s) return s;
    }
  }
  const std::size_t choices = tokens.size() * model.config->num_experts_per_tok;
  for (std::size_t l = 0; l < counts.size(); ++l) {
    for (int id : buffers.host_ids(static_cast<int>(l)).first(choices)) ++counts[l][static_cast<std::size_t>(id)];
  }
  return Ok{};
}

Result<std::unique_ptr<VulkanDecoder>> VulkanDecoder::create(ComputeContext& context, const DecoderModel& model) {
  auto state = std::make_unique<State>();
  state->context = &context;
  state->model = model;
  const model::ModelConfig& c = *model.config;
  state->embed = model.tensor("model.embed_tokens.weight");
  if (!state->embed || state->embed->shape.size() != 2 || traits(state->embed->dtype).quantized) {
    return make_error("the GPU decoder needs model.embed_tokens.weight as a float matrix (convert with --dense source)");
  }
  if (c.head_dim % 2 != 0 || c.head_dim > shaders::kDecoderMaxHeadDim || c.num_key_value_heads == 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0) {
    return make_error("attention shape (heads " + std::to_string(c.num_attention_heads) + ", kv heads " +
                      std::to_string(c.num_key_value_heads) + ", head_dim " + std::to_string(c.head_dim) +
                      ") is not one the GPU decoder runs");
  }
  auto ring = StagingRing::create(context, 64ull << 20);
  if (!ring) return ring.error();
  state->ring = std::move(*ring);
  auto weights = upload_weights(context, *state->ring, model);
  if (!weights) return weights.error();
  state->weights = std::move(*weights);
  auto kernels = KernelSet::create(context, state->weights.dense_formats, state->weights.experts.format,
                                   static_cast<std::uint32_t>(c.num_experts));
  if (!kernels) return kernels.error();
  state->kernels = std::move(*kernels);
  auto buffers = DecoderBuffers::create(context, *state->ring, c, model, state->weights);
  if (!buffers) return buffers.error();
  state->buffers = std::move(*buffers);
  if (Status s = state->init_commands(); !s) return s.error();
  state->profile = KernelProfile::from_environment(context);
  DecoderMemory& m = state->memory;
  m.dense = state->weights.dense->size();
  for (const auto& layer : state->weights.experts.layers) m.experts += layer ? layer->size() : 0;
  m.kv_cache = state->buffers.kv_bytes();
  m.activations = state->buffers.scratch_bytes() + state->weights.experts.slot_tables->size();
  m.host_visible = state->buffers.host_bytes() + state->ring->bytes();
  const auto& layout = model.container->index().experts;
  state->counts.assign(layout.layers, std::vector<std::uint64_t>(layout.experts, 0));
  return std::unique_ptr<VulkanDecoder>(new VulkanDecoder(std::move(state)));
}

VulkanDecoder::VulkanDecoder(std::unique_ptr<State> state) : state_(std::move(state)) {}
VulkanDecoder::~VulkanDecoder() = default;

Status VulkanDecoder::forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                              HostExperts* host) {
  State& s = *state_;
  if (tokens.empty()) return make_error("forward needs at least one token");
  if (start_position + static_cast<int>(tokens.size()) > s.model.max_context) {
    return make_error("the context is full (" + std::to_string(s.model.max_context) + " positions): plan a larger --ctx");
  }
  for (auto& layer : s.counts) std::fill(layer.begin(), layer.end(), 0);
  const std::size_t chunk = static_cast<std::size_t>(s.model.max_batch_tokens);
  for (std::size_t first = 0; first < tokens.size(); first += chunk) {
    const auto part = tokens.subspan(first, std::min(chunk, tokens.size() - first));
    if (Status st = s.run_chunk(part, start_position + static_cast<int>(first), host); !st) return st;
  }
  const auto out = s.buffers.host_logits();
  std::copy(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(logits.size()), logits.begin());
  return Ok{};
}

const DecoderMemory& VulkanDecoder::memory() const { return state_->memory; }

void VulkanDecoder::add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const {
  for (std::size_t l = 0; l < counts.size() && l < state_->counts.size(); ++l) {
    for (std::size_t e = 0; e < counts[l].size() && e < state_->counts[l].size(); ++e) counts[l][e] += state_->counts[l][e];
  }
}

std::vector<std::string> VulkanDecoder::kernel_names() const { return state_->kernels.names(); }

std::string VulkanDecoder::device_name() const { return state_->context->facts().name; }

bool VulkanDecoder::hybrid() const {
  const GpuExperts& e = state_->weights.experts;
  for (std::size_t l = 0; l < e.slot_of.size(); ++l) {
    if (!e.all_in_vram(static_cast<int>(l))) return true;
  }
  return false;
}

}  // namespace coli::vulkan
