#include "sweep_duration.h"

#include <algorithm>
#include <cmath>

#include "coli/base/text.h"

namespace coli::bench {

std::optional<RunEstimate> estimate_run(const SpeedTests& tests, double min_timed_seconds, const ConfigPrediction& p) {
  if (!p.available || p.prefill_tok_s <= 0 || p.decode_tok_s <= 0) return std::nullopt;
  // Every prefill at the prompt's rate: a depth's shorter prefill runs at about the same tok/s.
  const double prompt = tests.prefill_tokens / p.prefill_tok_s;
  double depth_prefills = 0;
  for (int depth : tests.depths) depth_prefills += depth / p.prefill_tok_s;
  RunEstimate run;
  run.timed_seconds = prompt + static_cast<double>(tests.depths.size()) * tests.decode_tokens / p.decode_tok_s;
  run.pass_seconds = prompt /* the warm-up's */ + run.timed_seconds + depth_prefills;
  const double needed = std::ceil(min_timed_seconds / run.timed_seconds);
  run.passes = static_cast<int>(std::clamp(needed, 1.0, static_cast<double>(kMaxPasses)));
  return run;
}

RepeatEstimate estimate_repeat(const SpeedTests& tests, double min_timed_seconds,
                               const std::vector<ConfigPrediction>& predictions) {
  RepeatEstimate repeat;
  for (std::size_t c = 0; c < predictions.size(); ++c) {
    auto run = estimate_run(tests, min_timed_seconds, predictions[c]);
    if (!run) {
      repeat.unpredicted.push_back(c);
      continue;
    }
    repeat.seconds += run->seconds();
    if (run->seconds() > repeat.slowest_seconds) repeat.slowest = c, repeat.slowest_seconds = run->seconds();
  }
  return repeat;
}

double estimate_retime(const SpeedTests& tests, double seconds_per_set, int thread_sets, double memory_seconds,
                       const std::vector<ConfigPrediction>& recorders) {
  double seconds = seconds_per_set * std::max(0, thread_sets) + std::max(0.0, memory_seconds);
  for (const ConfigPrediction& p : recorders) {
    if (auto run = estimate_run(tests, 0, p)) seconds += kPassesPerRecording * run->pass_seconds;
  }
  return seconds;
}

std::string format_duration(double seconds) {
  if (seconds < 90) return format_fixed(seconds, seconds < 10 ? 1 : 0) + " s";
  if (seconds < 5400) return format_fixed(seconds / 60, 1) + " min";
  return format_fixed(seconds / 3600, 1) + " h";
}

std::string describe_repeat(const RepeatEstimate& estimate, const std::vector<std::string>& labels) {
  if (estimate.slowest_seconds <= 0)
    return "no estimate of the grid's time: none of its " + std::to_string(estimate.unpredicted.size()) +
           " configuration(s) has a prediction";
  std::string text = "one repeat of the grid takes about " + format_duration(estimate.total()) + " by the predictions (" +
                     (estimate.retime_seconds > 0 ? "the runs' passes " + format_duration(estimate.seconds) + ", re-timing " +
                                                        format_duration(estimate.retime_seconds)
                                                  : std::string("the runs' passes")) +
                     "; loads and the first untimed recording passes come on top)";
  if (estimate.slowest < labels.size())
    text += "; the longest run: " + labels[estimate.slowest] + ", " + format_duration(estimate.slowest_seconds);
  if (!estimate.unpredicted.empty())
    text += "; " + std::to_string(estimate.unpredicted.size()) + " configuration(s) without a prediction not counted";
  return text;
}

bool repeat_fits(double max_minutes, double elapsed_seconds, double next_seconds) {
  return max_minutes <= 0 || elapsed_seconds + next_seconds <= max_minutes * 60;
}

}  // namespace coli::bench
