#include "sweep_retime.h"

#include <algorithm>
#include <optional>

#include "coli/base/text.h"

namespace coli::bench {

std::vector<ThreadSet> grid_thread_sets(const std::vector<SweepConfig>& grid) {
  std::vector<ThreadSet> sets;
  for (const SweepConfig& c : grid) {
    if (c.gpu.all_in_vram) continue;  // the CPU computes nothing of these
    for (const std::optional<ThreadSet>& set : {std::optional(c.threads), c.prefill_threads}) {
      if (set && std::find(sets.begin(), sets.end(), *set) == sets.end()) sets.push_back(*set);
    }
  }
  return sets;
}

std::vector<probe::ThreadCandidate> retime_candidates(const CpuFacts& cpu, const std::vector<ThreadSet>& sets) {
  const std::vector<probe::ThreadCandidate> probed = probe::tuning_candidates(cpu);
  std::vector<probe::ThreadCandidate> out;
  for (const ThreadSet& set : sets) {
    auto same = std::find_if(probed.begin(), probed.end(), [&](const probe::ThreadCandidate& c) { return c.pus == set.pus; });
    out.push_back(same != probed.end() ? *same : probe::ThreadCandidate{set.label, set.pus, set.threads(), false, 0});
  }
  return out;
}

std::string read_round_drift(std::span<const experts::ReadRounds> before, std::span<const experts::ReadRounds> now) {
  auto one_read_ms = [](const experts::ReadRounds& r) {
    return r.rounds[1] > 0 ? 1e3 * r.seconds[1] / static_cast<double>(r.rounds[1]) : 0.0;
  };
  std::string out;
  for (const experts::ReadRounds& r : now) {
    const auto was =
        std::find_if(before.begin(), before.end(), [&](const experts::ReadRounds& b) { return b.same_setting(r); });
    if (was == before.end() || one_read_ms(r) <= 0 || one_read_ms(*was) <= 0) continue;
    out += "; one-read rounds beside " + std::to_string(r.compute_threads) + (r.compute_threads == 1 ? " thread " : " threads ") +
           format_fixed(one_read_ms(r), 2) +
           " ms (were " + format_fixed(one_read_ms(*was), 2) + ")";
  }
  return out;
}

std::string planned_prediction_drift(PredictedSpeeds profile, PredictedSpeeds retimed) {
  if (!(profile.decode_tok_s > 0 && profile.prefill_tok_s > 0 && retimed.decode_tok_s > 0 && retimed.prefill_tok_s > 0))
    return "";
  auto moved = [](double now, double was) {
    const double change = 100.0 * (now / was - 1.0);
    return format_fixed(now, 1) + " tok/s (profile " + format_fixed(was, 1) + ", " + (change >= 0 ? "+" : "") +
           format_fixed(change, 1) + "%)";
  };
  return "; the planned configuration re-timed: decode " + moved(retimed.decode_tok_s, profile.decode_tok_s) + ", prefill " +
         moved(retimed.prefill_tok_s, profile.prefill_tok_s);
}

}  // namespace coli::bench
