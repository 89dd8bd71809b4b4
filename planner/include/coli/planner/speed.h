// Predicted decode and prefill speed of a plan, from the profile's measured
// bandwidths alone. Pure. Decode on the CPU engine is bandwidth-bound: every
// token reads the dense weights, the KV cache and top_k experts per MoE layer
// from RAM, and each expert that misses the cache from disk first.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "coli/experts/usage_history.h"
#include "coli/planner/cache_replay.h"
#include "coli/planner/footprint.h"
#include "coli/planner/plan.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

inline constexpr const char* kNoMeasuredBandwidth = "no measured bandwidth: run coli-probe without --quick";

// One part of a prediction's time, per token (decode) or per prompt token
// (prefill), named as coli-plan prints it: what a runner-up lost by.
struct SpeedTerm {
  std::string name;
  double seconds = 0;
  bool operator==(const SpeedTerm&) const = default;
};

// A prediction on the probe's slowest and on its fastest rounds of every
// measured rate (speed_band.h); all 0 where none was made.
struct SpeedBand {
  double decode_slowest = 0, decode_fastest = 0;
  double prefill_slowest = 0, prefill_fastest = 0;
  bool made() const { return decode_slowest > 0 && decode_fastest > 0; }
  // One metric's ends wider apart than rounding (0.01%): where every rate
  // the prediction rests on was timed in one round, both are the prediction.
  static bool wide(double slowest, double fastest) { return fastest - slowest > 1e-4 * fastest; }
  bool has_width() const { return wide(decode_slowest, decode_fastest) || wide(prefill_slowest, prefill_fastest); }
  bool operator==(const SpeedBand&) const = default;
};

struct SpeedPrediction {
  bool available = false;      // false: the profile lacks a bandwidth the plan needs
  std::string unavailable;     // why (kNoMeasuredBandwidth, ...)
  double hit_rate = 0;         // expected expert cache hit rate of decode tokens
  double prefill_hit_rate = 0; // of a prompt's routings (the same without a phase-split history)
  std::string hit_rate_inputs;
  double decode_tok_per_s = 0;
  std::string decode_inputs;
  double prefill_tok_per_s = 0;  // rough: bandwidth only, see prefill_inputs
  std::string prefill_inputs;
  // Expert records read from disk: per decode token, and per prompt of
  // prefill_prompt_tokens (rounds x layers x the distinct experts a round misses),
  // what coli-sweep counts beside the speed.
  double decode_disk_reads = 0;
  double prefill_disk_reads = 0;
  int prefill_prompt_tokens = 0;
  // One expert record read alone by a reading thread (the profile's bare
  // one-deep figure, without the I/O pool's hand-offs): what coli-sweep and
  // coli run set beside the I/O threads' own time per read in a run.
  double disk_read_seconds = 0;
  std::vector<SpeedTerm> decode_terms;   // they sum to 1 / decode_tok_per_s
  std::vector<SpeedTerm> prefill_terms;  // compute and memory parts: 1 / prefill_tok_per_s is the longer sum
  SpeedBand band;                        // predict_plan_speed_with_band's; not made by predict_speed itself
  bool operator==(const SpeedPrediction&) const = default;
};

// Expected hit rate with `cap` slots per layer: cap / n_experts under uniform
// routing; with a history, the mean over MoE layers of LRU's hit rate from
// the recorded reuse distances (for `decode_tokens`, the generated tokens'
// own where the history has them: version 3), else the routing mass of the
// `cap` most used experts (an upper bound: it assumes the cache holds
// exactly those, which pins plus LRU approach on a stable workload). A
// prompt's rate leaves out the recording's first uses (its cold start, which
// a warm cache does not repeat); decode counts them as misses.
double expected_hit_rate(const ModelFootprint& footprint, int cap, const experts::UsageHistory* history,
                         std::string& inputs, bool decode_tokens = false);

// Dense bytes one decode token reads: every dense tensor except the
// embedding table, of which it reads one row, unless the lm_head is that
// table (tied embeddings): then every token reads all of it.
std::uint64_t dense_bytes_per_token(const ModelFootprint& footprint);
// Rows of the dense matrices one decode token multiplies: every 2-D dense
// tensor but the embedding table, which counts only when it is the lm_head.
std::uint64_t dense_rows_per_token(const ModelFootprint& footprint);

// The expected expert batch calls of a decoded token's MoE layer on the
// CPU: one for the experts it holds, where its top_k picks any, and one
// more for its misses once read, where any missed (MoeModel::moe_round),
// each pick resident with probability `resident` and missed with `miss`.
double expert_batch_calls(double top_k, double resident, double miss);

// Decode reads the KV cache of `decode_depth` positions (a context that
// deep before the token); kPlanMeanDepth: the mean over a full context of
// the plan (ctx / 2), what a plan's one decode figure assumes.
inline constexpr int kPlanMeanDepth = -1;
// Prefill runs a prompt of `prompt_tokens` (at most the context; a GPU
// decoder's batch holds at most that many); kPlanPrompt: llama-bench's
// pp512, at most the context, what a plan's one prefill figure assumes.
inline constexpr int kPlanPrompt = -1;
// Decode runs `decode_run` (cache_replay.h): its tokens, each priced by its
// place in the run (the first ones leave the prompt's experts), and where
// it starts (a fresh context or after its own prompt); by default the
// trace's own runs, what a plan's one decode figure assumes.
SpeedPrediction predict_speed(const DeviceProfile& profile, const ModelFootprint& footprint, const Plan& plan,
                              const experts::UsageHistory* history = nullptr, int decode_depth = kPlanMeanDepth,
                              int prompt_tokens = kPlanPrompt, DecodeRun decode_run = {});

// llama.cpp's split of experts over a GPU (`-ngl 99 --n-cpu-moe N`): whole
// MoE layers' experts in VRAM, the first N layers' on the CPU. The split of
// at most the same VRAM slots as `plan`'s tier (its whole layers), with the
// plan's other knobs and its predicted speed, for coli-plan to print beside
// the per-expert split it chose. nullopt when the plan holds no expert in
// VRAM, or every one (there is nothing to split).
struct WholeLayerSplit {
  int cpu_layers = 0;        // llama.cpp's --n-cpu-moe
  int gpu_layers = 0;        // MoE layers whose experts are all in VRAM
  double vram_share = 0;     // share of expert reads VRAM serves (gpu_layers / layers, any routing)
  GpuTier tier;              // the plan's tier with these layers in VRAM (what coli-sweep runs)
  SpeedPrediction speed;
};
std::optional<WholeLayerSplit> whole_layer_split(const DeviceProfile& profile, const ModelFootprint& footprint,
                                                 const Plan& plan, const experts::UsageHistory* history = nullptr);

}  // namespace coli::planner
