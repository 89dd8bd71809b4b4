#include "coli/planner/thread_choice.h"

#include <algorithm>

#include "coli/base/text.h"

namespace coli::planner {
namespace {

double speed_of(const SpeedPrediction& s, SpeedMetric metric) {
  return metric == SpeedMetric::decode ? s.decode_tok_per_s : s.prefill_tok_per_s;
}
const char* metric_name(SpeedMetric metric) { return metric == SpeedMetric::decode ? "decode" : "prefill"; }
// The prediction on the probe's slowest rounds (speed_band.h); 0 without a band.
double slowest_of(const SpeedPrediction& s, SpeedMetric metric) {
  if (!s.band.made()) return 0.0;
  return metric == SpeedMetric::decode ? s.band.decode_slowest : s.band.prefill_slowest;
}

// Seconds as people read them: "4.10 ms", "310.0 us".
std::string duration(double seconds) {
  return seconds >= 1e-3 ? format_fixed(seconds * 1e3, 2) + " ms" : format_fixed(seconds * 1e6, 1) + " us";
}

// A term's time within its prediction: prefill's compute and memory parts
// overlap, so only the longer group sets the speed.
const std::vector<SpeedTerm>& terms_of(const SpeedPrediction& s, SpeedMetric metric) {
  return metric == SpeedMetric::decode ? s.decode_terms : s.prefill_terms;
}

// A lead inside the leader's own band (another set predicted above the
// leader's slowest-rounds figure) is the probe's unsteadiness, not the
// sets': of those, the one that holds most on its slowest rounds (the H100
// box's 8-thread tiny-model decode led 16 threads by 20% on a cached point
// whose rounds spread 45%, and ran 13% slower; 4% and 29% in session 44).
// The leader where no band was made or none holds more.
std::size_t steadiest_within_band(const std::vector<SetPrediction>& sets, const std::vector<std::size_t>& order,
                                  std::size_t leader, SpeedMetric metric) {
  const double floor = slowest_of(sets[leader].speed, metric);
  std::size_t chosen = leader;
  for (std::size_t i : order) {
    const double holds = slowest_of(sets[i].speed, metric);
    if (floor > 0 && speed_of(sets[i].speed, metric) >= floor && holds > slowest_of(sets[chosen].speed, metric)) chosen = i;
  }
  return chosen;
}

}  // namespace

std::string why_slower(const SpeedPrediction& faster, const SpeedPrediction& slower, SpeedMetric metric) {
  const std::vector<SpeedTerm>& a = terms_of(faster, metric);
  const std::vector<SpeedTerm>& b = terms_of(slower, metric);
  const SpeedTerm* worst = nullptr;
  double grew = 0, before = 0;
  for (const SpeedTerm& term : b) {
    const auto same = std::find_if(a.begin(), a.end(), [&](const SpeedTerm& t) { return t.name == term.name; });
    const double was = same == a.end() ? 0.0 : same->seconds;
    if (term.seconds - was > grew) worst = &term, grew = term.seconds - was, before = was;
  }
  if (!worst) return "no term of its " + std::string(metric_name(metric)) + " is slower; it loses on the sum";
  const std::string unit = metric == SpeedMetric::decode ? " per token" : " per prompt token";
  return "its " + worst->name + " cost " + duration(worst->seconds) + unit + " against " + duration(before);
}

std::optional<SetPick> pick_fastest_set(const std::vector<SetPrediction>& sets, SpeedMetric metric,
                                        const CpuSet& recommended) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < sets.size(); ++i) {
    if (sets[i].speed.available && speed_of(sets[i].speed, metric) > 0) order.push_back(i);
  }
  if (order.empty()) return std::nullopt;
  auto speed = [&](std::size_t i) { return speed_of(sets[i].speed, metric); };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return speed(x) > speed(y); });
  const double best = speed(order.front());
  // Among the tied: the recommended set, else the fewest threads (the first of those in the profile's order).
  std::size_t chosen = order.front();
  bool recommended_won = false;
  for (std::size_t i : order) {
    if (speed(i) < best * (1.0 - kPredictionTie)) break;
    if (!recommended.empty() && sets[i].set.pus == recommended) {
      chosen = i, recommended_won = true;
      break;
    }
    if (sets[i].set.threads < sets[chosen].set.threads) chosen = i;
  }
  const std::size_t leader = chosen;
  chosen = steadiest_within_band(sets, order, leader, metric);
  auto slowest = [&](std::size_t i) { return slowest_of(sets[i].speed, metric); };
  SetPick pick;
  pick.chosen = chosen;
  for (std::size_t i : order) {
    if (i != chosen) {
      pick.runner_up = i;
      break;
    }
  }
  const int digits = best >= 100 ? 1 : 2;
  pick.reason = "predicted " + std::string(metric_name(metric)) + " " + format_fixed(speed(chosen), digits) + " tok/s on " +
                sets[chosen].set.name;
  if (chosen != leader) {
    pick.reason += " and " + format_fixed(slowest(chosen), digits) + " on the probe's slowest rounds, the most of " +
                   std::to_string(order.size()) + " measured sets there: " + sets[leader].set.name + "'s lead (" +
                   format_fixed(speed(leader), digits) + " tok/s) lies inside its own band (" +
                   format_fixed(slowest(leader), digits) + " on its slowest rounds)";
  } else {
    pick.reason += ", the fastest of " + std::to_string(order.size()) + " measured sets";
  }
  if (chosen == leader && chosen != order.front()) {
    pick.reason += recommended_won ? " (within " + format_fixed(kPredictionTie * 100, 1) + "% of " + sets[order.front()].set.name +
                                         ": a tie the profile's recommended set wins)"
                                   : " (within " + format_fixed(kPredictionTie * 100, 1) + "% of " + sets[order.front()].set.name +
                                         ": a tie the fewer threads win)";
  }
  if (pick.runner_up) {
    const SetPrediction& other = sets[*pick.runner_up];
    const double share = (speed(*pick.runner_up) / speed(chosen) - 1.0) * 100;
    pick.reason += "; runner-up " + other.set.name + " at " + format_fixed(speed(*pick.runner_up), digits) + " tok/s (" +
                   (share >= 0 ? "+" : "") + format_fixed(share, 1) + "%)" +
                   (share < 0 ? ": " + why_slower(sets[chosen].speed, other.speed, metric) : "");
  }
  return pick;
}

}  // namespace coli::planner
