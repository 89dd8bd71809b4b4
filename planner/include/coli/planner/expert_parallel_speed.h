// The predicted speed of an expert-parallel plan (expert_parallel.h): per
// MoE layer the slowest GPU's experts, every GPU's dense copy and KV read in
// parallel, the all-reduce, and the host tiers' experts. Pure; the terms
// are named as SpeedPrediction's are (planner/README.md has the formulas).
#pragma once

#include "coli/experts/usage_history.h"
#include "coli/planner/expert_parallel.h"
#include "coli/planner/plan.h"
#include "coli/planner/speed.h"

namespace coli::planner {

SpeedPrediction predict_expert_parallel(const DeviceProfile& profile, const ModelFootprint& footprint, const Plan& plan,
                                        const experts::UsageHistory* history = nullptr,
                                        int decode_depth = kPlanMeanDepth);

// predict_expert_parallel for an expert-parallel plan, else predict_speed.
// (An expert-parallel plan's prefill is per batch of its exchange: `prompt_tokens` does not change it.)
SpeedPrediction predict_plan_speed(const DeviceProfile& profile, const ModelFootprint& footprint, const Plan& plan,
                                   const experts::UsageHistory* history = nullptr, int decode_depth = kPlanMeanDepth,
                                   int prompt_tokens = kPlanPrompt, DecodeRun decode_run = {});

}  // namespace coli::planner
