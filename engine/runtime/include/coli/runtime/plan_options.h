// The one translation of a plan into the engine's knobs: coli run
// --plan/--profile, coli-sweep and coli-decode-bench all build their
// ModelOptions here, so a plan means the same thing to every tool.
#pragma once

#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/plan.h"
#include "coli/runtime/moe_model.h"

namespace coli::runtime {

// Every knob the plan decides: threads and their PUs, the CPU kernel, the
// cache capacity (the plan's cap; cap == n_experts is every expert
// resident), the pins, prefill rounds, context, I/O, and the RSS watchdog at
// the plan's RAM plus its margin. The plan says how many experts to pin per
// layer; which ones are the most used of each layer in `history`.
// Errors: a plan for another expert count, a cap outside [top_k, experts],
// pins without a history to pick them from, no threads.
Result<ModelOptions> options_from_plan(const planner::Plan& plan, const ModelShape& shape,
                                       const experts::UsageHistory* history = nullptr);

// The memory `options` need when no plan chose them (coli run without
// --plan): priced by the planner exactly as a plan with these knobs is
// (preview_memory's RAM lines plus decide_safety_margin), so a run without a
// plan is checked, and watched, against the same figures a plan would have.
struct KnobsMemory {
  std::uint64_t planned_bytes = 0;  // the RAM lines
  std::uint64_t margin_bytes = 0;   // the plan's safety margin for them
  std::uint64_t slot_bytes = 0;     // one expert slot in every MoE layer (what --cap 1 less saves)
  int cap = 0;                      // expert slots per layer these knobs hold
  int min_cap = 0;                  // the fewest the engine runs with (top_k)
  std::string summary;              // "dense 1.2 GiB, KV 64 MiB, expert slots 3.0 GiB, ..."
  std::uint64_t needed() const { return planned_bytes + margin_bytes; }
};
// The planner's footprint of the model a container holds: its config with
// the formats its experts and dense tensors are stored in. Errors: the
// container's config cannot be read.
Result<planner::ModelFootprint> footprint_of(const ModelShape& shape);

// `prompt_tokens`: the longest forward pass; `tokenizer`: one is loaded.
// Errors: the container's config cannot be read.
Result<KnobsMemory> memory_for_options(const ModelShape& shape, const ModelOptions& options, int prompt_tokens,
                                       bool tokenizer);

// Pure: Ok when `need` fits `headroom_bytes`; else the refusal naming both
// figures, where the headroom came from, and what to change.
Status check_headroom(const KnobsMemory& need, std::uint64_t headroom_bytes, const std::string& headroom_source);

}  // namespace coli::runtime
