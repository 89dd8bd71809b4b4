// How far a prediction moves with the machine's own unsteadiness while it
// was probed. Every rate the probe measured is the median of several rounds,
// and the profile keeps each one's slowest and fastest round too: the same
// model run on all the slowest rounds, then on all the fastest, brackets what
// this machine did while it was being measured. On the 16-core cloud host
// the rates moved 15-35% between probes minutes apart (docs/benchmarks.md,
// session 40), so one figure alone says less than it seems. Pure.
#pragma once

#include "coli/experts/usage_history.h"
#include "coli/planner/plan.h"
#include "coli/planner/speed.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

enum class SampleBound { slowest, fastest };

// The profile with every measured rate (memory and disk bandwidth, the
// kernel points' GB/s and tokens/s, GPU kernels, uploads) at its slowest or
// fastest round in place of its median. OpenMP costs and the reads-beside-
// compute slowdowns keep their medians: they are stored without rounds.
DeviceProfile at_sample_bound(DeviceProfile profile, SampleBound bound);

// predict_plan_speed with its band filled in: decode and prefill on the
// slowest and on the fastest rounds. No band when the prediction is
// unavailable.
SpeedPrediction predict_plan_speed_with_band(const DeviceProfile& profile, const ModelFootprint& footprint,
                                             const Plan& plan, const experts::UsageHistory* history = nullptr,
                                             int decode_depth = kPlanMeanDepth, int prompt_tokens = kPlanPrompt,
                                             DecodeRun decode_run = {});

}  // namespace coli::planner
