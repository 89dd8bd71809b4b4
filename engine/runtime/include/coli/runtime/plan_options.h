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

}  // namespace coli::runtime
