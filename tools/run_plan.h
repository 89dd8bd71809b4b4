// `coli run --plan FILE` / `--profile FILE`: the engine's knobs from a plan
// (checked against this model), or planned on the spot from a device
// profile; and the plan-vs-actual report at the end of a run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/first_pass.h"
#include "coli/planner/plan_io.h"
#include "coli/runtime/moe_model.h"

namespace coli::tools {

// The speed model for a run's own prompt, mean decode depth and decode run (planner::predict_plan_speed),
// and what the prompt pays as its process's first pass (planner::first_pass_cost).
struct RunForecast {
  planner::SpeedPrediction speed;
  planner::FirstPassCost first_pass;
};
using RunPredictor = std::function<RunForecast(int prompt_tokens, int decode_depth, planner::DecodeRun decode)>;

struct PlannedKnobs {
  runtime::ModelOptions options;  // runtime::options_from_plan, pins included
  planner::PlanFile plan;
  std::string source;         // "plan FILE" or "profile FILE" for messages
  // This plan's speed for another workload (a prompt of N tokens, decode at
  // KV depth D), predicted from the profile as coli-plan predicts; empty
  // where no profile is at hand (a plan file whose profile is gone or
  // changed: the plan's own figures stand).
  RunPredictor predict_for;
};

// A prompt's tokens per GPU submission for `coli run --backend B` without a
// plan: the decoder's own default (BackendMemory::prefill_batch_tokens),
// the value coli-plan would plan.
int default_gpu_batch_tokens(const std::string& backend);

// Errors: an unreadable or invalid plan/profile, a plan made for another
// model, a plan the planner refuses (what to change).
// Pins are picked from `history` (nullptr: none recorded yet; a plan's pins are then dropped, with a warning).
// `refused` (when given) is set when the error is a refusal: the plan does not
// fit this machine's live headroom, or the planner refused (coli run exits 3).
Result<PlannedKnobs> knobs_from_plan(const std::filesystem::path& plan_file, const runtime::ModelShape& shape,
                                     const experts::UsageHistory* history, bool* refused = nullptr,
                                     const char* program = "coli run");
// The run's own workload sizes the plan: its prompt length (the largest
// forward pass) and whether a tokenizer is loaded.
struct RunWorkload {
  int prompt_tokens = 0;
  bool tokenizer = true;
  const experts::UsageHistory* history = nullptr;  // ranks pins; nullptr when none was recorded
  const char* program = "coli run";                // what the messages on the way start with
};
Result<PlannedKnobs> knobs_from_profile(const std::filesystem::path& profile_file, const runtime::ModelShape& shape,
                                        int history_pins, const RunWorkload& workload, bool* refused = nullptr);

// `coli run` without --plan/--profile: the memory its knobs need (priced as a
// plan prices them) against this machine's live headroom (meminfo and cgroup
// limits, read fresh), or `ram` when smaller. Refuses before any weight is
// loaded when it does not fit, unless `skip_check`; returns the RSS
// watchdog's limit, the needed bytes (RAM plus margin), as a plan arms it.
// `refused` (optional) tells "does not fit" from an error.
Result<std::uint64_t> check_memory_without_plan(const runtime::ModelShape& shape, const runtime::ModelOptions& options,
                                                const RunWorkload& workload, std::optional<std::uint64_t> ram,
                                                bool skip_check,
                                                bool* refused = nullptr);

// Planned vs measured: RAM total (plus margin) against peak RSS, and the
// large components against the engine's own accounting. Returns false when
// the measured RSS ran past the plan plus its margin.
bool print_plan_vs_actual(const planner::PlanFile& plan, const runtime::ModelStats& stats, std::uint64_t peak_rss);

// This run's speed next to the plan's prediction (issue 15: the error of the
// speed model, as plan vs actual is for memory).
struct MeasuredSpeed {
  double prefill_tok_s = 0;
  int prompt_tokens = 0;
  double decode_tok_s = 0;       // 0: fewer than two generated tokens
  double decode_mean_depth = 0;  // KV positions the decode steps saw, on average
  bool cold_cache = false;       // experts stream and the load read none (--no-preload, no usage history)
  // Expert records read from disk (cache misses): the prompt's pass, and per
  // decode pass; negative where the run has none to count.
  double prompt_reads = -1, decode_reads_per_token = -1;
  int decode_tokens = 0;  // decode passes (forward passes after the prompt's)
  std::uint64_t prompt_page_faults = 0;  // GenerationResult::prompt_page_faults
  bool first_pass = true;                // GenerationResult::first_pass: priced as the process's first
};
// The prediction to set beside a run: for its own prompt and mean decode
// depth where the knobs can predict (--profile), else the plan's (a 512-token
// prompt at most the context, decode at ctx / 2), each saying which.
struct RunPrediction {
  planner::SpeedPrediction speed;  // warm passes, as coli-plan and coli-sweep predict them
  // The prompt's pass is the process's first (for_this_run only; else not priced):
  // prefill_tok_s() sets it beside the measured figure.
  planner::FirstPassCost first_pass;
  bool for_this_run = false;
  int prompt_tokens = 0;  // the prefill figure's prompt
  int decode_depth = 0;   // the decode figure's KV depth
  // A warm prefill figure (the prediction's or a band end) for this run: slowed by the first pass where it is priced.
  double as_first_pass(double warm_tok_s) const { return planner::first_pass_tok_per_s(warm_tok_s, prompt_tokens, first_pass); }
  double prefill_tok_s() const { return as_first_pass(speed.prefill_tok_per_s); }
};
RunPrediction prediction_for_run(const PlannedKnobs& knobs, const MeasuredSpeed& measured);
void print_speed_vs_plan(const RunPrediction& predicted, const MeasuredSpeed& measured);
// The engine's own accounting and the process's RSS, for a run without a plan (--report).
void print_measured(const runtime::ModelStats& stats, std::uint64_t peak_rss);

}  // namespace coli::tools
