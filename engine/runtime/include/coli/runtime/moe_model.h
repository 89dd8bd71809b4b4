// The MoE decoder running from a coli container through a compute backend
// (coli/backend, the CPU backend today): dense weights in
// memory, routed experts streamed through a bounded per-layer cache. The
// knobs (threads and their placement, cache capacity, pins, rounds, I/O)
// change speed only: every setting produces the same tokens. The CPU kernel
// variant is the exception: each SIMD variant sums in its own order, so two
// variants may round a near-tie differently (coli-sweep found one such
// token); within one variant everything is bit-identical.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "coli/base/cpu_set.h"
#include "coli/base/expert_io.h"
#include "coli/base/kv_type.h"
#include "coli/base/result.h"
#include "coli/base/weight_format.h"
#include "coli/experts/read_rounds.h"
#include "coli/experts/usage_history.h"
#include "coli/runtime/op_timing.h"

namespace coli::runtime {

// A cache capacity with a slot for every expert, whatever their number: fully
// resident. One rule covers it and the plan's cap == n_experts: a capacity
// at or above the model's expert count keeps every expert resident.
inline constexpr int kAllExperts = std::numeric_limits<int>::max();

struct ModelOptions {
  int threads = 1;
  // PUs the compute (OpenMP) threads are pinned to, member i to the i-th
  // lowest PU (kernels/cpu/thread_placement.h); when set, its size is the
  // thread count and `threads` is ignored. Empty = not pinned.
  CpuSet compute_pus;
  // Passes of several tokens (prefill) on a thread set of their own, when the
  // profile measured one best for them: prefill_pus as compute_pus above,
  // else prefill_threads threads; 0 and empty = the set above for every pass.
  // The team switches only when the phase changes (libgomp rebuilds its team
  // when consecutive regions differ in size).
  int prefill_threads = 0;
  CpuSet prefill_pus;
  int cache_capacity = kAllExperts;       // expert slots per layer, pins included (see kAllExperts)
  // Experts never evicted (expert ids), per MoE layer; a single entry applies to every layer.
  std::vector<std::vector<int>> pins;
  int max_context = 4096;                 // KV cache positions
  // How the CPU's KV cache holds keys and values (coli/base/kv_type.h);
  // the Vulkan decoder keeps its own f32 cache in VRAM and ignores it
  // (ModelStats::kv_type says which was used).
  KvType kv_type = kDefaultKvType;
  // Tokens per prefill round at most; the expert store shrinks it so a
  // round's distinct experts always fit the evictable cache slots.
  int prefill_round_tokens = 512;  // PlanRequest::prefill_round_tokens
  // "" = best for this CPU; scalar|avx2|avx512|avx512vnni|amx force one (all
  // quantise activations to int8); "exact" = f32 activations, de-quantised
  // weights (reference accuracy, slow).
  std::string cpu_kernel;
  // When experts stream (0 < cache_capacity < experts): run the next MoE
  // layer's router on this layer's post-attention hidden state (normed with
  // the next layer's post-attention norm) and start reads of the experts it
  // predicts, so they load while this layer computes. Passes of one expert
  // round only (decode, short prompts). Never changes tokens.
  bool speculative_prefetch = false;
  // Threads reading expert misses while compute runs on resident experts;
  // 0 = synchronous reads on the compute thread.
  int io_threads = kDefaultIoThreads;
  // O_DIRECT expert reads when experts stream (0 < cache_capacity < experts), if
  // the filesystem allows; with every expert resident the page cache is used.
  bool direct_io = true;
  // Touch every expert-cache page at load, so the memory the plan grants is
  // committed up front: a plan that does not fit fails at load, not mid-run,
  // and RSS matches the plan from the first token.
  bool commit_expert_cache = true;
  // With every expert resident (cache_capacity 0 or >= experts), read them all at
  // load (I/O threads in parallel) instead of on first use, so the first
  // tokens wait for no reads (llama.cpp's load does the same); when experts
  // stream, read `preload_by_use` at load. false = every expert lazily.
  bool preload_experts = true;
  // When experts stream: per MoE layer, the experts read into the cache at
  // load (a usage history's most used, at most the cap), so a fresh
  // process's first tokens meet the warm cache the history's hit rate prices,
  // not an empty one (the trained demo at cap 4: a 4-token prompt ran at 697
  // tok/s into an empty cache where 3409 were predicted). Empty: none.
  std::vector<std::vector<int>> preload_by_use;
  // RSS watchdog: after each forward pass, when the process's resident set
  // is above this many bytes (the plan's total plus its margin), every
  // layer's expert cache gives slots back (least recently used first) until
  // it is below again, and `on_warning` says so. 0 = off.
  std::uint64_t rss_limit_bytes = 0;
  std::function<void(const std::string&)> on_warning;

  // Where the decoder runs: "cpu", or "vulkan" (every layer on the GPU;
  // experts outside vram_experts computed on the CPU from the expert cache).
  std::string backend = "cpu";
  int gpu_index = 0;                       // Vulkan device, in enumeration order
  // Per MoE layer, the experts the GPU holds; empty = every expert.
  std::vector<std::vector<int>> vram_experts;
  // CUDA expert parallelism over the GPUs of one host (gpu::DecoderModel's
  // devices, expert_gpu, device_cpus): the CUDA ordinals in rank order, and
  // per MoE layer, per expert, the ordinal of the GPU holding it or -1 (the
  // host's expert cache); empty = one GPU (gpu_index, vram_experts). The
  // experts some GPU holds stand for vram_experts then.
  std::vector<int> gpu_devices;
  std::vector<std::vector<int>> expert_gpu;
  std::vector<CpuSet> gpu_device_cpus;  // per rank: its host thread's CPUs (empty: unbound)
  bool gpu_exchange_nccl = false;       // NCCL's all-reduce even with one GPU (gpu::ExpertExchange::nccl)
  std::uint32_t gpu_shared_memory_limit = 0;  // pretend a smaller device (tests); 0 = its own
  int gpu_batch_tokens = 128;              // tokens per GPU submission (prefill chunks)
  // "" = the GPU decoder's own choice (CUDA: int8 activations for int8/int4
  // weights in a token's step); "exact" = f32 activations (gpu::DecoderModel).
  std::string gpu_kernel;
  // A CUDA hybrid plan's prefill batches, for the experts outside VRAM:
  // "measured" (copy up or compute on the CPU, per expert, by what each
  // costs in this run), "upload" or "cpu" (gpu::HostExpertMode).
  std::string gpu_host_experts = "measured";
  // Wall time per op category of CPU forward passes (op_timing.h), read
  // through MoeModel::op_times(); off = one branch per phase change.
  bool op_timing = false;
};

// What the GPU holds, as allocated (plan vs actual).
struct GpuMemoryStats {
  std::string device;
  std::uint64_t dense_bytes = 0;
  std::uint64_t expert_bytes = 0;
  std::uint64_t kv_cache_bytes = 0;
  std::uint64_t activation_bytes = 0;
  std::uint64_t page_rounding_bytes = 0;  // gpu::DecoderMemory::page_rounding
  std::uint64_t host_visible_bytes = 0;  // mapped host memory (staging ring, input/output): RSS too
  std::uint64_t device_measured_bytes = 0;  // gpu::DecoderMemory::device_measured (0: not measured)
  std::uint64_t launch_measured_bytes = 0;  // gpu::DecoderMemory::launch_measured, with graph_segments graphs
  int graph_segments = 0;
  std::vector<std::string> kernels;
  std::uint64_t vram_bytes() const {
    return dense_bytes + expert_bytes + kv_cache_bytes + activation_bytes + page_rounding_bytes;
  }
};

struct ModelStats {
  std::uint64_t tokens = 0;
  std::uint64_t expert_hits = 0;
  std::uint64_t expert_misses = 0;
  std::uint64_t expert_bytes_read = 0;
  // The I/O threads' time in their reads, each timed alone, over
  // expert_reads_timed reads: the misses' and also the preload's and
  // speculative prefetch's, which the counters above leave out
  // (ExpertStore::read_seconds, timed_reads).
  double expert_read_seconds = 0;
  std::uint64_t expert_reads_timed = 0;
  experts::ReadRounds expert_read_rounds;  // every round that read (ExpertStore::read_rounds)
  // Speculative prefetch (ModelOptions::speculative_prefetch): experts the
  // next layer's router predicted, how many of them that layer then used,
  // and the reads the prediction started / that turned out needed.
  std::uint64_t predicted_experts = 0, predicted_correct = 0;
  std::uint64_t prefetch_reads = 0, prefetch_reads_used = 0;
  // Experts read into the cache at load (ModelOptions::preload_experts):
  // every one when resident, else ModelOptions::preload_by_use's; 0 = the
  // cache started empty.
  std::uint64_t preloaded_experts = 0;
  bool experts_stream = false;  // the host's expert cache holds fewer than every expert (ExpertStore::experts_stream)
  std::string cpu_kernel;                 // the variant in use
  // The thread sets the passes ran on, e.g. "2 threads on PUs 0-1"; empty
  // for a phase that has not run. Prefill: passes of several tokens.
  std::string prefill_thread_set, decode_thread_set;
  std::string io_mode;
  // The engine's own accounting of its large allocations, for plan vs actual.
  std::uint64_t dense_bytes = 0;          // dense weights held in memory
  std::uint64_t expert_cache_bytes = 0;   // slabs of every layer's expert cache
  std::uint64_t rss_watchdog_limit = 0;     // the RSS it holds the process under (0 = off)
  std::uint64_t rss_watchdog_shrinks = 0;   // times the watchdog retired slots
  std::uint64_t rss_watchdog_released = 0;  // bytes it gave back
  std::uint64_t kv_cache_bytes = 0;       // K and V for max_context positions
  KvType kv_type = KvType::f32;           // how they are held (the GPU's cache: f32)
  std::string backend = "cpu";
  GpuMemoryStats gpu;                     // backend "vulkan" only
};

// What identifies a model for its usage history (experts::UsageHistoryKey).
struct ModelShape {
  int moe_layers = 0;
  int experts = 0;
  int top_k = 0;
  std::string config_json;
  std::vector<std::string> tensor_names;
  WeightFormat expert_format = WeightFormat::q4_g64;  // q4_g64, q8_row or f32
  DenseFormat dense_format = DenseFormat::source;     // how the container holds projections
};

// The key a usage history of this model is recorded and checked under.
experts::UsageHistoryKey usage_history_key(const ModelShape& shape);

class MoeModel;
// What a loaded model routed since its load, as a usage history: counts,
// reuse distances, the routing trace and the read rounds (merge it into the saved one).
// `rounds_before`: the model's read rounds at a point the history's rounds
// should start from (a benchmark's warm-up left out); none: the whole run's.
Result<experts::UsageHistory> usage_history_of(const MoeModel& model, const experts::ReadRounds* rounds_before = nullptr);

class MoeModel {
 public:
  // Errors: container problems (named by the reader), a config the engine
  // cannot run, an impossible cache setting (cap < top_k, pins >= cap ...),
  // a kernel variant this CPU lacks.
  static Result<MoeModel> load(const std::filesystem::path& container, const ModelOptions& options);
  MoeModel(MoeModel&&) noexcept;
  MoeModel& operator=(MoeModel&&) noexcept;
  ~MoeModel();

  // Runs `tokens` at positions start_position.. and writes the logits of the
  // last one into `logits` (vocab_size floats). The KV cache keeps them.
  Status forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits);
  void reset();  // forget the KV cache

  int vocab_size() const;
  int context_used() const;
  int max_context() const;  // KV cache positions (ModelOptions::max_context)
  const ModelStats& stats() const;
  // Per-op wall time of the CPU passes since load or clear(); null unless
  // ModelOptions::op_timing (and on the GPU backend, which has no CPU ops).
  OpTimes* op_times();
  // How often each expert of each MoE layer was routed to (prompt and
  // generated tokens), for the usage history that picks pins next time.
  const std::vector<std::vector<std::uint64_t>>& routing_counts() const;
  // The CPU passes' routings by LRU stack distance per MoE layer
  // (experts::ReuseDistances: [layer][distance 0..n-1, first uses]); zeros
  // for layers the GPU decoder routed, which keeps no per-token order here.
  const std::vector<std::vector<std::uint64_t>>& reuse_distances() const;
  // The same for single-token passes (generated tokens) alone.
  const std::vector<std::vector<std::uint64_t>>& decode_reuse_distances() const;
  // The CPU passes' most recent routings (experts::RoutingTrace); empty
  // when the GPU decoder routed every pass.
  const experts::RoutingTrace& routing_trace() const;
  ModelShape shape() const;
  // The same from the container's index alone (no weights loaded).
  static Result<ModelShape> read_shape(const std::filesystem::path& container);

 private:
  struct State;
  explicit MoeModel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace coli::runtime
