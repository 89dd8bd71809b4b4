#include "coli/planner/speed_band.h"

#include "coli/planner/expert_parallel_speed.h"

namespace coli::planner {
namespace {

void to_bound(SampleStats& stats, SampleBound bound) {
  if (stats.samples == 0) return;  // not run: its zeros stay
  stats.median = bound == SampleBound::slowest ? stats.worst : stats.best;
}

}  // namespace

DeviceProfile at_sample_bound(DeviceProfile profile, SampleBound bound) {
  Measurements& m = profile.measurements;
  if (m.memory) {
    for (MemoryBandwidthPoint& p : m.memory->points) to_bound(p.gb_per_s, bound);
  }
  if (m.disk) {
    for (DiskBandwidthPoint& p : m.disk->points) to_bound(p.gb_per_s, bound);
  }
  for (GpuKernelResult& k : m.gpu_kernels) to_bound(k.gb_per_s, bound);
  if (m.kernel_tuning) {
    for (KernelThroughputPoint& p : m.kernel_tuning->points) {
      to_bound(p.gb_per_s, bound);
      to_bound(p.tokens_per_s, bound);
    }
  }
  for (UploadBandwidthPoint& u : m.uploads) to_bound(u.gb_per_s, bound);
  return profile;
}

SpeedPrediction predict_plan_speed_with_band(const DeviceProfile& profile, const ModelFootprint& footprint,
                                             const Plan& plan, const experts::UsageHistory* history, int decode_depth,
                                             int prompt_tokens, DecodeRun decode_run) {
  SpeedPrediction speed = predict_plan_speed(profile, footprint, plan, history, decode_depth, prompt_tokens, decode_run);
  if (!speed.available) return speed;
  const SpeedPrediction slow = predict_plan_speed(at_sample_bound(profile, SampleBound::slowest), footprint, plan,
                                                  history, decode_depth, prompt_tokens, decode_run);
  const SpeedPrediction fast = predict_plan_speed(at_sample_bound(profile, SampleBound::fastest), footprint, plan,
                                                  history, decode_depth, prompt_tokens, decode_run);
  if (!slow.available || !fast.available) return speed;
  speed.band = SpeedBand{slow.decode_tok_per_s, fast.decode_tok_per_s, slow.prefill_tok_per_s, fast.prefill_tok_per_s};
  return speed;
}

}  // namespace coli::planner
