// Choosing thread sets by predicted speed (issue 15): the planner plans and
// predicts (speed.h) every set the probe's tuning phase timed, decodes on
// the set predicted fastest for decode and prefills on the one fastest for
// prefill, and says which set came second and by which term it lost. Pure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "coli/planner/deciders.h"
#include "coli/planner/speed.h"

namespace coli::planner {

enum class SpeedMetric { decode, prefill };

struct SetPrediction {
  MeasuredThreadSet set;
  SpeedPrediction speed;
};

// Predictions closer than this share of the fastest are a tie: the
// prediction cannot rank them, so the tie goes to the profile's
// recommended set if it is among them, else to the fewest threads.
inline constexpr double kPredictionTie = 0.005;

struct SetPick {
  std::size_t chosen = 0;
  std::optional<std::size_t> runner_up;  // the fastest of the others; none with one set
  std::string reason;
};

// The set to run `metric` on, among predictions that are available; nullopt
// when none is.
std::optional<SetPick> pick_fastest_set(const std::vector<SetPrediction>& sets, SpeedMetric metric,
                                        const CpuSet& recommended);

// What `slower` lost by against `faster`: the term that grew most, both
// figures per token ("its experts in RAM cost 4.10 ms per token against 3.20 ms").
std::string why_slower(const SpeedPrediction& faster, const SpeedPrediction& slower, SpeedMetric metric);

}  // namespace coli::planner
