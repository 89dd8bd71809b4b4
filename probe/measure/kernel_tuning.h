// The tuning phase of coli-probe: times the engine's own GEMV kernels
// (kernels/cpu, called exactly as decode and prefill call them; the expert
// FFNs through the CPU backend's own batch) on candidate
// thread sets pinned the way the engine pins them (kernels/cpu/
// thread_placement.h), and chooses the decode and prefill sets from the
// measurements. Shapes are OLMoE-1B-7B class: hidden 2048, expert width
// 1024, top-8; attention projections 2048x2048 (q8_row).
#pragma once

#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"
#include "measure/memory_bandwidth.h"  // ProgressFn

namespace coli::probe {

// A thread set to time. PUs ascend; OpenMP member i runs on the i-th.
struct ThreadCandidate {
  std::string name;   // "kind1:4c" (4 cores of kind 1), "kinds0-2:10c" (kinds 0..2), "+smt" with siblings
  CpuSet pus;
  int cores = 0;      // physical cores covered
  bool smt = false;   // SMT siblings of those cores included
  int priority = 0;   // 0 measured first: whole kinds and combinations, then SMT, single cores, the counts between
  bool operator==(const ThreadCandidate&) const = default;
};

// Per CPU kind: one usable PU per physical core, 1, 2, 4 ... all cores;
// kinds combined from the fastest down (all cores of kinds r..top); each
// whole set again with its cores' SMT siblings. Sets above the cgroup CPU
// quota (rounded down) are left out. Ordered by priority, then size.
std::vector<ThreadCandidate> tuning_candidates(const CpuFacts& cpu);

// The rule that picks a set from measured scores (higher is better): the
// smallest set (fewest threads, no SMT before SMT) whose score is at least
// (1 - tolerance) of the best. Near-ties go to fewer threads, which leaves
// cores to the rest of the system and keeps two runs in agreement.
inline constexpr double kTuningTolerance = 0.04;

struct SetScore {
  std::string thread_set;
  CpuSet pus;
  bool smt = false;
  double score = 0;   // tokens/s, higher is better
  double margin = 0;  // relative ± on the score: half the spread of its rounds over √rounds
  int rounds = 0;     // rounds the score is the median of
};
// Index into `scores` of the chosen set; -1 when `scores` is empty or no score is positive.
int choose_set(const std::vector<SetScore>& scores, double tolerance = kTuningTolerance);

// Whether the rule's choice would survive a re-run (two probes on a busy
// machine chose 1 and 2 threads). Each score spans score·(1 ± margin); the
// choice stands when it is within the tolerance of every other set at both
// ends of their spans, and every set the rule prefers (fewer threads, no SMT)
// is below the tolerance line even at its best. Otherwise: more rounds while
// fewer than `max_rounds` were run, then `cannot_separate` naming the sets
// that overlap, and the caller falls back to the tier rule and says so.
inline constexpr int kMinTuningRounds = 3;  // a spread from fewer says nothing
// A round is disturbed when its figure falls below this share of the
// point's best round: each round already is the median of its slice's calls,
// so a whole round that slow was another process holding a core the team
// spins on, not the kernel (the H200 machine's 16-core expert decode once
// gave rounds of 2.2, 2.7 and 90.8 GB/s, and the median of 2.7 chose 8
// threads and predicted a tenth of the measured decode).
inline constexpr double kDisturbedRoundShare = 0.5;
// The round figures without the disturbed ones, in their order.
std::vector<double> undisturbed_rounds(const std::vector<double>& round_figures);
// Points whose kept rounds still spread more than kUnsteadySpread (best
// less worst over the median): the machine's speed moved while they were
// timed (the 2-core VM ran 30% apart within minutes; one H200 probe's
// 16-thread points spread 10-19%), so a speed prediction from them carries
// that much. The note names how many and the worst, or is empty.
inline constexpr double kUnsteadySpread = 0.10;
std::string unsteady_points_note(const std::vector<KernelThroughputPoint>& points, double limit = kUnsteadySpread);
inline constexpr int kMaxTuningRounds = 6;
enum class Separation { chosen, more_rounds, cannot_separate };
struct SeparationResult {
  Separation outcome = Separation::cannot_separate;
  int chosen = -1;     // index into scores (the rule's pick, also when not separated)
  std::string reason;  // why not separated; "" when chosen
};
SeparationResult separate_sets(const std::vector<SetScore>& scores, int rounds, int max_rounds,
                               double tolerance = kTuningTolerance);

// Decode and prefill scores per set from the points (pure; sets lacking a
// kernel are left out):
//   decode:  1 / (t(expert_q4_decode) + t(dense_q8_decode))   per layer, tokens/s
//   prefill: B / (t(expert_q4_prefill) + B * t(dense_q8_decode)), B = the prefill batch
// (attention runs token by token in prefill too), t = 1 / median tokens/s.
std::vector<SetScore> decode_scores(const std::vector<KernelThroughputPoint>& points);
std::vector<SetScore> prefill_scores(const std::vector<KernelThroughputPoint>& points);

// ThreadRecommendation with rule "measured-kernel-throughput" and a reason
// naming the figures and their margins. Prefill keeps decode's set when that
// set is within the tolerance of the prefill choice too (the engine runs one
// team for both), or when prefill's sets do not separate; an error when the
// points cannot decide or decode's sets do not separate (separate_sets with
// no rounds left; then the caller keeps the tier rule and says why).
Result<ThreadRecommendation> recommend_from_measurements(const std::vector<KernelThroughputPoint>& points);

// The tuning phase's share of a probe budget: 35%, and at least
// kTuningSecondsPerSet for each candidate thread set unless the user gave
// the budget (--budget bounds everything then). The H200's 16 cores have
// five sets: 35% of the default 25 s timed 3 rounds of 30 ms slices, every
// probe there had half its points spread over 10%, and one allocation's
// decode point kept 1 round of 3; 4 s a set affords the 6 rounds.
inline constexpr double kTuningShareOfBudget = 0.35;
inline constexpr double kTuningSecondsPerSet = 4.0;
double tuning_budget_seconds(double probe_budget_seconds, bool budget_given, std::size_t candidate_sets);

struct KernelTuningOptions {
  double budget_seconds = 7.5;         // the whole phase, buffer fill included
  // Past the budget where its rounds could not reach kMinTuningRounds at
  // the shortest slices (the default budget; a --budget the user gave bounds
  // everything): the tuning note says by how much.
  bool stretch_for_min_rounds = true;
  std::uint64_t pool_bytes = 0;        // weights to cycle through; 0 = tuning_pool_bytes' default
  // Tokens of the prefill round timed: 128 tokens top-8 over 64 experts give
  // each expert 16 on average, so the kernels run their many-token GEMM as
  // in a real prefill (more would make a one-core slice too long).
  int prefill_tokens = 128;
  std::vector<ThreadCandidate> candidates;  // empty = tuning_candidates(cpu)
};

// The kernels the tuning phase times on `cpu`: every one, but the
// cache-resident points (dense_bf16_decode_cached, _narrow_cached) only
// where the last-level cache holds twice their weights; `note` says when
// they were left out.
std::vector<std::string> tuned_kernel_names(const CpuFacts& cpu, std::string* note = nullptr);

Result<KernelTuning> measure_kernel_tuning(const CpuFacts& cpu, const MemoryFacts& memory,
                                           const KernelTuningOptions& options, const ProgressFn& progress);

}  // namespace coli::probe
