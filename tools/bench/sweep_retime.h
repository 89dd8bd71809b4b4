// coli-sweep --retime: the profile's CPU measurements timed again before each
// repeat of the grid (probe/measure/retime.h, as coli-plan --retime does) and
// the read rounds recorded again (sweep_run.h), so the grid's runs are also
// predicted from the machine as it is while they run. A shared VM's speed
// moves 20-48% within minutes (docs/benchmarks.md, session 26): a prediction
// from a probe taken before that cannot hold within 10%, and the error against
// the re-timed points says what the model gets wrong apart from the machine's
// drift. Pure, here: which thread sets a grid re-times, and how far the
// engine's read rounds moved.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "coli/experts/read_rounds.h"
#include "measure/kernel_tuning.h"
#include "sweep_grid.h"

namespace coli::bench {

// The grid's distinct CPU thread sets (a planned prefill set too), in grid order.
std::vector<ThreadSet> grid_thread_sets(const std::vector<SweepConfig>& grid);

// What the tuning phase times for `sets`: the probe's own candidate where one
// has a set's PUs (its name is the profile's points'), else the set as the
// sweep runs it (probe::retime_measurements times them).
std::vector<probe::ThreadCandidate> retime_candidates(const CpuFacts& cpu, const std::vector<ThreadSet>& sets);

// How far the engine's read rounds moved: per setting (record size, I/O
// pool, team) in both lists with one-read rounds, the mean seconds of a
// one-read round before and now: "; one-read rounds beside 8 threads
// 0.22 ms (were 0.10)", or "" where no setting is in both.
std::string read_round_drift(std::span<const experts::ReadRounds> before, std::span<const experts::ReadRounds> now);

// The planned configuration's predicted speeds, from the profile and from
// the re-timed figures: what the re-timing moved where it matters (the
// kernels' median ratio in drift_text can stay at 0.98x while the decode
// kernels the plan leans on moved 9%). "; the planned configuration
// re-timed: decode 55.9 tok/s (profile 51.5, +8.5%), prefill 354.0 tok/s
// (profile 358.7, -1.3%)", or "" where either prediction has no figure.
struct PredictedSpeeds {
  double decode_tok_s = 0, prefill_tok_s = 0;
};
std::string planned_prediction_drift(PredictedSpeeds profile, PredictedSpeeds retimed);

}  // namespace coli::bench
