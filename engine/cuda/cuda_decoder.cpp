#include "cuda/cuda_decoder.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <utility>

#include "coli/forward/ops.h"
#include "cuda/cuda_hybrid_prefill.h"
#include "cuda/cuda_prefill.h"
#include "cuda/pinned.h"
#include "cuda/cuda_step.h"
#include "cuda/kernel_timer.h"

namespace coli::cuda {
namespace {

// What the kernels cannot take, refused before anything is allocated.
Status check_model(const gpu::DecoderModel& model, const gpu::DecoderTensor* embed) {
  const model::ModelConfig& c = *model.config;
  if (!embed || embed->shape.size() != 2 || embed->shape[1] != c.hidden_size || traits(embed->dtype).quantized ||
      embed->bytes.empty()) {
    return make_error("the CUDA decoder needs model.embed_tokens.weight in host memory as a float matrix "
                      "(convert with --dense source)");
  }
  if (c.head_dim % 2 != 0 || c.head_dim > kernels::cuda::decoder::kMaxHeadDim || c.num_key_value_heads == 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0) {
    return make_error("attention shape (heads " + std::to_string(c.num_attention_heads) + ", kv heads " +
                      std::to_string(c.num_key_value_heads) + ", head_dim " + std::to_string(c.head_dim) +
                      ") is not one the CUDA decoder runs");
  }
  const container::ExpertLayout& layout = model.container->index().experts;
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts ||
      c.num_experts_per_tok > static_cast<std::uint64_t>(kernels::cuda::kMaxSelectedExperts) ||
      c.num_experts > static_cast<std::uint64_t>(kernels::cuda::decoder::kMaxRoutedExperts)) {
    return make_error("top-" + std::to_string(c.num_experts_per_tok) + " of " + std::to_string(c.num_experts) +
                      " experts is not a routing the CUDA decoder runs");
  }
  if (model.vram_experts.size() != layout.layers) {
    return make_error("the VRAM tier lists " + std::to_string(model.vram_experts.size()) + " MoE layers; the model has " +
                      std::to_string(layout.layers) + ": re-plan for this model");
  }
  return Ok{};
}

Result<std::string> select_device(int index) {
  const kernels::cuda::CudaDeviceCount count = kernels::cuda::cuda_device_count();
  if (count.devices == 0) return make_error("the CUDA decoder needs CUDA device " + std::to_string(index) + ", but " + count.reason);
  if (index < 0 || index >= count.devices) {
    return make_error("the CUDA decoder needs CUDA device " + std::to_string(index) + ", but this machine has " +
                      std::to_string(count.devices) + " (0.." + std::to_string(count.devices - 1) + "): re-plan here");
  }
  if (Status s = cuda_call("cudaSetDevice(" + std::to_string(index) + ")", cudaSetDevice(index)); !s) return s.error();
  cudaDeviceProp props{};
  if (Status s = cuda_call("cudaGetDeviceProperties", cudaGetDeviceProperties(&props, index)); !s) return s.error();
  return std::string(props.name);
}

// One captured piece of the step; a hybrid MoE layer ends one after its
// routing, and the host computes its other experts before the next.
struct Segment {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int host_layer = -1;  // the MoE layer the host computes during this segment, or -1
  cudaEvent_t inputs_sent = nullptr;  // recorded once that layer's ids and input are in pinned memory
};

void destroy(const Segment& segment) {
  if (segment.exec) cudaGraphExecDestroy(segment.exec);
  if (segment.graph) cudaGraphDestroy(segment.graph);
  if (segment.inputs_sent) cudaEventDestroy(segment.inputs_sent);
}

// The uncaptured warm-up: no host work (its output is discarded).
class NoHostWork final : public StepSegments {
 public:
  Status end(int /*moe_layer*/) override { return Ok{}; }
};
class NoBatchHostWork final : public BatchHostExperts {
 public:
  Status send(int /*moe_layer*/, int /*tokens*/) override { return Ok{}; }
  Status complete(int /*moe_layer*/, int /*tokens*/) override { return Ok{}; }
};

}  // namespace

struct CudaDecoder::State {
  int device = 0;
  std::string device_name;
  gpu::DecoderModel model;
  const gpu::DecoderTensor* embed = nullptr;
  CudaWeights weights;
  StepBuffers buffers;
  BatchBuffers batch;  // the grouped-GEMM prefill's (empty: prompts run token by token)
  std::unique_ptr<HybridBatch> host_batch;  // a hybrid plan's prefill batches: the host's experts
  cudaStream_t stream = nullptr;
  std::vector<Segment> segments;  // one token's step (one segment unless hybrid), replayed per token
  Segment head;                   // final norm and lm_head, after a forward's last token
  Pinned input;      // float[batch][hidden]: embedding rows
  Pinned positions;  // int[batch]
  Pinned logits;     // float[vocab]
  Pinned counts;     // unsigned[moe layers][experts]
  Pinned host_ids;   // int[top_k]: a hybrid layer's choices
  Pinned host_h;     // float[hidden]: its input
  Pinned host_rows;  // float[top_k][hidden]: the rows the host computed
  std::map<std::string, int> launches;  // per step, by kernel
  std::map<std::string, int> batch_launches;  // per prefill batch, by kernel
  gpu::DecoderMemory memory;
  std::vector<std::vector<std::uint64_t>> routing;  // of the last forward
  std::unique_ptr<KernelTimer> timer;  // COLI_GPU_PROFILE=1: steps run uncaptured, timed per kernel
  std::size_t free_before = 0;  // the device's free memory before the decoder was made
  bool answers = true;          // ExpertRank::answers

  ~State() {
    timer.reset();  // prints its table, while the stream still exists
    if (stream) cudaStreamSynchronize(stream);
    for (const Segment& segment : segments) destroy(segment);
    destroy(head);
    if (stream) cudaStreamDestroy(stream);
  }
  class CaptureSegments;
  bool hybrid() const;
  Status capture();
  Status stage_embeddings(std::span<const std::int32_t> tokens, int position);
  Status run_chunk(std::span<const std::int32_t> tokens, int position, gpu::HostExperts* host);
  Status run_batch(std::span<const std::int32_t> tokens, int position, gpu::HostExperts* host);
  Status run_host_experts(const Segment& segment, gpu::HostExperts* host);
  Status run_step(gpu::HostExperts* host);
  Status finish(std::span<float> out);
};

// Captures the step into segments: begin() starts one; at a hybrid layer
// (from record_step) send() copies its ids and input to pinned memory and
// records an event the host waits for, so the host starts on its experts
// while the device's own run on; end() closes the segment and starts the
// next with the host's rows copied up; close(-1) ends the last.
class CudaDecoder::State::CaptureSegments final : public StepSegments {
 public:
  explicit CaptureSegments(State& s) : s_(s) {}
  Status begin() {
    return cuda_call("cudaStreamBeginCapture", cudaStreamBeginCapture(s_.stream, cudaStreamCaptureModeThreadLocal));
  }
  // Ends the capture into `out` (graph kept for destruction even when instantiation fails).
  Status close_into(Segment& out) {
    const Status ended = cuda_call("cudaStreamEndCapture", cudaStreamEndCapture(s_.stream, &out.graph));
    if (!ended) return ended;
    return cuda_call("cudaGraphInstantiate", cudaGraphInstantiate(&out.exec, out.graph, 0));
  }
  Status close(int host_layer) {
    Segment& segment = s_.segments.emplace_back();
    segment.host_layer = host_layer;
    segment.inputs_sent = std::exchange(inputs_sent_, nullptr);
    return close_into(segment);
  }
  Status send(int /*moe_layer*/) override {
    StepBuffers& b = s_.buffers;
    for (Status s : {cuda_call("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&inputs_sent_, cudaEventDisableTiming)),
                     cuda_call("cudaMemcpyAsync (hybrid ids)", cudaMemcpyAsync(s_.host_ids.as<int>(), b.ids.data(),
                                                                               s_.host_ids.bytes(), cudaMemcpyDeviceToHost, s_.stream)),
                     cuda_call("cudaMemcpyAsync (hybrid input)", cudaMemcpyAsync(s_.host_h.as<float>(), b.h.data(),
                                                                                 s_.host_h.bytes(), cudaMemcpyDeviceToHost, s_.stream)),
                     cuda_call("cudaEventRecordWithFlags (hybrid inputs sent)",
                               cudaEventRecordWithFlags(inputs_sent_, s_.stream, cudaEventRecordExternal))}) {
      if (!s) return s;
    }
    return Ok{};
  }
  Status end(int moe_layer) override {
    StepBuffers& b = s_.buffers;
    for (Status s : {close(moe_layer), begin(),
                     cuda_call("cudaMemcpyAsync (hybrid rows)", cudaMemcpyAsync(b.host_rows.data(), s_.host_rows.as<float>(),
                                                                                s_.host_rows.bytes(), cudaMemcpyHostToDevice, s_.stream))}) {
      if (!s) return s;
    }
    return Ok{};
  }

  ~CaptureSegments() override {
    if (inputs_sent_) cudaEventDestroy(inputs_sent_);  // a capture that failed between send() and end()
  }

 private:
  State& s_;
  cudaEvent_t inputs_sent_ = nullptr;
};

bool CudaDecoder::State::hybrid() const {
  const auto& host = weights.experts.host_experts;
  return std::any_of(host.begin(), host.end(), [](const std::vector<int>& layer) { return !layer.empty(); });
}

// Runs the step (and a prefill batch) once uncaptured (every kernel's module
// loaded, its launch checked with a name, the position 0), then captures the
// step into the graph.
Status CudaDecoder::State::capture() {
  const model::ModelConfig& c = *model.config;
  std::map<std::string, int> warmup;
  const int zero = 0;
  if (Status s = buffers.position.upload(&zero, sizeof zero); !s) return s;
  const std::vector<float> x(c.hidden_size, 0.0f);
  if (Status s = buffers.x.upload(x.data(), x.size() * sizeof(float)); !s) return s;
  // cudaMemcpy from pageable memory may return before its DMA lands, and the
  // legacy stream does not order our non-blocking one: wait for every upload.
  if (Status s = kernels::cuda::synchronize(); !s) return s;
  NoHostWork uncaptured;
  if (Status s = record_step(stream, c, weights, buffers, warmup, uncaptured); !s) return s;
  // The prefill's kernels too: CUDA loads a kernel's module at its first
  // launch, which must not happen behind COLI_GPU_PROFILE's gate (it hangs
  // there). Two zero rows at positions 0 and 1, which every forward rewrites.
  if (batch.tokens > 0) {
    NoBatchHostWork no_host;  // the host's experts' rows stay as they are: the output is discarded
    for (Status s : {cuda_call("cudaMemsetAsync (warm-up batch)",
                               cudaMemsetAsync(batch.x.data(), 0, 2 * c.hidden_size * sizeof(float), stream)),
                     record_batch(stream, c, weights, buffers, batch, 2, model.exact_activations, warmup, &no_host)}) {
      if (!s) return s;
    }
  }
  if (Status s = record_head(stream, c, weights, buffers, warmup); !s) return s;
  if (Status s = cuda_call("the CUDA decoder's first step (cudaStreamSynchronize)", cudaStreamSynchronize(stream)); !s) return s;
  CaptureSegments capture(*this);
  if (Status s = capture.begin(); !s) return s;
  const Status recorded = record_step(stream, c, weights, buffers, launches, capture);
  const Status closed = capture.close(-1);  // ends the capture even after an error
  if (!recorded) return recorded;
  if (!closed) return closed;
  if (Status s = capture.begin(); !s) return s;
  const Status head_recorded = record_head(stream, c, weights, buffers, launches);
  const Status head_closed = capture.close_into(head);
  if (!head_recorded) return head_recorded;
  if (!head_closed) return head_closed;
  // The warm-up's routing is no one's.
  return cuda_call("cudaMemsetAsync (routing counts)", cudaMemsetAsync(buffers.counts.data(), 0, buffers.counts.bytes(), stream));
}

// The chunk's embedding rows and positions into the pinned buffers.
Status CudaDecoder::State::stage_embeddings(std::span<const std::int32_t> tokens, int position) {
  const std::size_t hidden = model.config->hidden_size;
  const forward::DenseMatrix table{embed->dtype, static_cast<int>(embed->shape[0]), static_cast<int>(hidden),
                                   embed->bytes.data()};
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || static_cast<std::uint64_t>(tokens[t]) >= embed->shape[0]) {
      return make_error("token id " + std::to_string(tokens[t]) + " is outside the vocabulary (0.." +
                        std::to_string(embed->shape[0] - 1) + ")");
    }
    forward::dense_row(table, tokens[t], std::span(input.as<float>() + t * hidden, hidden));
    positions.as<int>()[t] = position + static_cast<int>(t);
  }
  return Ok{};
}

// Per token: its row and position copied up and the step replayed, all
// queued on the stream; one wait at the end so the pinned rows can be reused.
Status CudaDecoder::State::run_chunk(std::span<const std::int32_t> tokens, int position, gpu::HostExperts* host) {
  const std::size_t hidden = model.config->hidden_size;
  if (Status s = stage_embeddings(tokens, position); !s) return s;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    for (Status s : {cuda_call("cudaMemcpyAsync (embedding row)",
                               cudaMemcpyAsync(buffers.x.data(), input.as<float>() + t * hidden, hidden * sizeof(float),
                                               cudaMemcpyHostToDevice, stream)),
                     cuda_call("cudaMemcpyAsync (position)",
                               cudaMemcpyAsync(buffers.position.data(), positions.as<int>() + t, sizeof(int),
                                               cudaMemcpyHostToDevice, stream))}) {
      if (!s) return s;
    }
    if (Status s = run_step(host); !s) return s;
  }
  return cuda_call("cudaStreamSynchronize (decoder steps)", cudaStreamSynchronize(stream));
}

// The chunk as one prefill batch (record_batch), then its last token's
// hidden state where the head and the next decode step read x.
Status CudaDecoder::State::run_batch(std::span<const std::int32_t> tokens, int position, gpu::HostExperts* host) {
  const std::size_t hidden = model.config->hidden_size;
  const int count = static_cast<int>(tokens.size());
  if (Status s = stage_embeddings(tokens, position); !s) return s;
  for (Status s : {cuda_call("cudaMemcpyAsync (embedding rows)",
                             cudaMemcpyAsync(batch.x.data(), input.as<float>(), tokens.size() * hidden * sizeof(float),
                                             cudaMemcpyHostToDevice, stream)),
                   cuda_call("cudaMemcpyAsync (position)", cudaMemcpyAsync(buffers.position.data(), positions.as<int>(),
                                                                           sizeof(int), cudaMemcpyHostToDevice, stream))}) {
    if (!s) return s;
  }
  if (timer && !host_batch) {
    std::map<std::string, int> uncounted;
    if (Status s = timer->begin(); !s) return s;
    const Status ran = record_batch(stream, *model.config, weights, buffers, batch, count, model.exact_activations,
                                    uncounted, nullptr, timer.get());
    const Status timed = timer->collect();
    if (!ran) return ran;
    if (!timed) return timed;
  } else {
    batch_launches.clear();
    if (host_batch) host_batch->start(host, batch_launches, nullptr);
    const Status s = record_batch(stream, *model.config, weights, buffers, batch, count, model.exact_activations,
                                  batch_launches, host_batch.get());
    if (!s) return s;
  }
  for (Status s : {cuda_call("cudaMemcpyAsync (last hidden row)",
                             cudaMemcpyAsync(buffers.x.data(), at(batch.x, (tokens.size() - 1) * hidden),
                                             hidden * sizeof(float), cudaMemcpyDeviceToDevice, stream)),
                   cuda_call("cudaStreamSynchronize (prefill batch)", cudaStreamSynchronize(stream))}) {
    if (!s) return s;
  }
  return Ok{};
}

// One token's step: the captured segments (and the host's experts between
// them), or under COLI_GPU_PROFILE=1 the same launches uncaptured and timed.
Status CudaDecoder::State::run_step(gpu::HostExperts* host) {
  if (timer && !hybrid()) {
    std::map<std::string, int> uncounted;
    NoHostWork none;
    if (Status s = timer->begin(); !s) return s;
    const Status ran = record_step(stream, *model.config, weights, buffers, uncounted, none, timer.get());
    const Status timed = timer->collect();  // opens the gate even after a failed launch
    return ran ? timed : ran;
  }
  for (const Segment& segment : segments) {
    if (Status s = cuda_call("cudaGraphLaunch (decoder step)", cudaGraphLaunch(segment.exec, stream)); !s) return s;
    if (segment.host_layer < 0) continue;
    if (Status s = run_host_experts(segment, host); !s) return s;
  }
  return Ok{};
}

// A hybrid layer's choices without a VRAM slot, computed by the host into
// the pinned rows the next segment copies up, once the segment has sent
// the layer's ids and input (the device's own experts go on meanwhile).
Status CudaDecoder::State::run_host_experts(const Segment& segment, gpu::HostExperts* host) {
  const int moe_layer = segment.host_layer;
  if (!host) return make_error("MoE layer " + std::to_string(moe_layer) + " has experts outside VRAM but no host expert store");
  if (Status s = cuda_call("cudaEventSynchronize (hybrid inputs)", cudaEventSynchronize(segment.inputs_sent)); !s) return s;
  const std::size_t k = model.config->num_experts_per_tok, hidden = model.config->hidden_size;
  const auto layer = static_cast<std::size_t>(moe_layer);
  const std::span<const int> ids(host_ids.as<int>(), k);
  std::vector<std::uint8_t> on_gpu(k);
  for (std::size_t i = 0; i < k; ++i) {
    on_gpu[i] = weights.experts.on_host(layer, ids[i]) ? 0 : 1;
    // Another GPU's choice: add_host_rows adds this row, which must add nothing.
    if (on_gpu[i] && !weights.experts.in_vram(layer, ids[i])) std::fill_n(host_rows.as<float>() + i * hidden, hidden, 0.0f);
  }
  return host->run(moe_layer, ids, on_gpu, std::span<const float>(host_h.as<float>(), model.config->hidden_size),
                   std::span<float>(host_rows.as<float>(), k * model.config->hidden_size));
}

// The last token's logits (the head replayed once) and the forward's
// routing, downloaded once.
Status CudaDecoder::State::finish(std::span<float> out) {
  for (Status s : {cuda_call("cudaGraphLaunch (lm_head)", cudaGraphLaunch(head.exec, stream)),
                   cuda_call("cudaMemcpyAsync (logits)", cudaMemcpyAsync(logits.as<float>(), buffers.logits.data(),
                                                                         buffers.logits.bytes(), cudaMemcpyDeviceToHost, stream)),
                   cuda_call("cudaMemcpyAsync (routing counts)",
                             cudaMemcpyAsync(counts.as<unsigned>(), buffers.counts.data(), buffers.counts.bytes(),
                                             cudaMemcpyDeviceToHost, stream)),
                   cuda_call("cudaMemsetAsync (routing counts)",
                             cudaMemsetAsync(buffers.counts.data(), 0, buffers.counts.bytes(), stream)),
                   cuda_call("cudaStreamSynchronize (logits)", cudaStreamSynchronize(stream))}) {
    if (!s) return s;
  }
  const std::size_t n = std::min(out.size(), buffers.logits.bytes() / sizeof(float));
  std::copy(logits.as<float>(), logits.as<float>() + n, out.begin());
  const std::size_t experts = model.config->num_experts;
  for (std::size_t l = 0; l < routing.size(); ++l) {
    for (std::size_t e = 0; e < experts; ++e) routing[l][e] = counts.as<unsigned>()[l * experts + e];
  }
  return Ok{};
}

Result<std::unique_ptr<CudaDecoder>> CudaDecoder::create(int device_index, const gpu::DecoderModel& model) {
  auto made = prepare(device_index, model, ExpertRank{});
  if (!made) return made.error();
  if (Status s = (*made)->capture(); !s) return s.error();
  return made;
}

Result<std::unique_ptr<CudaDecoder>> CudaDecoder::prepare(int device_index, const gpu::DecoderModel& model,
                                                          const ExpertRank& rank) {
  auto state = std::make_unique<State>();
  auto name = select_device(device_index);
  if (!name) return name.error();
  state->device = device_index;
  state->device_name = std::move(*name);
  state->model = model;
  state->embed = model.tensor("model.embed_tokens.weight");
  if (Status s = check_model(model, state->embed); !s) return s.error();
  // The device's own count of what this decoder takes (plan vs actual):
  // free memory now, with the context made, against free memory at the end.
  std::size_t total = 0;
  if (Status s = cuda_call("cudaMemGetInfo", cudaMemGetInfo(&state->free_before, &total)); !s) return s.error();
  const model::ModelConfig& c = *model.config;
  auto weights = upload_cuda_weights(model, rank.remote);
  if (!weights) return weights.error();
  state->weights = std::move(*weights);
  auto buffers = make_step_buffers(c, state->weights, model.max_context, !model.exact_activations);
  if (!buffers) return buffers.error();
  state->buffers = std::move(*buffers);
  state->buffers.reduce = rank.reduce;
  state->answers = rank.answers;
  int most_host_experts = 0;
  for (const std::vector<int>& host : state->weights.experts.host_experts) {
    most_host_experts = std::max(most_host_experts, static_cast<int>(host.size()));
  }
  const auto staging = static_cast<int>(
      staging_records(static_cast<u64>(most_host_experts), state->weights.experts.layout.record_stride));
  auto prefill = make_batch_buffers(c, model.max_batch_tokens, staging, state->weights.experts.layout.record_stride);
  if (!prefill) return prefill.error();
  state->batch = std::move(*prefill);
  const std::size_t batch = static_cast<std::size_t>(std::max(1, model.max_batch_tokens));
  const std::size_t moe_layers = state->weights.experts.slabs.size();
  for (Status s : {cuda_call("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking)),
                   state->input.allocate(batch * c.hidden_size * sizeof(float)),
                   state->positions.allocate(batch * sizeof(int)), state->logits.allocate(state->buffers.logits.bytes()),
                   state->counts.allocate(state->buffers.counts.bytes()),
                   state->host_ids.allocate(c.num_experts_per_tok * sizeof(int)),
                   state->host_h.allocate(c.hidden_size * sizeof(float)),
                   state->host_rows.allocate(c.num_experts_per_tok * c.hidden_size * sizeof(float))}) {
    if (!s) return s.error();
  }
  if (state->batch.tokens > 0 && state->hybrid()) {
    auto host_batch = HybridBatch::create(state->model, state->weights, state->batch, state->stream);
    if (!host_batch) return host_batch.error();
    state->host_batch = std::move(*host_batch);
  }
  gpu::DecoderMemory& m = state->memory;
  m.dense = state->weights.dense.bytes();
  m.experts = state->weights.experts.bytes();
  m.kv_cache = state->buffers.kv.bytes();
  m.activations = state->buffers.activation_bytes() + state->batch.bytes() + state->weights.experts.slot_tables.bytes();
  m.page_rounding = page_rounding(state->weights.dense.bytes()) + state->weights.experts.page_rounding() +
                    state->buffers.page_rounding() + state->batch.page_rounding();
  m.host_visible = state->input.bytes() + state->positions.bytes() + state->logits.bytes() + state->counts.bytes() +
                   state->host_ids.bytes() + state->host_h.bytes() + state->host_rows.bytes() +
                   (state->host_batch ? state->host_batch->pinned_bytes() : 0);
  state->routing.assign(moe_layers, std::vector<std::uint64_t>(c.num_experts, 0));
  return std::unique_ptr<CudaDecoder>(new CudaDecoder(std::move(state)));
}

// The first step, the capture and the device's own count of what the
// decoder took, from prepare()'s free memory on.
Status CudaDecoder::capture() {
  State& s = *state_;
  if (Status st = cuda_call("cudaSetDevice", cudaSetDevice(s.device)); !st) return st;
  std::size_t free_before_launch = 0, free_after_launch = 0, free_after = 0, total = 0;
  for (Status st : {cuda_call("cudaMemGetInfo", cudaMemGetInfo(&free_before_launch, &total)), s.capture(),
                    cuda_call("cudaMemGetInfo", cudaMemGetInfo(&free_after_launch, &total))}) {
    if (!st) return st;
  }
  s.timer = KernelTimer::from_environment(s.stream);
  if (Status st = cuda_call("cudaMemGetInfo", cudaMemGetInfo(&free_after, &total)); !st) return st;
  gpu::DecoderMemory& m = s.memory;
  m.device_measured = s.free_before > free_after ? s.free_before - free_after : 0;
  m.launch_measured = free_before_launch > free_after_launch ? free_before_launch - free_after_launch : 0;
  m.graph_segments = static_cast<int>(s.segments.size()) + 1;  // the step's and the head's
  return Ok{};
}

CudaDecoder::CudaDecoder(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudaDecoder::~CudaDecoder() = default;

Status CudaDecoder::forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                            gpu::HostExperts* host) {
  State& s = *state_;
  if (tokens.empty()) return make_error("forward needs at least one token");
  if (start_position < 0 || start_position + static_cast<int>(tokens.size()) > s.model.max_context) {
    return make_error("the context is full (" + std::to_string(s.model.max_context) + " positions): plan a larger --ctx");
  }
  if (Status st = cuda_call("cudaSetDevice", cudaSetDevice(s.device)); !st) return st;
  const std::size_t chunk = s.input.bytes() / (s.model.config->hidden_size * sizeof(float));
  for (std::size_t first = 0; first < tokens.size(); first += chunk) {
    const auto part = tokens.subspan(first, std::min(chunk, tokens.size() - first));
    const int position = start_position + static_cast<int>(first);
    // Batched when there are buffers for it (batch > 1) and more than one token.
    const Status st = s.batch.tokens > 0 && part.size() > 1 ? s.run_batch(part, position, host) : s.run_chunk(part, position, host);
    if (!st) return st;
  }
  return s.answers ? s.finish(logits) : Status(Ok{});
}

const gpu::DecoderMemory& CudaDecoder::memory() const { return state_->memory; }

void CudaDecoder::add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const {
  for (std::size_t l = 0; l < counts.size() && l < state_->routing.size(); ++l) {
    for (std::size_t e = 0; e < counts[l].size() && e < state_->routing[l].size(); ++e) counts[l][e] += state_->routing[l][e];
  }
}

std::vector<std::string> CudaDecoder::kernel_names() const {
  int total = 0;
  for (const auto& entry : state_->launches) total += entry.second;
  std::vector<std::string> out = {"cuda graphs: " + std::to_string(total) + " kernel launches per token in " +
                                  std::to_string(state_->segments.size()) +
                                  " segment(s), the last two (final norm, lm_head) once per forward; activations " +
                                  (state_->model.exact_activations ? "f32 (exact)" : "int8 for int8/int4 weights")};
  for (const auto& [name, count] : state_->launches) out.push_back(name + " x" + std::to_string(count));
  if (state_->batch.tokens > 0) {
    out.push_back("prefill in batches of up to " + std::to_string(state_->batch.tokens) +
                  " tokens, launches per batch (after the first batch):");
    for (const auto& [name, count] : state_->batch_launches) out.push_back(name + " x" + std::to_string(count));
  }
  if (state_->host_batch) out.push_back(state_->host_batch->tally().describe());
  return out;
}

bool CudaDecoder::hybrid() const { return state_->hybrid(); }

std::string CudaDecoder::device_name() const { return state_->device_name; }

}  // namespace coli::cuda
