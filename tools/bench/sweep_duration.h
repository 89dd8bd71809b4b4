// How long a grid takes, from its own predictions, and when to stop one
// that would outrun its time (coli-sweep --max-minutes). A grid point that
// streams most experts from a slow disk can take minutes a run: on the H200
// the OLMoE shape at cap 16 of 64 ran past 540 s before its first repeat
// ended. Pure: no clock, no model.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "speed_tests.h"
#include "sweep_report.h"

namespace coli::bench {

// A run repeats its warm-up and timed pass until the timed parts add up to
// the workload's minimum, at most this many passes (sweep_run.h).
inline constexpr int kMaxPasses = 32;

// One run of the workload by a configuration's prediction: a pass is an
// untimed warm-up prompt of prefill_tokens, the timed prompt, and per depth
// an untimed prefill of that depth then decode_tokens timed steps; passes
// again until min_timed_seconds are timed. Loading the model is not in it.
struct RunEstimate {
  double pass_seconds = 0, timed_seconds = 0;  // one pass: all of it, its timed parts
  int passes = 0;
  double seconds() const { return pass_seconds * passes; }
};
std::optional<RunEstimate> estimate_run(const SpeedTests& tests, double min_timed_seconds, const ConfigPrediction& p);

// One repeat of the grid (every configuration once) by its predictions.
struct RepeatEstimate {
  double seconds = 0;            // over the configurations with a prediction
  std::vector<std::size_t> unpredicted;  // configurations left out of it
  std::size_t slowest = 0;       // the configuration of the longest run
  double slowest_seconds = 0;
};
RepeatEstimate estimate_repeat(const SpeedTests& tests, double min_timed_seconds,
                               const std::vector<ConfigPrediction>& predictions);

// "6.9 s", "2.3 min", "1.5 h"
std::string format_duration(double seconds);

// "one repeat of the grid takes about 2.3 min by the predictions (...); the longest run: LABEL, 58 s",
// or that there is no estimate where no configuration has a prediction.
std::string describe_repeat(const RepeatEstimate& estimate, const std::vector<std::string>& labels);

// --max-minutes: whether a repeat that would take `next_seconds` may start
// `elapsed_seconds` into the sweep (a limit of 0 or below: no limit).
bool repeat_fits(double max_minutes, double elapsed_seconds, double next_seconds);

}  // namespace coli::bench
