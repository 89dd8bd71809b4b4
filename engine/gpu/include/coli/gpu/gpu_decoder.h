// The one seam for whole-decoder GPU backends (Vulkan, CUDA): what a decoder
// is given (DecoderModel: the config, dense tensors, the container with the
// experts, the plan's VRAM tier), what it reports (DecoderMemory) and what it
// does (GpuDecoder::forward). engine/runtime's GpuRun holds a GpuDecoder made
// for ModelOptions::backend and knows no backend's types beyond this header.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "coli/base/cpu_set.h"
#include "coli/base/result.h"
#include "coli/base/weight_format.h"
#include "coli/container/container.h"
#include "coli/model/model_config.h"

namespace coli::gpu {

// A dense tensor as the container holds it: in host memory (`bytes`), or
// only in the container file, from which it is read straight into VRAM.
struct DecoderTensor {
  WeightFormat dtype = WeightFormat::f32;  // as the container holds it
  std::vector<std::uint64_t> shape;
  std::span<const std::byte> bytes;  // empty: read it from the container
  std::uint64_t file_offset = 0;
  std::uint64_t file_bytes = 0;
};

// Experts without a VRAM slot, computed by the host (hybrid plans).
class HostExperts {
 public:
  virtual ~HostExperts() = default;
  // For every choice c whose on_gpu[c] is 0: y[c] = expert ids[c] of MoE layer
  // `moe_layer` applied to x[c / top_k] (x: tokens x hidden, y: choices x hidden).
  virtual Status run(int moe_layer, std::span<const int> ids, std::span<const std::uint8_t> on_gpu,
                     std::span<const float> x, std::span<float> y) = 0;
  // For a batch that copies experts up instead: calls use(i, record) for
  // every experts[i] of MoE layer `moe_layer` once its record (the
  // container's layout, record_bytes long) is in host memory, in an order
  // of the store's choosing; the bytes are valid during that call only.
  using RecordUse = std::function<Status(std::size_t index, std::span<const std::byte> record)>;
  virtual Status with_records(int moe_layer, std::span<const int> experts, const RecordUse& use) = 0;
};

// How a hybrid prefill batch computes the experts outside VRAM that its
// tokens chose (coli run --gpu-host-experts): `measured` copies an expert
// up when its tokens would take the CPU longer than the copy takes,
// from both times as this run measured them; `upload` and `cpu` force one.
enum class HostExpertMode { measured, upload, cpu };

// How the GPUs of an expert-parallel decoder (CUDA) sum each MoE layer's
// output: `automatic` is NCCL's all-reduce with two or more GPUs and none
// with one (one rank's sum is its own output, and a one-GPU run then needs
// no NCCL); `nccl` uses NCCL with one GPU too (checks the library and its
// captured all-reduce on a one-GPU machine).
enum class ExpertExchange { automatic, nccl };

struct DecoderModel {
  const model::ModelConfig* config = nullptr;
  // Dense tensors by Hugging Face name; nullptr when absent.
  std::function<const DecoderTensor*(const std::string&)> tensor;
  const container::ContainerReader* container = nullptr;  // routed experts are read from it
  // Per MoE layer, the experts held in VRAM (the plan's VRAM tier); a layer
  // listing every expert needs no host work.
  std::vector<std::vector<int>> vram_experts;
  int max_context = 4096;
  int max_batch_tokens = 128;  // tokens per submission (prefill runs in such chunks)
  // CUDA: f32 activations for int8/int4 weights too (reference accuracy);
  // by default a token's step quantises them to int8 once per producer for
  // the dp4a kernels. Vulkan computes f32 activations either way.
  bool exact_activations = false;
  HostExpertMode host_experts = HostExpertMode::measured;
  // Expert parallelism over the GPUs of one host (CUDA, issue 18). Empty:
  // the single-GPU decoder on the backend's device, with vram_experts above.
  // Otherwise the CUDA ordinals of the ranks (rank 0's logits are the
  // answer; dense weights are replicated on every one), and expert_gpu: per
  // MoE layer, per expert, the CUDA ordinal of the GPU that holds and
  // computes it (one of `devices`), or -1 (no GPU: rank 0's host computes
  // it, as a hybrid plan's): planner::ExpertParallelPlan's expert_gpu as it
  // is. vram_experts is then unused. device_cpus[r], when given: the
  // CPUs rank r's host thread runs on (its GPU's local NUMA node, from the
  // profile's CudaDevice::local_cpus); rank 0 runs on the calling thread,
  // which the engine's thread plan places, so device_cpus[0] is not applied
  // (plan the compute threads on GPU 0's node instead).
  std::vector<int> devices;
  std::vector<std::vector<int>> expert_gpu;
  std::vector<CpuSet> device_cpus;
  ExpertExchange exchange = ExpertExchange::automatic;
};

// Device memory by component, as allocated (plan vs actual).
struct DecoderMemory {
  std::uint64_t dense = 0;        // attention, norms, routers, shared experts, lm_head
  std::uint64_t experts = 0;      // expert slots of every MoE layer
  std::uint64_t kv_cache = 0;
  std::uint64_t activations = 0;  // per-batch scratch, rope table, slot tables
  std::uint64_t page_rounding = 0;  // what the driver's large pages add to the allocations above (CUDA)
  std::uint64_t host_visible = 0; // mapped or pinned host memory: staging, per-call input/output, routing
  // The device's used memory grown while the decoder was made (CUDA:
  // cudaMemGetInfo, so allocation rounding, graphs and modules included);
  // 0 = not measured (Vulkan).
  std::uint64_t device_measured = 0;
  // Of device_measured: what the warm-up launches and the capture grew it
  // by (kernel modules loaded at first use, their local memory, the graph
  // executables), and the graphs' count (the head's, and the step's: one,
  // or one per hybrid layer + 1).
  std::uint64_t launch_measured = 0;
  int graph_segments = 0;
  std::uint64_t vram() const { return dense + experts + kv_cache + activations + page_rounding; }
};

// The whole decoder on one GPU. Made by a backend's create() (VulkanDecoder,
// CudaDecoder); used through this interface only.
class GpuDecoder {
 public:
  virtual ~GpuDecoder() = default;
  // Runs `tokens` at positions start_position.. and writes the last one's
  // logits. `host` computes experts outside VRAM (may be null when every
  // expert is in VRAM).
  virtual Status forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                         HostExperts* host) = 0;
  virtual const DecoderMemory& memory() const = 0;
  // Adds the last forward's routing to counts[MoE layer][expert].
  virtual void add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const = 0;
  // The kernels the decoder made or captured, one line each.
  virtual std::vector<std::string> kernel_names() const = 0;
  // True when some MoE layer has experts outside VRAM.
  virtual bool hybrid() const = 0;
  // The device, in words ("NVIDIA H200", "llvmpipe ...").
  virtual std::string device_name() const = 0;
};

}  // namespace coli::gpu
