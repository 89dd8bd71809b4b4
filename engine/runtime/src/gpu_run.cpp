#include "gpu_run.h"

#include <algorithm>
#include <map>

#include "coli/gpu/gpu_decoder.h"
#include "vulkan/decoder/vulkan_decoder.h"
#if COLI_HAS_CUDA_DECODER
#include "cuda/cuda_expert_parallel.h"
#endif

namespace coli::runtime {
namespace {

// The host half of a hybrid layer: the choices whose expert has no VRAM
// slot, computed from the expert store in rounds that fit its cache.
class StoreExperts final : public gpu::HostExperts {
 public:
  StoreExperts(ExpertStore& store, int top_k) : store_(store), top_k_(top_k) {}

  Status run(int moe_layer, std::span<const int> ids, std::span<const std::uint8_t> on_gpu, std::span<const float> x,
             std::span<float> y) override {
    const int tokens = static_cast<int>(ids.size()) / top_k_;
    const int round = store_.tokens_per_round(tokens);
    for (int first = 0; first < tokens; first += round) {
      const int last = std::min(tokens, first + round);
      std::vector<int> needed;
      std::vector<ExpertStore::FfnTask> tasks;
      for (std::size_t c = static_cast<std::size_t>(first * top_k_); c < static_cast<std::size_t>(last * top_k_); ++c) {
        if (on_gpu[c]) continue;
        needed.push_back(ids[c]);
        tasks.push_back({ids[c], static_cast<int>(c) / top_k_, static_cast<int>(c)});
      }
      if (needed.empty()) continue;
      if (Status s = store_.begin(moe_layer, needed); !s) return s;
      for (int e : store_.round_order(moe_layer)) {
        if (Status s = store_.wait(moe_layer, e); !s) return s;
      }
      store_.ffn_batch(moe_layer, x, y, tasks);
      store_.end(moe_layer);
    }
    return Ok{};
  }

  // In groups the cache can lease at once (a round's distinct experts fit
  // its evictable slots), each expert used as soon as its read has landed.
  Status with_records(int moe_layer, std::span<const int> experts, const RecordUse& use) override {
    const int count = static_cast<int>(experts.size());
    const int group = std::clamp(store_.tokens_per_round(count) * top_k_, 1, std::max(count, 1));
    for (int first = 0; first < count; first += group) {
      const std::span<const int> part = experts.subspan(static_cast<std::size_t>(first),
                                                        static_cast<std::size_t>(std::min(group, count - first)));
      if (Status s = store_.begin(moe_layer, part); !s) return s;
      Status used = Ok{};
      for (std::size_t i = 0; i < part.size() && used; ++i) {
        used = store_.wait(moe_layer, part[i]);
        if (!used) break;  // wait() closed the round
        const std::span<const std::byte> record = store_.record(moe_layer, part[i]);
        if (record.empty()) {
          used = make_error("expert " + std::to_string(part[i]) + " of MoE layer " + std::to_string(moe_layer) +
                            " is not in host memory, so it cannot be copied to the GPU");
        } else {
          used = use(static_cast<std::size_t>(first) + i, record);
        }
      }
      if (!used) {
        store_.end(moe_layer);  // a round wait() already closed stays closed
        return used;
      }
      store_.end(moe_layer);
    }
    return Ok{};
  }

 private:
  ExpertStore& store_;
  int top_k_;
};

}  // namespace

struct GpuRun::State {
  std::unique_ptr<vulkan::ComputeContext> context;  // backend "vulkan" only
  std::map<std::string, gpu::DecoderTensor> tensors;
  std::unique_ptr<gpu::GpuDecoder> decoder;  // destroyed before the context (declared after)
  std::unique_ptr<StoreExperts> host;

  Status start_vulkan(const ModelOptions& options, const gpu::DecoderModel& model);
  Status start_cuda(const ModelOptions& options, const gpu::DecoderModel& model);
};

Status GpuRun::State::start_vulkan(const ModelOptions& options, const gpu::DecoderModel& model) {
  vulkan::ContextOptions context_options;
  context_options.device_index = options.gpu_index;
  context_options.shared_memory_limit_bytes = options.gpu_shared_memory_limit;
  auto created = vulkan::ComputeContext::create(context_options);
  if (!created) {
    return make_error("the plan runs on Vulkan device " + std::to_string(options.gpu_index) + ", but " +
                      created.error().message);
  }
  context = std::move(*created);
  auto made = vulkan::VulkanDecoder::create(*context, model);
  if (!made) return made.error();
  decoder = std::move(*made);
  return Ok{};
}

Status GpuRun::State::start_cuda([[maybe_unused]] const ModelOptions& options,
                                 [[maybe_unused]] const gpu::DecoderModel& model) {
#if COLI_HAS_CUDA_DECODER
  auto made = cuda::create_cuda_decoder(options.gpu_index, model);  // expert parallel when model.devices is given
  if (!made) return made.error();
  decoder = std::move(*made);
  return Ok{};
#else
  return make_error(std::string(kNoCudaBackend));
#endif
}

Result<std::vector<std::vector<int>>> vram_experts_of(const ModelOptions& options, const container::ExpertLayout& layout) {
  std::vector<std::vector<int>> out(layout.layers);
  if (!options.expert_gpu.empty()) {  // expert parallel: the experts some GPU holds (the decoder checks the rest)
    for (std::size_t l = 0; l < out.size() && l < options.expert_gpu.size(); ++l) {
      for (std::size_t e = 0; e < options.expert_gpu[l].size(); ++e) {
        if (options.expert_gpu[l][e] >= 0) out[l].push_back(static_cast<int>(e));
      }
    }
    return out;
  }
  if (options.vram_experts.empty()) {
    for (auto& layer : out) {
      for (std::uint32_t e = 0; e < layout.experts; ++e) layer.push_back(static_cast<int>(e));
    }
    return out;
  }
  if (options.vram_experts.size() != layout.layers) {
    return make_error("the VRAM tier lists " + std::to_string(options.vram_experts.size()) + " MoE layers; the model has " +
                      std::to_string(layout.layers) + ": re-plan for this model");
  }
  for (std::size_t l = 0; l < out.size(); ++l) {
    for (int e : options.vram_experts[l]) {
      if (e < 0 || static_cast<std::uint32_t>(e) >= layout.experts) {
        return make_error("the VRAM tier names expert " + std::to_string(e) + " of MoE layer " + std::to_string(l) +
                          "; the model has " + std::to_string(layout.experts) + " per layer: re-plan");
      }
    }
    out[l] = options.vram_experts[l];
  }
  return out;
}

bool every_expert_in_vram(const std::vector<std::vector<int>>& vram, const container::ExpertLayout& layout) {
  return std::all_of(vram.begin(), vram.end(), [&](const std::vector<int>& layer) { return layer.size() == layout.experts; });
}

Result<std::unique_ptr<GpuRun>> GpuRun::start(const ModelOptions& options, const container::ContainerReader& reader,
                                              const model::ModelConfig& config, const DenseWeights& dense,
                                              std::vector<std::vector<int>> vram, ExpertStore* experts) {
  auto state = std::make_unique<State>();
  for (const container::TensorEntry& entry : reader.index().tensors) {
    state->tensors[entry.name] = {entry.dtype, entry.shape, dense.bytes_of(entry.name), entry.offset, entry.bytes};
  }
  gpu::DecoderModel model;
  model.config = &config;
  model.tensor = [&tensors = state->tensors](const std::string& name) -> const gpu::DecoderTensor* {
    const auto found = tensors.find(name);
    return found == tensors.end() ? nullptr : &found->second;
  };
  model.container = &reader;
  model.vram_experts = std::move(vram);
  if (options.gpu_devices.empty() != options.expert_gpu.empty() || (!options.gpu_devices.empty() && options.backend != "cuda")) {
    return make_error("an expert-parallel plan needs both its GPUs (gpu_devices) and its placement (expert_gpu), on the "
                      "CUDA backend: re-plan with --gpu-backend cuda");
  }
  model.devices = options.gpu_devices;
  model.expert_gpu = options.expert_gpu;
  model.device_cpus = options.gpu_device_cpus;
  model.exchange = options.gpu_exchange_nccl ? gpu::ExpertExchange::nccl : gpu::ExpertExchange::automatic;
  model.max_context = options.max_context;
  model.max_batch_tokens = std::max(1, options.gpu_batch_tokens);
  model.exact_activations = options.gpu_kernel == "exact";
  if (options.gpu_host_experts == "upload") model.host_experts = gpu::HostExpertMode::upload;
  else if (options.gpu_host_experts == "cpu") model.host_experts = gpu::HostExpertMode::cpu;
  else if (options.gpu_host_experts != "measured") {
    return make_error("--gpu-host-experts " + options.gpu_host_experts + " is not one of measured, upload, cpu");
  }
  const Status started = options.backend == "cuda" ? state->start_cuda(options, model) : state->start_vulkan(options, model);
  if (!started) return started.error();
  if (state->decoder->hybrid()) {
    if (!experts) return make_error("a hybrid GPU plan needs the host expert store (a coli bug)");
    state->host = std::make_unique<StoreExperts>(*experts, static_cast<int>(config.num_experts_per_tok));
  }
  return std::unique_ptr<GpuRun>(new GpuRun(std::move(state)));
}

GpuRun::GpuRun(std::unique_ptr<State> state) : state_(std::move(state)) {}
GpuRun::~GpuRun() = default;

Status GpuRun::forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                       std::vector<std::vector<std::uint64_t>>& routing_counts) {
  if (Status s = state_->decoder->forward(tokens, start_position, logits, state_->host.get()); !s) return s;
  state_->decoder->add_routing_counts(routing_counts);
  return Ok{};
}

GpuMemoryStats GpuRun::memory() const {
  const gpu::DecoderMemory& m = state_->decoder->memory();
  GpuMemoryStats out;
  out.device = state_->decoder->device_name();
  out.dense_bytes = m.dense;
  out.expert_bytes = m.experts;
  out.kv_cache_bytes = m.kv_cache;
  out.activation_bytes = m.activations;
  out.page_rounding_bytes = m.page_rounding;
  out.host_visible_bytes = m.host_visible;
  out.device_measured_bytes = m.device_measured;
  out.launch_measured_bytes = m.launch_measured;
  out.graph_segments = m.graph_segments;
  out.kernels = state_->decoder->kernel_names();
  return out;
}

}  // namespace coli::runtime
