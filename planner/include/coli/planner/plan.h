// make_plan: a device profile + a model footprint + the user's overrides ->
// the engine's knobs, the memory preview they imply, and why each was chosen.
// Pure: nothing here probes the machine or reads a file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "coli/base/expert_io.h"
#include "coli/base/result.h"
#include "coli/planner/deciders.h"
#include "coli/planner/expert_parallel.h"
#include "coli/planner/footprint.h"
#include "coli/planner/gpu_tiers.h"
#include "coli/planner/memory_preview.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

// How the planner picks thread sets when --threads is not given.
enum class ThreadRule {
  predicted,  // plan every set the probe timed, predict each, run the fastest (the profile's rule without timings)
  profile,    // --thread-choice profile: the probe's recommendation (its kernel timings alone)
};

struct PlanRequest {
  // Overrides; nullopt lets the planner decide. Each is checked against the
  // same invariants as the planner's own choices and refused when harmful.
  std::optional<int> threads;          // --threads
  ThreadRule thread_choice = ThreadRule::predicted;  // --thread-choice
  std::optional<int> cap;              // --cap (slots per MoE layer)
  std::optional<int> pins;             // --pin (pins per MoE layer, forced)
  std::optional<std::uint64_t> ram;    // --ram (bytes; at most the measured headroom)
  std::optional<int> ctx;              // --ctx (default 4096, at most max_position_embeddings)
  // Not overrides: inputs the planner shrinks when they would break a rule.
  int history_pins = 0;                // pins the usage history suggests
  int prefill_round_tokens = 512;      // what the engine would like per round: a whole 512-token prompt, so
                                       // each expert multiplies its ~64 tokens in one GEMM (fewer when the cache streams)
  std::optional<int> prompt_tokens;    // longest prompt; default: the whole context
  bool tokenizer = true;               // the run loads a tokenizer (false: it is given token ids)
  int io_threads = kDefaultIoThreads;
  bool direct_io = true;
  // The VRAM tier: --gpu none|auto|N, --vram, the backend's memory (tests
  // pass made-up backends), and the history that ranks experts for it.
  std::string gpu = "auto";
  // --gpus auto|all|0,1,...: spread experts over several CUDA devices
  // (expert_parallel.h); auto takes every one only where this build's engine
  // runs expert parallel (BackendMemory::engine_runs_expert_parallel), else one GPU as --gpu.
  std::string gpus = "auto";
  std::optional<std::uint64_t> vram;   // --vram (with --gpus: each GPU's)
  std::string gpu_variant;             // --gpu-variant (shader catalogue name)
  std::optional<int> gpu_batch_tokens; // --gpu-batch: a prompt's tokens per GPU submission (default: the backend's)
  std::string cpu_kernel;              // --kernel (amx|avx512vnni|avx512|avx2|scalar|exact)
  std::optional<KvType> kv_type;       // --kv-type (default: f16)
  std::optional<BackendMemory> backend;
  const experts::UsageHistory* history = nullptr;
};

struct Decision {
  std::string knob;    // "threads", "cap", "pins", "prefill_round_tokens", "ctx", "kv_type", "ram", "margin"
  std::string value;   // for people: "4", "15.6 GiB", "avx512vnni"
  std::string reason;
  // For scripts, beside the text: the value as a number and its unit
  // ("threads", "tokens", "slots", "experts", "bytes"); nullopt for names
  // (kernel, gpu) and in plans of schema 3 and older.
  std::optional<std::int64_t> number;
  std::string unit;
  bool operator==(const Decision&) const = default;
};

struct Plan {
  int threads = 1;
  CpuSet compute_pus;          // where the engine pins its threads; empty = not pinned
  // Passes of several tokens (prefill), when measured best on another set;
  // 0 = the set above for every pass (plans of schema 3 and older).
  int prefill_threads = 0;
  CpuSet prefill_pus;
  std::string cpu_kernel;      // the CPU GEMV variant ("" in plans of schema 1: the engine's own choice)
  int cap = 0;                 // slots per MoE layer, pins included
  int pins = 0;                // per MoE layer
  int prefill_round_tokens = 1;
  int ctx = 0;
  KvType kv_type = KvType::f32;  // the CPU's KV cache (f32 in plans of schema 4 and older, and on the GPU decoder)
  int io_threads = 0;
  bool direct_io = true;
  bool streaming() const { return cap < n_experts; }
  int n_experts = 0;

  std::uint64_t headroom_bytes = 0;
  std::string headroom_source;
  MemoryPreview memory;
  SafetyMargin margin;
  GpuTier gpu;                 // backend "cpu" and no slots when experts run on the CPU
  // Experts spread over 2+ CUDA devices (empty otherwise); then `gpu` is
  // their sum (expert_parallel_tier) and each GPU's share is here.
  ExpertParallelPlan expert_parallel;
  std::vector<Decision> decisions;

  std::uint64_t planned_ram_bytes() const { return memory.total(Tier::ram); }
  const Decision* decision(const std::string& knob) const;  // nullptr when absent
  bool operator==(const Plan&) const = default;
};

inline constexpr int kDefaultContext = 4096;  // runtime::ModelOptions::max_context

Result<Plan> make_plan(const DeviceProfile& profile, const ModelFootprint& footprint, const PlanRequest& request);

// Why make_plan refused, with the numbers a script acts on (coli-plan --json).
struct TierNeed {
  Tier tier = Tier::ram;
  std::uint64_t needed_bytes = 0;     // the smallest plan tried: its lines plus the safety margin
  std::uint64_t available_bytes = 0;  // the headroom of that tier
  bool operator==(const TierNeed&) const = default;
};
struct Refusal {
  std::string message;                // make_plan's error
  bool does_not_fit = false;          // memory is the reason; tiers say how much
  std::vector<TierNeed> tiers;
  std::vector<std::string> advice;    // what to change, each with its numbers
};
// make_plan, or its refusal with the numbers.
std::variant<Plan, Refusal> plan_or_refusal(const DeviceProfile& profile, const ModelFootprint& footprint,
                                            const PlanRequest& request);

}  // namespace coli::planner
