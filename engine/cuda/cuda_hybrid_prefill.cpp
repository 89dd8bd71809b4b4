#include "cuda/cuda_hybrid_prefill.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "coli/base/clock.h"
#include "cuda/cuda_layout.h"

namespace coli::cuda {
namespace {

using kernels::cuda::ExpertChoice;
using Clock = std::chrono::steady_clock;

// A record into pinned memory by every thread: one thread copies ~10 GB/s,
// well under what PCIe takes.
void copy_record(std::byte* to, std::span<const std::byte> from) {
  constexpr std::size_t kPiece = 256 << 10;
  const auto pieces = static_cast<long>((from.size() + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static)
  for (long p = 0; p < pieces; ++p) {
    const std::size_t first = static_cast<std::size_t>(p) * kPiece;
    std::memcpy(to + first, from.data() + first, std::min(kPiece, from.size() - first));
  }
}

std::string seconds_text(double s) {
  if (s <= 0) return "not measured";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f us", s * 1e6);
  return text;
}

}  // namespace

std::string HostBatchTally::describe() const {
  return "hybrid prefill: " + std::to_string(layers) + " host layer passes, " + std::to_string(uploaded) +
         " experts copied up (" + std::to_string(uploaded_bytes >> 20) + " MiB), " + std::to_string(on_cpu) +
         " computed on the CPU (" + std::to_string(cpu_choices) + " token choices); measured: copy " +
         seconds_text(costs.upload_per_expert) + " per expert, CPU " + seconds_text(costs.cpu_per_choice) +
         " per choice + " + seconds_text(costs.cpu_per_layer) + " per layer";
}

Result<std::unique_ptr<HybridBatch>> HybridBatch::create(const gpu::DecoderModel& model, const CudaWeights& weights,
                                                         BatchBuffers& batch, cudaStream_t stream) {
  std::unique_ptr<HybridBatch> h(new HybridBatch(model, weights, batch, stream));
  const model::ModelConfig& c = *model.config;
  const std::size_t tokens = static_cast<std::size_t>(batch.tokens), choices = tokens * c.num_experts_per_tok;
  const std::size_t pass = static_cast<std::size_t>(batch.staging_records) * weights.experts.layout.record_stride;
  for (Status s : {h->choices_.allocate(choices * sizeof(ExpertChoice)), h->inputs_.allocate(tokens * c.hidden_size * 4),
                   h->rows_.allocate(choices * c.hidden_size * 4), h->order_.allocate(choices * 4),
                   h->offsets_.allocate((c.num_experts + 1) * 4), h->bounce_[0].allocate(pass),
                   h->bounce_[1].allocate(pass),
                   cuda_call("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&h->sent_, cudaEventDisableTiming)),
                   cuda_call("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&h->bounce_free_[0], cudaEventDisableTiming)),
                   cuda_call("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&h->bounce_free_[1], cudaEventDisableTiming)),
                   cuda_call("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&h->side_, cudaStreamNonBlocking))}) {
    if (!s) return make_error("the CUDA decoder's hybrid prefill: " + s.error().message);
  }
  return h;
}

HybridBatch::~HybridBatch() {
  for (cudaEvent_t e : {sent_, bounce_free_[0], bounce_free_[1]}) {
    if (e) cudaEventDestroy(e);
  }
  if (side_) cudaStreamDestroy(side_);
}

std::uint64_t HybridBatch::pinned_bytes() const {
  std::uint64_t sum = bounce_[0].bytes() + bounce_[1].bytes();
  for (const Pinned* p : {&choices_, &inputs_, &rows_, &order_, &offsets_}) sum += p->bytes();
  return sum;
}

void HybridBatch::start(gpu::HostExperts* host, std::map<std::string, int>& launches, LaunchObserver* observer) {
  host_ = host;
  launches_ = &launches;
  observer_ = observer;
}

// The layer's choices (its input rows follow only when the CPU gets work).
Status HybridBatch::send(int /*moe_layer*/, int tokens) {
  const std::size_t choices = static_cast<std::size_t>(tokens) * model_.config->num_experts_per_tok;
  for (Status s : {cuda_call("cudaMemcpyAsync (hybrid batch choices)",
                             cudaMemcpyAsync(choices_.as<void>(), batch_.choices.data(), choices * sizeof(ExpertChoice),
                                             cudaMemcpyDeviceToHost, stream_)),
                   cuda_call("cudaEventRecord (hybrid batch sent)", cudaEventRecord(sent_, stream_))}) {
    if (!s) return s;
  }
  return Ok{};
}

Status HybridBatch::complete(int moe_layer, int tokens) {
  if (!host_) return make_error("MoE layer " + std::to_string(moe_layer) + " has experts outside VRAM but no host expert store");
  if (Status s = cuda_call("cudaEventSynchronize (hybrid batch choices)", cudaEventSynchronize(sent_)); !s) return s;
  const auto layer = static_cast<std::size_t>(moe_layer);
  const int slots = weights_.experts.slot_counts[layer];
  const int host_count = static_cast<int>(weights_.experts.host_experts[layer].size());
  const int choices = tokens * static_cast<int>(model_.config->num_experts_per_tok);
  // Each choice's host expert (index into host_experts), or -1: a VRAM slot or NaN routing.
  std::vector<int> host_index(static_cast<std::size_t>(choices), -1), counts(static_cast<std::size_t>(host_count), 0);
  const ExpertChoice* chosen = choices_.as<const ExpertChoice>();
  for (int c = 0; c < choices; ++c) {
    const int h = chosen[c].slot - slots;
    if (h < 0 || h >= host_count) continue;
    host_index[static_cast<std::size_t>(c)] = h;
    ++counts[static_cast<std::size_t>(h)];
  }
  const std::vector<HostExpertPlace> place = place_host_experts(counts, tally_.costs, model_.host_experts);
  std::vector<int> staged;
  for (int h = 0; h < host_count; ++h) {
    if (place[static_cast<std::size_t>(h)] == HostExpertPlace::upload) staged.push_back(h);
  }
  ++tally_.layers;
  if (!staged.empty()) {
    if (Status s = send_grouping(staged, host_index, counts); !s) return s;
    if (Status s = upload(moe_layer, staged, tokens); !s) return s;
  }
  return compute_on_cpu(moe_layer, place, host_index, tokens);
}

// order: the staged experts' choices, expert after expert in staging order;
// offsets[j]: where staged expert j's start (absolute: a pass of the
// staging slab reads offsets from its first expert on).
Status HybridBatch::send_grouping(std::span<const int> staged, std::span<const int> host_index,
                                  std::span<const int> counts) {
  std::vector<int> stage_of(counts.size(), -1);
  int* offsets = offsets_.as<int>();
  int total = 0;
  for (std::size_t j = 0; j < staged.size(); ++j) {
    stage_of[static_cast<std::size_t>(staged[j])] = static_cast<int>(j);
    offsets[j] = total;
    total += counts[static_cast<std::size_t>(staged[j])];
  }
  offsets[staged.size()] = total;
  std::vector<int> next(offsets, offsets + staged.size());
  int* order = order_.as<int>();
  for (std::size_t c = 0; c < host_index.size(); ++c) {
    const int h = host_index[c];
    const int j = h >= 0 ? stage_of[static_cast<std::size_t>(h)] : -1;
    if (j >= 0) order[next[static_cast<std::size_t>(j)]++] = static_cast<int>(c);
  }
  for (Status s : {cuda_call("cudaMemcpyAsync (staged order)",
                             cudaMemcpyAsync(batch_.staged_order.data(), order, static_cast<std::size_t>(total) * 4,
                                             cudaMemcpyHostToDevice, stream_)),
                   cuda_call("cudaMemcpyAsync (staged offsets)",
                             cudaMemcpyAsync(batch_.staged_offsets.data(), offsets, (staged.size() + 1) * 4,
                                             cudaMemcpyHostToDevice, stream_))}) {
    if (!s) return s;
  }
  return Ok{};
}

// The staged experts' records up in passes of the staging slab's size,
// each pass's grouped launches after its copy; a pass's records are copied
// into one pinned buffer while the other one's copy runs.
Status HybridBatch::upload(int moe_layer, std::span<const int> staged, int tokens) {
  const kernels::cuda::ExpertRecordLayout& layout = weights_.experts.layout;
  const std::vector<int>& host_experts = weights_.experts.host_experts[static_cast<std::size_t>(moe_layer)];
  std::vector<int> experts;
  for (int h : staged) experts.push_back(host_experts[static_cast<std::size_t>(h)]);
  const int per_pass = batch_.staging_records, top_k = static_cast<int>(model_.config->num_experts_per_tok);
  LaunchRecorder r(stream_, *launches_, observer_);
  const Clock::time_point start = Clock::now();
  for (int first = 0, pass = 0; first < static_cast<int>(experts.size()); first += per_pass, ++pass) {
    const int count = std::min(per_pass, static_cast<int>(experts.size()) - first);
    Pinned& bounce = bounce_[pass % 2];
    const std::size_t bytes = static_cast<std::size_t>(count) * layout.record_stride;
    const auto fill = [&](std::size_t i, std::span<const std::byte> record) -> Status {
      if (record.size() > layout.record_stride) return make_error("an expert record is larger than its stride");
      copy_record(bounce.as<std::byte>() + i * layout.record_stride, record);
      return Ok{};
    };
    for (Status s : {cuda_call("cudaEventSynchronize (staging buffer)", cudaEventSynchronize(bounce_free_[pass % 2])),
                     host_->with_records(moe_layer, std::span(experts).subspan(static_cast<std::size_t>(first),
                                                                               static_cast<std::size_t>(count)), fill),
                     cuda_call("cudaMemcpyAsync (staged experts)",
                               cudaMemcpyAsync(batch_.staging.data(), bounce.as<void>(), bytes, cudaMemcpyHostToDevice, stream_)),
                     cuda_call("cudaEventRecord (staging buffer)", cudaEventRecord(bounce_free_[pass % 2], stream_)),
                     record_grouped_experts(r, layout, at<const std::uint8_t>(batch_.staging), count,
                                            at<const int>(batch_.staged_order), at<const int>(batch_.staged_offsets, static_cast<std::size_t>(first)),
                                            batch_, tokens, top_k)}) {
      if (!s) return s;
    }
    tally_.uploaded_bytes += bytes;
  }
  tally_.uploaded += experts.size();
  tally_.costs.upload_per_expert =
      HostExpertCosts::blend(tally_.costs.upload_per_expert, seconds_since(start) / static_cast<double>(experts.size()));
  return Ok{};
}

// The CPU's experts for their tokens (the store's FFNs on the input rows
// sent down), their rows copied up into the batch's rows, run by run.
Status HybridBatch::compute_on_cpu(int moe_layer, std::span<const HostExpertPlace> place,
                                   std::span<const int> host_index, int tokens) {
  const auto layer = static_cast<std::size_t>(moe_layer);
  const std::vector<int>& host_experts = weights_.experts.host_experts[layer];
  const std::size_t hidden = model_.config->hidden_size, choices = host_index.size();
  std::vector<int> ids(choices, 0);
  std::vector<std::uint8_t> on_gpu(choices, 1);
  int cpu_choices = 0;
  for (std::size_t c = 0; c < choices; ++c) {
    const int h = host_index[c];
    if (h < 0 || place[static_cast<std::size_t>(h)] != HostExpertPlace::cpu) continue;
    ids[c] = host_experts[static_cast<std::size_t>(h)];
    on_gpu[c] = 0;
    ++cpu_choices;
  }
  if (cpu_choices == 0) return Ok{};
  // The input rows down on the side stream: the routing that wrote them is
  // done (complete() waited for it), and the stream's own experts only read them.
  const Clock::time_point down = Clock::now();
  for (Status s : {cuda_call("cudaMemcpyAsync (hybrid batch inputs)",
                             cudaMemcpyAsync(inputs_.as<void>(), batch_.h.data(), static_cast<std::size_t>(tokens) * hidden * 4,
                                             cudaMemcpyDeviceToHost, side_)),
                   cuda_call("cudaStreamSynchronize (hybrid batch inputs)", cudaStreamSynchronize(side_))}) {
    if (!s) return s;
  }
  tally_.costs.cpu_per_layer = HostExpertCosts::blend(tally_.costs.cpu_per_layer, seconds_since(down));
  const Clock::time_point start = Clock::now();
  float* rows = rows_.as<float>();
  if (Status s = host_->run(moe_layer, ids, on_gpu, std::span<const float>(inputs_.as<const float>(), static_cast<std::size_t>(tokens) * hidden),
                            std::span<float>(rows, choices * hidden));
      !s) {
    return s;
  }
  tally_.costs.cpu_per_choice = HostExpertCosts::blend(tally_.costs.cpu_per_choice, seconds_since(start) / cpu_choices);
  tally_.cpu_choices += static_cast<std::uint64_t>(cpu_choices);
  tally_.on_cpu += static_cast<std::uint64_t>(std::count(place.begin(), place.end(), HostExpertPlace::cpu));
  for (std::size_t c = 0; c < choices;) {
    if (on_gpu[c]) {
      ++c;
      continue;
    }
    std::size_t end = c;
    while (end < choices && !on_gpu[end]) ++end;
    const std::size_t bytes = (end - c) * hidden * sizeof(float);
    if (Status s = cuda_call("cudaMemcpyAsync (CPU expert rows)",
                             cudaMemcpyAsync(at<float>(batch_.rows, c * hidden), rows + c * hidden, bytes,
                                             cudaMemcpyHostToDevice, stream_));
        !s) {
      return s;
    }
    c = end;
  }
  return Ok{};
}

}  // namespace coli::cuda
