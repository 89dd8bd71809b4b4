#include "cuda/cuda_expert_parallel.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "cuda/cuda_decoder.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_step.h"
#include "cuda/expert_parallel.h"
#include "cuda/nccl_library.h"
#include "cuda/rank_threads.h"

namespace coli::cuda {
namespace {

// A rank's MoE-layer sum: NCCL's all-reduce on the rank's stream.
class NcclReduce final : public MoeReduce {
 public:
  NcclReduce(const NcclLibrary& nccl, NcclComm comm, int rank) : nccl_(nccl), comm_(comm), rank_(rank) {}
  bool keeps_residual() const override { return rank_ == 0; }
  Status sum(void* stream, float* x, std::size_t floats) override { return nccl_.all_reduce_sum(x, floats, comm_, stream); }

 private:
  const NcclLibrary& nccl_;
  NcclComm comm_;
  int rank_;
};

std::string device_list(const std::vector<int>& devices) {
  std::string out;
  for (int d : devices) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

void add(gpu::DecoderMemory& sum, const gpu::DecoderMemory& m) {
  sum.dense += m.dense;
  sum.experts += m.experts;
  sum.kv_cache += m.kv_cache;
  sum.activations += m.activations;
  sum.page_rounding += m.page_rounding;
  sum.host_visible += m.host_visible;
  sum.device_measured += m.device_measured;
  sum.launch_measured += m.launch_measured;
  sum.graph_segments = std::max(sum.graph_segments, m.graph_segments);
}

// Before anything is made: the placement against this machine and the model.
Status check(const gpu::DecoderModel& model) {
  if (!model.config || !model.container) return make_error("the expert-parallel decoder needs a model config and container");
  const kernels::cuda::CudaDeviceCount count = kernels::cuda::cuda_device_count();
  if (count.devices == 0) {
    return make_error("the expert-parallel decoder needs CUDA devices " + device_list(model.devices) + ", but " +
                      count.reason);
  }
  if (!model.device_cpus.empty() && model.device_cpus.size() != model.devices.size()) {
    return make_error("device_cpus lists " + std::to_string(model.device_cpus.size()) + " CPU sets for " +
                      std::to_string(model.devices.size()) + " GPUs: give one per GPU, or none");
  }
  const container::ExpertLayout& layout = model.container->index().experts;
  return check_expert_placement(model.devices, model.expert_gpu, static_cast<int>(layout.layers),
                                static_cast<int>(layout.experts), count.devices);
}

}  // namespace

struct ExpertParallelDecoder::State {
  gpu::DecoderModel model;
  std::shared_ptr<const NcclLibrary> nccl;  // null: one GPU, no exchange
  std::vector<NcclComm> comms;
  std::vector<std::unique_ptr<NcclReduce>> reduces;
  std::vector<gpu::DecoderModel> rank_models;  // each rank's: its own VRAM share
  std::vector<std::unique_ptr<CudaDecoder>> ranks;
  std::vector<gpu::DecoderMemory> device_memory;
  gpu::DecoderMemory memory;
  std::unique_ptr<RankThreads> threads;  // declared last: its threads stop first
  std::string stopped;  // why the decoder refuses further forwards (a rank failed mid-way)

  ~State() {
    // Each rank's CUDA objects freed on its own thread (its device current), then the communicators.
    if (threads) {  // nothing to do in a destructor about a rank that fails to free
      [[maybe_unused]] const Status freed = threads->run([this](int r) {
        if (static_cast<std::size_t>(r) < ranks.size()) ranks[static_cast<std::size_t>(r)].reset();
        return Status(Ok{});
      });
    }
    for (NcclComm comm : comms) nccl->destroy(comm);
  }
  // From the first failing rank's thread (RankThreads calls it once per
  // run); an aborted communicator is freed, so it is forgotten here.
  void abort_all() {
    for (NcclComm& comm : comms) nccl->abort(std::exchange(comm, nullptr));
  }
  Status open_exchange();
  Status make_ranks();
};

// NCCL's communicators, one per GPU, when there is an exchange to make.
Status ExpertParallelDecoder::State::open_exchange() {
  if (model.devices.size() < 2 && model.exchange == gpu::ExpertExchange::automatic) return Ok{};
  auto lib = NcclLibrary::open();
  if (!lib) {
    return make_error("the expert-parallel decoder over CUDA devices " + device_list(model.devices) +
                      " sums each MoE layer across the GPUs with NCCL, but " + lib.error().message);
  }
  nccl = std::move(*lib);
  auto made = nccl->init_all(model.devices);
  if (!made) return made.error();
  comms = std::move(*made);
  for (std::size_t r = 0; r < comms.size(); ++r) {
    reduces.push_back(std::make_unique<NcclReduce>(*nccl, comms[r], static_cast<int>(r)));
  }
  return Ok{};
}

// Every rank prepared at once (no collective), then every rank's first
// step and capture at once (their all-reduces wait for each other).
Status ExpertParallelDecoder::State::make_ranks() {
  const int n = static_cast<int>(model.devices.size());
  ranks.resize(static_cast<std::size_t>(n));
  std::vector<ExpertRank> shares(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    RankExperts share = rank_experts(model.expert_gpu, model.devices, r);
    gpu::DecoderModel& m = rank_models.emplace_back(model);
    m.vram_experts = std::move(share.vram);
    m.devices.clear();
    m.expert_gpu.clear();
    shares[static_cast<std::size_t>(r)].remote = std::move(share.remote);
    shares[static_cast<std::size_t>(r)].reduce = reduces.empty() ? nullptr : reduces[static_cast<std::size_t>(r)].get();
    shares[static_cast<std::size_t>(r)].answers = r == 0;  // the others' heads would only delay the next step
  }
  const Status prepared = threads->run([&](int r) -> Status {
    const auto i = static_cast<std::size_t>(r);
    auto made = CudaDecoder::prepare(model.devices[i], rank_models[i], shares[i]);
    if (!made) return made.error();
    ranks[i] = std::move(*made);
    return Ok{};
  });
  if (!prepared) return prepared;
  return threads->run([&](int r) { return ranks[static_cast<std::size_t>(r)]->capture(); },
                      [this](int) { abort_all(); });
}

Result<std::unique_ptr<ExpertParallelDecoder>> ExpertParallelDecoder::create(const gpu::DecoderModel& model) {
  if (Status s = check(model); !s) return s.error();
  auto state = std::make_unique<State>();
  state->model = model;
  if (Status s = state->open_exchange(); !s) return s.error();
  auto threads = RankThreads::start(static_cast<int>(model.devices.size()), model.device_cpus);
  if (!threads) return threads.error();
  state->threads = std::move(*threads);
  if (Status s = state->make_ranks(); !s) return s.error();
  for (const auto& rank : state->ranks) {
    state->device_memory.push_back(rank->memory());
    add(state->memory, rank->memory());
  }
  return std::unique_ptr<ExpertParallelDecoder>(new ExpertParallelDecoder(std::move(state)));
}

ExpertParallelDecoder::ExpertParallelDecoder(std::unique_ptr<State> state) : state_(std::move(state)) {}
ExpertParallelDecoder::~ExpertParallelDecoder() = default;

Status ExpertParallelDecoder::forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                                      gpu::HostExperts* host) {
  State& s = *state_;
  if (!s.stopped.empty()) return make_error("the expert-parallel decoder stopped earlier (" + s.stopped + "): load the model again");
  const Status ran = s.threads->run(
      [&](int r) {
        // Only rank 0 has host experts (those on no GPU) and answers with its logits.
        return s.ranks[static_cast<std::size_t>(r)]->forward(tokens, start_position, r == 0 ? logits : std::span<float>(),
                                                             r == 0 ? host : nullptr);
      },
      [&s](int) { s.abort_all(); });
  if (!ran) {
    s.stopped = ran.error().message;
    return ran;
  }
  for (std::size_t r = 0; r < s.comms.size(); ++r) {
    if (Status e = s.nccl->async_error(s.comms[r]); !e) {
      s.abort_all();
      s.stopped = "GPU rank " + std::to_string(r) + ": " + e.error().message;
      return make_error(s.stopped);
    }
  }
  return Ok{};
}

const gpu::DecoderMemory& ExpertParallelDecoder::memory() const { return state_->memory; }
const std::vector<gpu::DecoderMemory>& ExpertParallelDecoder::device_memory() const { return state_->device_memory; }

// Every rank routes the same tokens alike: rank 0's routing is the model's.
void ExpertParallelDecoder::add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const {
  state_->ranks.front()->add_routing_counts(counts);
}

std::vector<std::string> ExpertParallelDecoder::kernel_names() const {
  const State& s = *state_;
  std::vector<std::string> out = {
      "expert parallel over " + std::to_string(s.ranks.size()) + " GPU(s) (CUDA devices " + device_list(s.model.devices) +
      "): each MoE layer's output summed by " +
      (s.nccl ? "NCCL " + s.nccl->version_text() + "'s all-reduce (hidden floats per token), captured in each rank's graph"
              : std::string("no exchange (one GPU)")) +
      ":"};
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const bool bound = r > 0 && r < s.model.device_cpus.size() && !s.model.device_cpus[r].empty();
    out.push_back("rank " + std::to_string(r) + ": CUDA device " + std::to_string(s.model.devices[r]) + ", " +
                  std::to_string(s.device_memory[r].experts >> 20) + " MiB of experts, host thread " +
                  (r == 0 ? std::string("the caller's") : bound ? "on CPUs " + s.model.device_cpus[r].to_list() : std::string("unbound")));
  }
  out.push_back("rank 0's launches:");
  for (std::string& line : s.ranks.front()->kernel_names()) out.push_back(std::move(line));
  return out;
}

bool ExpertParallelDecoder::hybrid() const { return state_->ranks.front()->hybrid(); }

std::string ExpertParallelDecoder::device_name() const {
  const State& s = *state_;
  const std::string first = s.ranks.front()->device_name();
  return s.ranks.size() == 1 ? first : std::to_string(s.ranks.size()) + " x " + first + " (CUDA devices " + device_list(s.model.devices) + ")";
}

int ExpertParallelDecoder::ranks() const { return static_cast<int>(state_->ranks.size()); }

std::string ExpertParallelDecoder::exchange() const {
  const State& s = *state_;
  return s.nccl ? "NCCL " + s.nccl->version_text() + " (" + s.nccl->path() + ")" : "none (one GPU)";
}

Result<std::unique_ptr<gpu::GpuDecoder>> create_cuda_decoder(int gpu_index, const gpu::DecoderModel& model) {
  if (model.devices.empty()) {
    auto made = CudaDecoder::create(gpu_index, model);
    if (!made) return made.error();
    return std::unique_ptr<gpu::GpuDecoder>(std::move(*made));
  }
  auto made = ExpertParallelDecoder::create(model);
  if (!made) return made.error();
  return std::unique_ptr<gpu::GpuDecoder>(std::move(*made));
}

}  // namespace coli::cuda
