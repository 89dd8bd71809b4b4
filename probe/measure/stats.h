// Careful timing (design.md #5): warm up, repeat until a minimum time, keep
// the distribution, stop at a budget.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "coli/probe/device_profile.h"

namespace coli::probe {

// Summarises bandwidth-like samples (higher is better).
SampleStats summarize(std::vector<double> samples);

struct RepeatPolicy {
  int warmup_runs = 1;
  int min_samples = 3;
  int max_samples = 15;
  std::chrono::duration<double> min_total{0.15};   // keep sampling at least this long
  std::chrono::duration<double> max_total{1.0};    // never longer than this
};

// Calls `run_once` (which returns one sample, e.g. GB/s) under the policy.
SampleStats measure_repeatedly(const std::function<double()>& run_once, const RepeatPolicy& policy);

}  // namespace coli::probe
