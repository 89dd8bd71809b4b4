// One token's decoder step on the CUDA device: the working buffers (one per
// role, sized from the model's shape and the context) and the launches of
// the whole step in order, which CudaDecoder captures once into a CUDA graph.
#pragma once

#include <array>
#include <map>
#include <string>

#include "cuda/cuda_weights.h"
#include "cuda/kernel_launch.h"

namespace coli::cuda {

// How one GPU of an expert-parallel decoder (cuda_expert_parallel.h) ends
// each MoE layer: rank 0 keeps x's residual and the shared expert, the
// others start the layer's output at zero and add only their own experts;
// sum() then adds x across the GPUs in place (NCCL's all-reduce), so every
// GPU holds the same hidden state. Captured into the step's graph.
class MoeReduce {
 public:
  virtual ~MoeReduce() = default;
  virtual bool keeps_residual() const = 0;
  virtual Status sum(void* stream, float* x, std::size_t floats) = 0;
};

struct StepBuffers {
  DeviceBuffer x, h, q, k, v, attn, scores, mlp_a, router_logits, act, shared_out, shared_gate, final_h, logits;
  DeviceBuffer position;  // int: the token's position, written before each replay
  DeviceBuffer choices;   // ExpertChoice[moe layers][top_k]
  DeviceBuffer counts;    // unsigned[moe layers][experts]: routing since the last download
  DeviceBuffer ids;       // int[top_k]: a hybrid layer's expert ids, for the host
  DeviceBuffer host_rows; // float[top_k][hidden]: a hybrid layer's rows the host computed
  DeviceBuffer rope;      // float[context][head_dim/2][2]
  DeviceBuffer arrivals;  // unsigned[1 + heads]: norm_route's block count, attention's per head (zero between launches)
  DeviceBuffer h_q, attn_q, act_q;  // int8 copies of h (or final_h), attn and act
  DeviceBuffer kv;        // float[layers][2][context][kv_width]
  int context = 0;
  MoeReduce* reduce = nullptr;  // expert parallel: set by the decoder (null: one GPU)
  // Views of h_q, attn_q and act_q, on when the step quantises that
  // activation (int8 activations asked for and its width a multiple of 32):
  // its consumers with q8_row or q4_g64 weights then take the int8 kernels.
  kernels::cuda::decoder::Q8Activations h8, attn8, act8;
  std::array<const DeviceBuffer*, 24> activation_buffers() const;  // every buffer but kv
  std::uint64_t activation_bytes() const;
  std::uint64_t page_rounding() const;  // cuda_layout.h's page_rounding over every buffer, kv too
};

// Errors name the CUDA allocation that failed. `int8_activations` false
// keeps every activation in f32 (DecoderModel::exact_activations).
Result<StepBuffers> make_step_buffers(const model::ModelConfig& c, const CudaWeights& w, int context,
                                      bool int8_activations);

// Where a hybrid MoE layer (experts outside VRAM) hands over to the host:
// after its routing (ids in StepBuffers::ids, input in h) the step calls
// send(), then launches the device's own experts (and the shared one), then
// end(); the host computes its experts in between, at the same time as
// the device, and its rows must be in host_rows when the next piece begins
// (add_host_rows adds them).
class StepSegments {
 public:
  virtual ~StepSegments() = default;
  virtual Status send(int /*moe_layer*/) { return Ok{}; }
  virtual Status end(int moe_layer) = 0;
};

// Told after every launch (COLI_GPU_PROFILE=1 times the kernels with it).
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  virtual void launched(const std::string& name) = 0;
};

// A device buffer as T*, `offset` elements in.
template <typename T = float>
T* at(const DeviceBuffer& b, std::size_t offset = 0) {
  return static_cast<T*>(b.data()) + offset;
}

// Launches in order, each checked; the first failure names its kernel.
class LaunchRecorder {
 public:
  LaunchRecorder(void* stream, std::map<std::string, int>& launches, LaunchObserver* observer)
      : stream_(stream), launches_(launches), observer_(observer) {}
  void* stream() const { return stream_; }
  Status check(const std::string& name, int code) {
    ++launches_[name];
    if (observer_ != nullptr) observer_->launched(name);
    return kernels::cuda::detail::launch_status(name + " launch", code);
  }

 private:
  void* stream_;
  std::map<std::string, int>& launches_;
  LaunchObserver* observer_;
};

// A layer's q/k preparation and its attention over the layer's KV cache in
// `step` (position and RoPE table from `step` too), for the given q, k, v
// and output rows: one token's step buffers or a prefill batch's. `scores`
// is the decode attention's partials (null for a batch).
struct AttentionArgs {
  kernels::cuda::decoder::QkPrep prep;
  kernels::cuda::decoder::Attention attention;
};
AttentionArgs attention_args(const model::ModelConfig& c, const CudaLayer& w, StepBuffers& step, int layer, float* q,
                             float* k, float* v, float* out, float* scores);

// Launches one token's step through every layer on `stream` (x in, x out);
// `launches` counts each kernel by name ("matvec q4_g64" ...); `segments`
// is called at every hybrid layer. Errors name the launch that failed.
Status record_step(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& b,
                   std::map<std::string, int>& launches, StepSegments& segments, LaunchObserver* observer = nullptr);
// The final norm and the lm_head of x into logits: once per forward, after
// its last token (a prompt's other tokens need no logits).
Status record_head(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& b,
                   std::map<std::string, int>& launches, LaunchObserver* observer = nullptr);

}  // namespace coli::cuda
