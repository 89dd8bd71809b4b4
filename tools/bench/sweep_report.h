// coli-sweep's results: one record per configuration x repeat, medians and
// spreads per configuration, the planned configuration's rank, and the CSV,
// JSON and SVG renderings. Pure: callers write the strings (atomically).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coli/planner/speed.h"
#include "speed_tests.h"
#include "sweep_grid.h"

namespace coli::bench {

// 2: llama-bench tests (pp, tg at depths); 3: predicted next to measured;
// 4: each configuration's expert placement (gpu: "cpu" or the GPU tier's label, vram_experts per layer)
// 5: the prefill pass's expert misses and bytes read per run, and the predicted reads beside them
// 6: the I/O threads' seconds in those reads per run (expert_read_seconds,
//    prefill_expert_read_seconds) and the predicted time of one read alone (disk_read_seconds)
// 7: the rounds that read, by how many records each read, and their seconds from submission to
//    the last landing, per run (decode_read_batches, prefill_read_batches)
// 8: runs repeat their pass until --min-time (workload.min_timed_seconds, runs[].passes)
// 9: --retime (retimed, configs[].predicted_retimed)
// 10: ranking.*.paired, ranking.*.repeat_noise
// 11: the compute thread's wake-ups after its rounds' last landing, per run (decode_wakes, prefill_wakes)
// 12: --max-minutes: workload.repeats (those run) beside workload.repeats_asked, and stopped_early (why, or "")
// 13: machine_changes: the repeats that ran on a machine of another class than the profile's
// 14: configs[].predicted: the band (decode_band_tok_s, prefill_band_tok_s) and each depth's decode
//     priced apart (decode_tok_s_at_depth, decode_disk_reads_per_token_at_depth); prediction.decode_at_depth
inline constexpr int kSweepSchemaVersion = 14;

// The expert-read rounds of `reads` records each in a timed step: how many,
// and their seconds in all from submission to the last read landing
// (experts::ReadRounds, one entry per read count that occurred).
struct ReadBatch {
  int reads = 0;
  std::uint64_t rounds = 0;
  double seconds = 0;
};

// Rounds whose compute thread was still waiting when their last read landed,
// and the seconds summed from that landing to the thread running again
// (experts::ReadRounds::waited, wake_seconds): what the model adds to a
// round that waits.
struct ReadWakes {
  std::uint64_t rounds = 0;
  double seconds = 0;
  ReadWakes& operator+=(const ReadWakes& other) {
    rounds += other.rounds, seconds += other.seconds;
    return *this;
  }
};

struct RunRecord {
  std::size_t config = 0;      // index into the grid
  int repeat = 0;              // 0-based
  int passes = 1;              // timed passes the figures are the median of (Workload::min_timed_seconds)
  int prefill_tokens = 0;      // the pp test's prompt
  double prefill_seconds = 0;
  int decode_tokens = 0;      // summed over the depths
  double decode_seconds = 0;
  std::vector<double> depth_tok_s;  // decode tok/s per depth (SweepReport::depths)
  double load_seconds = 0;
  std::uint64_t expert_hits = 0, expert_misses = 0, expert_bytes_read = 0;  // timed part only
  std::vector<std::uint64_t> depth_misses;  // expert misses of the decode test at each depth
  std::uint64_t prefill_misses = 0, prefill_bytes_read = 0;  // the timed prefill pass's
  // The I/O threads' time in the decode steps' and the prefill pass's reads:
  // their misses' (the preload runs at load, and a sweep runs no speculative prefetch).
  double read_seconds = 0, prefill_read_seconds = 0;
  std::vector<ReadBatch> read_batches, prefill_read_batches;  // rounds that read, fewest reads first
  ReadWakes decode_wakes, prefill_wakes;
  std::string kernel_used;     // what the engine ran ("" config: its own choice)
  double prefill_tok_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
};

struct ConfigSummary {
  MetricStats prefill, decode;  // decode: every depth's tokens over their seconds
  std::vector<MetricStats> decode_at_depth;
  double hit_rate = 0;  // over every repeat's timed part
  int repeats = 0;
};

// One summary per grid entry (in grid order).
std::vector<ConfigSummary> summarize(std::size_t configs, const std::vector<RunRecord>& runs);

enum class Metric { decode, prefill };
const char* metric_name(Metric metric);
double metric_median(const ConfigSummary& summary, Metric metric);

struct Ranking {
  int rank = 0;            // 1 = fastest; ties share the better rank
  int of = 0;              // configurations ranked
  std::size_t best = 0;    // index of the fastest
  double percent_of_best = 0;
};

// Where `planned` ranks by median tok/s of `metric`, and its median as a
// percentage of the fastest configuration's.
Ranking rank_planned(const std::vector<ConfigSummary>& summaries, std::size_t planned, Metric metric);

// The planned configuration against every other, repeat by repeat. A
// repeat runs each configuration once in turn (round-robin), so the
// machine's drift between repeats (10-20% within an hour on shared
// machines) cancels in the ratio of two runs of one repeat, where a ratio
// of medians over the repeats keeps it. The rival is the configuration the
// planned one trails most: the lowest median over their common repeats of
// planned / rival tok/s.
struct PairedStanding {
  bool available = false;  // another configuration ran in a repeat the planned one ran
  std::size_t rival = 0;
  double percent = 0;      // 100 x that median
  int repeats = 0;         // common repeats
  int ahead = 0;           // of them, where the planned run was at least as fast
};
PairedStanding paired_standing(const std::vector<RunRecord>& runs, std::size_t configs, std::size_t planned,
                               Metric metric);

// How far runs of one configuration moved between repeats: the median of
// the configurations' spreads ((max - min) / median) and the widest. An
// error smaller than that cannot be told from the machine's own motion.
struct RepeatNoise {
  int configs = 0;  // configurations with two repeats or more
  double median_spread = 0, widest_spread = 0;
  std::size_t widest = 0;
};
RepeatNoise repeat_noise(const std::vector<ConfigSummary>& summaries, Metric metric);

// Indices sorted fastest first by `metric` (ties keep grid order).
std::vector<std::size_t> order_by(const std::vector<ConfigSummary>& summaries, Metric metric);

// Greedy tokens per decode test (depth) of one run against the reference
// run's: nullopt when equal, else "'LABEL' and 'REFERENCE' differ on decode
// test P at generated token I: X vs Y" (the first difference).
std::optional<std::string> token_mismatch(const std::vector<std::vector<std::int32_t>>& tokens, const std::string& label,
                                          const std::vector<std::vector<std::int32_t>>& reference,
                                          const std::string& reference_label);

// The planner's prediction (coli/planner/speed.h) for one configuration of
// the grid: decode over the sweep's depths (their tokens over the predicted
// seconds, as the measured decode figure is made) and prefill.
struct ConfigPrediction {
  bool available = false;
  std::string unavailable;  // why not (the profile lacks a measurement)
  double decode_tok_s = 0, prefill_tok_s = 0;
  double decode_disk_reads = 0;   // expert records read from disk per decode token (the mean over the depths)
  double prefill_disk_reads = 0;  // per prefill pass (the planner's prompt of prefill_tokens)
  int prefill_tokens = 0;
  double disk_read_seconds = 0;   // one record read alone by a reading thread (the profile's bare figure)
  planner::SpeedBand band;  // the same on the probe's slowest and fastest rounds (planner/speed_band.h)
  // Per depth of the tests: decode tok/s and reads a token (a run at depth
  // 0 starts a fresh context, a deeper one follows its own prompt).
  std::vector<double> decode_tok_s_at_depth, decode_disk_reads_at_depth;
};

// Predicted against measured over the configurations that have both: the
// worst relative error (predicted / measured - 1) and which configuration
// had it, and Spearman's rank correlation (1: the prediction orders the
// configurations as the measurements do; undefined below 2 points or
// when one side has no spread, then nullopt).
struct PredictionQuality {
  int points = 0;
  double worst_error = 0;
  std::size_t worst = 0;
  double mean_abs_error = 0;
  std::optional<double> rank_correlation;
};
PredictionQuality prediction_quality(const std::vector<ConfigSummary>& summaries,
                                     const std::vector<ConfigPrediction>& predictions, Metric metric);
// The same for decode at the sweep's `depth`-th depth: each configuration's
// prediction for that depth against its median there.
PredictionQuality depth_prediction_quality(const std::vector<ConfigSummary>& summaries,
                                           const std::vector<ConfigPrediction>& predictions, std::size_t depth);

// How many measured medians lie inside their configuration's band (the
// prediction on the probe's slowest to fastest rounds), of those with one
// of some width (a probe that timed each rate once has none), and the
// configurations outside.
struct BandStanding {
  int inside = 0, points = 0;
  std::vector<std::size_t> outside;
};
BandStanding band_standing(const std::vector<ConfigSummary>& summaries, const std::vector<ConfigPrediction>& predictions,
                           Metric metric);

// Spearman's rho of two equally long lists: Pearson's correlation of their
// ranks, ties sharing the mean of their ranks. nullopt below 2 values or
// when either list has every value equal.
std::optional<double> spearman_rank_correlation(const std::vector<double>& a, const std::vector<double>& b);

// coli-sweep --retime (sweep_retime.h): before one repeat, how far the
// profile's kernel points had moved and every configuration predicted from
// the figures timed then.
struct RetimedRepeat {
  int repeat = 0;
  double seconds = 0;  // the re-timing's wall time
  std::string drift;   // per thread set, re-timed / profile GB/s (drift_text)
  std::vector<ConfigPrediction> predictions;  // one per grid entry
};
// What the renderings need besides the numbers.
struct SweepReport {
  std::string model, profile, profile_fingerprint;
  int n_experts = 0;
  int prompt_tokens = 0, decode_tokens = 0, repeats = 0;  // pp prompt, tg tokens per depth, repeats run
  int repeats_asked = 0;       // -r; more than `repeats` when --max-minutes stopped the sweep
  std::string stopped_early;   // why (empty: every repeat ran)
  // The repeats that ran where this machine was not the profile's class (a
  // VM moved to another host), each with what differed.
  struct MachineChange {
    int repeat = 0;        // 0-based
    std::string mismatch;  // "cpu.model: profile X, this machine Y; ..."
  };
  std::vector<MachineChange> machine_changes;
  double min_timed_seconds = 0;  // a run's timed passes add up to at least this (Workload)
  std::vector<int> depths;
  std::vector<std::string> plan_decisions;  // "threads = 2: reason", ...
  std::vector<SweepConfig> grid;
  std::vector<RunRecord> runs;
  std::vector<ConfigSummary> summaries;
  std::vector<ConfigPrediction> predictions;  // one per grid entry (empty: none made)
  std::vector<RetimedRepeat> retimed;         // --retime: one per repeat (empty: not asked)
  std::size_t planned = 0;
  std::string token_check = "all";            // "all" or "per-kernel": which runs must agree
  std::vector<std::string> token_mismatches;  // empty: every run produced its reference's tokens
  std::vector<std::string> token_notes;       // per-kernel: differences between kernel variants
};

// Per configuration, the median over the repeats of their re-timed
// predictions (decode and prefill each); empty without --retime.
std::vector<ConfigPrediction> retimed_predictions(const SweepReport& report);

std::string sweep_csv(const SweepReport& report);   // one row per configuration x repeat
std::string sweep_json(const SweepReport& report);  // everything, with schema_version
std::string sweep_svg(const SweepReport& report);   // bars of decode and prefill tok/s, planned highlighted
std::string sweep_table(const SweepReport& report); // the text table, fastest decode first

}  // namespace coli::bench
