#include "measure/stats.h"

#include <algorithm>

namespace coli::probe {

SampleStats summarize(std::vector<double> samples) {
  SampleStats stats;
  if (samples.empty()) return stats;
  std::sort(samples.begin(), samples.end());
  const std::size_t count = samples.size();
  const std::size_t middle = count / 2;
  stats.samples = static_cast<int>(count);
  stats.median = count % 2 == 1 ? samples[middle] : (samples[middle - 1] + samples[middle]) / 2;
  stats.best = samples.back();
  stats.worst = samples.front();
  // With one sample there is no spread to speak of; a zero median (nothing
  // moved) would make the ratio meaningless.
  stats.spread = (count > 1 && stats.median > 0) ? (stats.best - stats.worst) / stats.median : 0;
  return stats;
}

SampleStats measure_repeatedly(const std::function<double()>& run_once, const RepeatPolicy& policy) {
  using Clock = std::chrono::steady_clock;
  // The budget covers the warm-up too: a slow warm-up must not let the whole
  // measurement overrun.
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start); };

  for (int i = 0; i < policy.warmup_runs && elapsed() < policy.max_total; ++i) run_once();

  const int max_samples = std::max(1, policy.max_samples);
  const auto timed_start = Clock::now();
  const auto timed_elapsed = [&] { return std::chrono::duration<double>(Clock::now() - timed_start); };
  std::vector<double> samples;
  while (true) {
    // Always at least one sample, even when the warm-up used the budget up.
    samples.push_back(run_once());
    const int count = static_cast<int>(samples.size());
    if (count >= max_samples || elapsed() >= policy.max_total) break;
    const bool enough = count >= policy.min_samples && timed_elapsed() >= policy.min_total;
    if (enough) break;
  }
  return summarize(std::move(samples));
}

}  // namespace coli::probe
