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

// An untimed recording (a usage history, or a team's read rounds) is two
// of the workload's passes in one load: a first, then the one it keeps
// (sweep_run.h), which goes on for up to three more passes where too few
// generated tokens waited; the estimate counts the two.
inline constexpr int kPassesPerRecording = 2;

// One repeat of the grid (every configuration once) by its predictions.
struct RepeatEstimate {
  double seconds = 0;            // the runs, over the configurations with a prediction
  double retime_seconds = 0;     // --retime's work before the runs (estimate_retime)
  std::vector<std::size_t> unpredicted;  // configurations left out of it
  std::size_t slowest = 0;       // the configuration of the longest run
  double slowest_seconds = 0;
  double total() const { return seconds + retime_seconds; }
};
RepeatEstimate estimate_repeat(const SpeedTests& tests, double min_timed_seconds,
                               const std::vector<ConfigPrediction>& predictions);

// --retime before each repeat: the kernel points timed again for
// `thread_sets` sets at `seconds_per_set` each, RAM bandwidth in
// `memory_seconds` (probe::retime_memory_seconds), then each streaming team's
// read rounds recorded again, priced by the prediction of the configuration
// that records them (`recorders`). On the VM the OLMoE shape's two teams at
// cap 48 took 114 s of it, the repeat's runs 1.9 min.
double estimate_retime(const SpeedTests& tests, double seconds_per_set, int thread_sets, double memory_seconds,
                       const std::vector<ConfigPrediction>& recorders);

// "6.9 s", "2.3 min", "1.5 h"
std::string format_duration(double seconds);

// "one repeat of the grid takes about 2.3 min by the predictions (...); the longest run: LABEL, 58 s",
// with --retime's share named,
// or that there is no estimate where no configuration has a prediction.
std::string describe_repeat(const RepeatEstimate& estimate, const std::vector<std::string>& labels);

// --max-minutes: whether a repeat that would take `next_seconds` may start
// `elapsed_seconds` into the sweep (a limit of 0 or below: no limit).
bool repeat_fits(double max_minutes, double elapsed_seconds, double next_seconds);

}  // namespace coli::bench
