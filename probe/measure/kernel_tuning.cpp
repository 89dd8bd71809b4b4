// Candidate thread sets and the choice between them: pure functions of the
// facts and of the measured points (the timing itself is kernel_timing.cpp).
#include "measure/kernel_tuning.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>

#include "coli/base/text.h"
#include "cpu/core_map.h"

namespace coli::probe {
namespace {

struct KindCores {
  int rank = 0;
  std::vector<int> first;  // lowest usable PU of each core, core order
  std::vector<int> all;    // every usable PU of those cores
};

std::vector<KindCores> usable_kind_cores(const CpuFacts& cpu) {
  std::vector<CpuKind> kinds = cpu.kinds;
  if (kinds.empty()) kinds.push_back(CpuKind{.pus = cpu.usable.pus, .cores = cpu.cores});  // facts without kinds
  std::sort(kinds.begin(), kinds.end(), [](const CpuKind& a, const CpuKind& b) { return a.rank < b.rank; });
  std::vector<KindCores> result;
  for (const CpuKind& kind : kinds) {
    KindCores cores{kind.rank, {}, {}};
    for (const CpuSet& core : cores_of(kind)) {
      const CpuSet usable = core.intersect(cpu.usable.pus);
      if (usable.empty()) continue;
      cores.first.push_back(usable.cpus().front());
      cores.all.insert(cores.all.end(), usable.cpus().begin(), usable.cpus().end());
    }
    if (!cores.first.empty()) result.push_back(std::move(cores));
  }
  return result;
}

std::string format_figure(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, value >= 100 ? "%.0f" : "%.3g", value);
  return buffer;
}

struct SetTimes { CpuSet pus; bool smt = false; std::map<std::string, const KernelThroughputPoint*> kernels; };

std::map<std::string, SetTimes> by_set(const std::vector<KernelThroughputPoint>& points) {
  std::map<std::string, SetTimes> sets;
  for (const KernelThroughputPoint& point : points) {
    if (point.tokens_per_s.median <= 0) continue;  // nothing usable was timed
    SetTimes& set = sets[point.thread_set];
    set.pus = point.pus, set.smt = point.smt;
    set.kernels[point.kernel] = &point;
  }
  return sets;
}

double seconds_per_token(const KernelThroughputPoint& point) { return 1.0 / point.tokens_per_s.median; }

// "kind0:1c 210 ±1.2%" (the margin only when there is one).
std::string describe_score(const SetScore& score) {
  std::string text = score.thread_set + " " + format_figure(score.score);
  if (score.margin > 0) text += " ±" + format_figure(100 * score.margin) + "%";
  return text;
}

// "kind0:1c 210 ±1.2%, kind0:2c 312 ±0.8%" in candidate order.
std::string list_scores(const std::vector<SetScore>& scores) {
  std::string text;
  for (const SetScore& score : scores) text += (text.empty() ? "" : ", ") + describe_score(score);
  return text;
}

std::string describe_choice(const char* phase, const std::vector<SetScore>& scores, int chosen) {
  const SetScore& pick = scores[static_cast<std::size_t>(chosen)];
  const auto best = std::max_element(scores.begin(), scores.end(),
                                     [](const SetScore& a, const SetScore& b) { return a.score < b.score; });
  return std::string(phase) + " " + pick.thread_set + " (" + std::to_string(pick.pus.size()) +
         (pick.pus.size() == 1 ? " thread, " : " threads, ") +
         format_figure(pick.score) + " tokens/s per layer, " + format_figure(100 * pick.score / best->score) +
         "% of the best, " + best->thread_set + "; measured " + list_scores(scores) + ")";
}

}  // namespace

std::vector<ThreadCandidate> tuning_candidates(const CpuFacts& cpu) {
  const std::vector<KindCores> kinds = usable_kind_cores(cpu);
  int cap = INT_MAX;
  if (cpu.usable.quota_cpus) cap = std::max(1, static_cast<int>(std::floor(std::min(*cpu.usable.quota_cpus, 1e6))));
  std::vector<ThreadCandidate> out;
  auto add = [&](std::string name, std::vector<int> pus, int cores, bool smt, int priority) {
    if (pus.empty() || static_cast<int>(pus.size()) > cap) return;
    CpuSet set(std::move(pus));
    for (const ThreadCandidate& existing : out)
      if (existing.pus == set) return;  // e.g. the only kind "combined" with itself
    out.push_back({std::move(name), std::move(set), cores, smt, priority});
  };
  const auto cores_name = [](const std::string& prefix, int cores, bool smt) {
    return prefix + ":" + std::to_string(cores) + "c" + (smt ? "+smt" : "");
  };
  // Whole kinds (at most `cap` cores: a quota makes that the largest set), fastest first.
  for (auto kind = kinds.rbegin(); kind != kinds.rend(); ++kind) {
    const int n = std::min(static_cast<int>(kind->first.size()), cap);
    const std::string prefix = "kind" + std::to_string(kind->rank);
    add(cores_name(prefix, n, false), {kind->first.begin(), kind->first.begin() + n}, n, false, 0);
    if (kind->all.size() > kind->first.size()) add(cores_name(prefix, n, true), kind->all, n, true, 1);
    add(cores_name(prefix, 1, false), {kind->first.front()}, 1, false, 2);
    for (int count = 2; count < n; count *= 2)
      add(cores_name(prefix, count, false), {kind->first.begin(), kind->first.begin() + count}, count, false, 3);
  }
  // Kinds combined from the fastest down: kinds lo..top.
  for (std::size_t lo = kinds.size() - std::min<std::size_t>(kinds.size(), 1); lo-- > 0;) {
    std::vector<int> first, all;
    for (std::size_t k = kinds.size(); k-- > lo;) {  // fastest first, so a quota cap keeps the fastest cores
      first.insert(first.end(), kinds[k].first.begin(), kinds[k].first.end());
      all.insert(all.end(), kinds[k].all.begin(), kinds[k].all.end());
    }
    const int n = std::min(static_cast<int>(first.size()), cap);
    first.resize(static_cast<std::size_t>(n));
    const std::string prefix = "kinds" + std::to_string(kinds[lo].rank) + "-" + std::to_string(kinds.back().rank);
    const bool has_smt = all.size() > static_cast<std::size_t>(n);
    add(cores_name(prefix, n, false), std::move(first), n, false, 0);
    if (has_smt) add(cores_name(prefix, n, true), std::move(all), n, true, 1);
  }
  std::stable_sort(out.begin(), out.end(), [](const ThreadCandidate& a, const ThreadCandidate& b) {
    return std::pair(a.priority, a.pus.size()) < std::pair(b.priority, b.pus.size());
  });
  return out;
}

std::vector<double> undisturbed_rounds(const std::vector<double>& round_figures) {
  const double best = round_figures.empty() ? 0.0 : *std::max_element(round_figures.begin(), round_figures.end());
  std::vector<double> kept;
  for (const double figure : round_figures) {
    if (figure >= kDisturbedRoundShare * best) kept.push_back(figure);
  }
  return kept;
}

std::string unsteady_points_note(const std::vector<KernelThroughputPoint>& points, double limit) {
  const KernelThroughputPoint* worst = nullptr;
  std::size_t unsteady = 0;
  for (const KernelThroughputPoint& p : points) {
    if (!(p.gb_per_s.spread > limit)) continue;
    ++unsteady;
    if (!worst || p.gb_per_s.spread > worst->gb_per_s.spread) worst = &p;
  }
  if (!worst) return "";
  return "unsteady: " + std::to_string(unsteady) + " of " + std::to_string(points.size()) + " points spread over " +
         format_fixed(limit * 100, 0) + "% between rounds (worst " + worst->kernel + " on " + worst->thread_set + ", " +
         format_fixed(worst->gb_per_s.spread * 100, 0) +
         "%): the machine's speed moved while it was timed and speed predictions carry that; re-run coli-probe when the "
         "machine is quiet";
}

int choose_set(const std::vector<SetScore>& scores, double tolerance) {
  double best = 0;
  for (const SetScore& score : scores) best = std::max(best, score.score);
  if (!(best > 0)) return -1;
  int chosen = -1;
  for (int i = 0; i < static_cast<int>(scores.size()); ++i) {
    const SetScore& s = scores[static_cast<std::size_t>(i)];
    if (s.score < (1 - tolerance) * best) continue;
    if (chosen < 0) { chosen = i; continue; }
    const SetScore& c = scores[static_cast<std::size_t>(chosen)];
    if (std::tuple(s.pus.size(), s.smt, -s.score) < std::tuple(c.pus.size(), c.smt, -c.score)) chosen = i;
  }
  return chosen;
}

SeparationResult separate_sets(const std::vector<SetScore>& scores, int rounds, int max_rounds, double tolerance) {
  SeparationResult result;
  result.chosen = choose_set(scores, tolerance);
  if (result.chosen < 0) {
    result.reason = "no thread set was timed";
    return result;
  }
  const auto low = [](const SetScore& s) { return s.score * (1 - s.margin); };
  const auto high = [](const SetScore& s) { return s.score * (1 + s.margin); };
  const SetScore& pick = scores[static_cast<std::size_t>(result.chosen)];
  double best_low = 0;
  for (const SetScore& s : scores) best_low = std::max(best_low, low(s));
  for (const SetScore& other : scores) {
    if (&other == &pick || other.score <= 0) continue;
    const bool preferred = std::pair(other.pus.size(), other.smt) < std::pair(pick.pus.size(), pick.smt);
    if (low(pick) < (1 - tolerance) * high(other)) {
      result.reason = describe_score(pick) + " may be more than " + format_figure(100 * tolerance) + "% below " + describe_score(other);
    } else if (preferred && high(other) >= (1 - tolerance) * best_low) {
      result.reason = describe_score(other) + " may be within " + format_figure(100 * tolerance) + "% of " +
                      describe_score(pick);
    } else {
      continue;
    }
    break;
  }
  if (rounds < kMinTuningRounds && result.reason.empty()) {
    result.reason = "only " + std::to_string(rounds) + " round(s): no spread to judge by";
  }
  if (result.reason.empty()) {
    result.outcome = Separation::chosen;
  } else {
    result.outcome = rounds < max_rounds ? Separation::more_rounds : Separation::cannot_separate;
    result.reason += " after " + std::to_string(rounds) + " round(s)";
  }
  return result;
}

namespace {

// Tokens/s of each thread set: per token, `expert_kernel`'s time (for
// prefill, the token's share of its round) plus its own attention GEMVs.
// The margin weighs each kernel's spread by its share of the time.
std::vector<SetScore> scores_with(const std::vector<KernelThroughputPoint>& points, const char* expert_kernel) {
  std::vector<SetScore> scores;
  for (const auto& [name, set] : by_set(points)) {
    const auto expert = set.kernels.find(expert_kernel), dense = set.kernels.find("dense_q8_decode");
    if (expert == set.kernels.end() || dense == set.kernels.end()) continue;
    const SampleStats& e = expert->second->tokens_per_s;
    const SampleStats& d = dense->second->tokens_per_s;
    const double te = seconds_per_token(*expert->second), td = seconds_per_token(*dense->second);
    const int rounds = std::min(e.samples, d.samples);
    const double spread = (te * e.spread + td * d.spread) / (te + td);
    const double margin = rounds > 0 ? spread / (2 * std::sqrt(static_cast<double>(rounds))) : 0;
    scores.push_back({name, set.pus, set.smt, 1.0 / (te + td), margin, rounds});
  }
  return scores;
}

int fewest_rounds(const std::vector<SetScore>& scores) {
  int rounds = INT_MAX;
  for (const SetScore& s : scores) rounds = std::min(rounds, s.rounds);
  return scores.empty() ? 0 : rounds;
}

}  // namespace

std::vector<SetScore> decode_scores(const std::vector<KernelThroughputPoint>& points) {
  return scores_with(points, "expert_q4_decode");
}

std::vector<SetScore> prefill_scores(const std::vector<KernelThroughputPoint>& points) {
  return scores_with(points, "expert_q4_prefill");
}

Result<ThreadRecommendation> recommend_from_measurements(const std::vector<KernelThroughputPoint>& points) {
  const std::vector<SetScore> decode = decode_scores(points);
  const int decode_pick = choose_set(decode);
  if (decode_pick < 0) return make_error("kernel tuning: no thread set has both decode kernels timed");
  const int decode_rounds = fewest_rounds(decode);
  const SeparationResult decode_separation = separate_sets(decode, decode_rounds, decode_rounds);
  if (decode_separation.outcome != Separation::chosen) {
    return make_error("kernel tuning could not separate the decode thread sets (" + decode_separation.reason +
                      "; measured " + list_scores(decode) + ")");
  }
  const std::vector<SetScore> prefill = prefill_scores(points);
  int prefill_pick = choose_set(prefill);
  const int prefill_rounds = fewest_rounds(prefill);
  const SeparationResult prefill_separation = separate_sets(prefill, prefill_rounds, prefill_rounds);
  const bool prefill_separated = prefill_separation.outcome == Separation::chosen;
  // The engine runs one thread team for both phases: keep decode's set for
  // prefill too when it is within the tolerance there as well.
  if (prefill_pick >= 0 && prefill_separated) {
    for (int i = 0; i < static_cast<int>(prefill.size()); ++i) {
      const auto& s = prefill[static_cast<std::size_t>(i)];
      const auto& picked = prefill[static_cast<std::size_t>(prefill_pick)];
      if (s.thread_set == decode[static_cast<std::size_t>(decode_pick)].thread_set && s.score >= (1 - kTuningTolerance) * picked.score)
        prefill_pick = i;
    }
  }
  ThreadRecommendation out;
  out.rule = "measured-kernel-throughput";
  const SetScore& d = decode[static_cast<std::size_t>(decode_pick)];
  out.decode_pus = d.pus;
  out.decode_threads = d.pus.size();
  out.reason = describe_choice("decode on", decode, decode_pick);
  if (prefill_pick >= 0 && prefill_separated) {
    const SetScore& p = prefill[static_cast<std::size_t>(prefill_pick)];
    out.prefill_pus = p.pus;
    out.prefill_threads = p.pus.size();
    out.reason += "; " + describe_choice("prefill on", prefill, prefill_pick);
  } else {
    out.prefill_pus = d.pus;
    out.prefill_threads = d.pus.size();
    out.reason += prefill_pick < 0 ? "; prefill not timed, so the decode set"
                                   : "; prefill's sets did not separate (" + prefill_separation.reason +
                                         "; measured " + list_scores(prefill) + "), so the decode set";
  }
  out.reason += "; the fewest threads within " + format_figure(100 * kTuningTolerance) + "% of the best win.";
  return out;
}

double tuning_budget_seconds(double probe_budget_seconds, bool budget_given, std::size_t candidate_sets) {
  const double share = kTuningShareOfBudget * probe_budget_seconds;
  return budget_given ? share : std::max(share, kTuningSecondsPerSet * static_cast<double>(candidate_sets));
}

}  // namespace coli::probe
