// The plan file: a Plan, the machine and model it was made for, and its
// predicted speed, as TOML (what `coli run --plan` reads) or JSON. Both come
// from one toml++ table, like the device profile (probe/profile/profile_write.cpp).
// Parsing validates every field and the plan's invariants; an error names
// the file, the line and the field and says what to do.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "coli/base/result.h"
#include "coli/planner/plan.h"
#include "coli/planner/speed.h"

namespace coli::planner {

// Bump when a field is added, removed or changes meaning; readers refuse newer.
// v2: knobs.compute_pus (thread placement) and [gpu] (the VRAM tier).
// v3: gpu.device_index and gpu.device_uuid (identical GPUs are told apart;
//     a v2 plan with a GPU is refused: re-plan).
// v4: decisions[].number and .unit, the value as a number beside its text
//     (a v3 plan is still read; its decisions have no number).
// v5: knobs.kv_type (f32|f16|bf16), the CPU KV cache's precision, priced in
//     the KV line (a v4 plan is still read, as f32: what its engine used;
//     an older build refuses a v5 plan rather than hold KV in f32 unpriced).
// v6: gpu.batch_tokens, a prompt's tokens per GPU submission (--gpu-batch),
//     priced in VRAM (a v5 plan is still read, as 128: what its engine used;
//     an older build refuses a v6 plan rather than run a batch other than priced).
//     Since issue 15, speed.decode_terms and .prefill_terms may follow: the
//     prediction's parts, for people and scripts; no engine knob, so not a
//     new version (an older build reads the plan and ignores them); so may
//     speed.decode_disk_reads, .prefill_disk_reads, .prefill_prompt_tokens,
//     .disk_read_seconds.
// v7: [expert_parallel] (issue 18): experts spread over 2+ CUDA devices:
//     each GPU's share, layers[].expert_gpu (per expert the CUDA ordinal
//     holding it, -1 for the host tiers) and the all-reduce's traffic; each
//     GPU's memory lines are named "GPU <ordinal> ..." (a v6 plan is still
//     read: one GPU; an older build refuses a v7 plan rather than run one
//     GPU's share as the whole model).
inline constexpr int kPlanSchemaVersion = 7;

struct PlanFile {
  int schema_version = kPlanSchemaVersion;
  // What the plan was made for: a run on another machine or model must re-plan.
  std::string profile_fingerprint;  // DeviceProfile::fingerprint
  std::string profile_path;         // for humans
  std::string retimed;              // coli-plan --retime: how far the kernel points moved (re-timed / profile), else ""
  std::string model_name;           // the --model argument, for humans
  std::string model_identity;       // model_identity(): config text + tensor names
  WeightFormat expert_format = WeightFormat::q4_g64;
  DenseFormat dense_format = DenseFormat::source;
  int top_k = 0;                    // with n_experts, re-checks the round invariant on load
  Plan plan;
  SpeedPrediction speed;
  double planning_ms = 0;
  bool operator==(const PlanFile&) const = default;
};

// "fnv1a64:<hex>" over the config.json text and the expected tensor names
// (experts::usage_model_identity): another config or layout gives another identity.
std::string model_identity(std::string_view config_text, const model::ModelConfig& config);

std::string plan_to_toml(const PlanFile& plan);
std::string plan_to_json(const PlanFile& plan);  // the plan's table plus "fits": true
// {"fits": false, "does_not_fit", "refused": message, "tiers": {"ram": {"needed_bytes",
// "available_bytes"}, ...}, "advice": [...]}: what coli-plan --json prints on a refusal.
std::string refusal_to_json(const Refusal& refusal);

// `source_name` (usually the path) prefixes every error.
Result<PlanFile> parse_plan(std::string_view toml_text, const std::string& source_name);
Result<PlanFile> load_plan(const std::filesystem::path& path);
Status save_plan(const std::filesystem::path& path, const PlanFile& plan);  // atomic

// Inverse of tier_name.
std::optional<Tier> parse_tier(std::string_view name);

}  // namespace coli::planner
