#include "sweep_run.h"

#include <algorithm>
#include <chrono>

#include "coli/base/clock.h"
#include "read_round_settle.h"

namespace coli::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<ReadBatch> read_batches(const experts::ReadRounds& times) {
  std::vector<ReadBatch> out;
  for (std::size_t m = 1; m < times.rounds.size(); ++m) {
    if (times.rounds[m] > 0) out.push_back({static_cast<int>(m), times.rounds[m], times.seconds[m]});
  }
  return out;
}

}  // namespace

Workload make_workload(const SpeedTests& tests, std::uint64_t vocab) {
  return Workload{tests, bench_tokens(tests, static_cast<int>(std::min<std::uint64_t>(vocab, 1u << 30)))};
}

namespace {

double timed_seconds(const SpeedPass& pass) {
  double seconds = pass.prefill_seconds;
  for (double s : pass.decode_seconds) seconds += s;
  return seconds;
}

// Warm-up and timed pass, again while the timed parts are under the workload's minimum.
Result<std::vector<SpeedPass>> timed_passes(runtime::MoeModel& model, const Workload& workload) {
  std::vector<SpeedPass> passes;
  double timed = 0;
  do {
    if (auto warm = time_prefill(model, workload.tokens.warmup); !warm) return warm.error();
    auto pass = measure_pass(model, workload.tests, workload.tokens);
    if (!pass) return pass.error();
    timed += timed_seconds(*pass);
    passes.push_back(std::move(*pass));
  } while (timed < workload.min_timed_seconds && passes.size() < static_cast<std::size_t>(kMaxPasses));
  return passes;
}

}  // namespace

Result<RunOutput> run_config(const std::filesystem::path& model_path, const runtime::ModelOptions& options,
                             const Workload& workload) {
  RunOutput out;
  const auto load_start = Clock::now();
  auto model = runtime::MoeModel::load(model_path, options);
  if (!model) return model.error();
  out.record.load_seconds = seconds_since(load_start);
  auto passes = timed_passes(*model, workload);
  if (!passes) return passes.error();
  const SpeedPass& first = passes->front();
  RunRecord& r = out.record;
  r.passes = static_cast<int>(passes->size());
  r.prefill_tokens = workload.tests.prefill_tokens;
  std::vector<double> prefill;
  for (const SpeedPass& p : *passes) prefill.push_back(p.prefill_seconds);
  r.prefill_seconds = metric_stats(std::move(prefill)).median;
  for (std::size_t d = 0; d < first.decode_seconds.size(); ++d) {
    std::vector<double> at_depth;
    for (const SpeedPass& p : *passes) at_depth.push_back(p.decode_seconds[d]);
    const double seconds = metric_stats(std::move(at_depth)).median;
    r.decode_tokens += workload.tests.decode_tokens;
    r.decode_seconds += seconds;
    r.depth_tok_s.push_back(workload.tests.decode_tokens / seconds);
  }
  r.expert_hits = first.decode_traffic.hits;
  r.expert_misses = first.decode_traffic.misses;
  r.expert_bytes_read = first.decode_traffic.bytes_read;
  for (const ExpertTraffic& t : first.depth_traffic) r.depth_misses.push_back(t.misses);
  r.prefill_misses = first.prefill_traffic.misses;
  r.prefill_bytes_read = first.prefill_traffic.bytes_read;
  r.read_seconds = first.decode_traffic.read_seconds;
  r.prefill_read_seconds = first.prefill_traffic.read_seconds;
  r.read_batches = read_batches(first.decode_traffic.rounds);
  r.prefill_read_batches = read_batches(first.prefill_traffic.rounds);
  r.decode_wakes = {first.decode_traffic.rounds.waited, first.decode_traffic.rounds.wake_seconds};
  r.prefill_wakes = {first.prefill_traffic.rounds.waited, first.prefill_traffic.rounds.wake_seconds};
  r.kernel_used = model->stats().cpu_kernel;
  out.tokens = std::move(passes->front().greedy);
  return out;
}

namespace {

// A model that ran the workload once, untimed (its warm-up prompt first, as
// every run of the grid makes it), and its read rounds after the warm-up.
struct RecordedPass {
  runtime::MoeModel model;
  experts::ReadRounds cold;  // the warm-up's rounds: an empty cache's first reads of the file
};

Result<RecordedPass> run_workload_once(const std::filesystem::path& model_path, const runtime::ModelOptions& options,
                                       const Workload& workload) {
  auto model = runtime::MoeModel::load(model_path, options);
  if (!model) return model.error();
  if (auto warm = time_prefill(*model, workload.tokens.warmup); !warm) return warm.error();
  const experts::ReadRounds cold = model->stats().expert_read_rounds;
  if (auto pass = measure_pass(*model, workload.tests, workload.tokens); !pass) return pass.error();
  return RecordedPass{std::move(*model), cold};
}

// The workload's warm-up, then its passes on `model` (as a run's next),
// until their read rounds settle (rounds_settled), and the rounds of those
// passes alone. The first pass over a model's records read them up to 3.5x
// slower than any run of the grid then did (the 2-core VM's Qwen3-shaped
// one-read rounds 2.8 ms in the first pass, 0.7-0.8 in every run), and a
// virtual disk's host cache may take more passes than one to warm. Passes
// go on while the generated tokens are too few to price resuming after a
// wait (ReadRounds::prices_resume): a 16-token decode test of the tiny model
// at cap 4 waited in 3-6 of them.
Result<experts::ReadRounds> rounds_of_next_pass(runtime::MoeModel& model, const Workload& workload) {
  if (auto warm = time_prefill(model, workload.tokens.warmup); !warm) return warm.error();
  const auto start = Clock::now();
  experts::ReadRounds kept_from = model.stats().expert_read_rounds, rounds;
  double previous_s = 0;
  for (int pass = 0; pass < kMaxRoundPasses; ++pass) {
    const experts::ReadRounds before = model.stats().expert_read_rounds;
    if (auto measured = measure_pass(model, workload.tests, workload.tokens); !measured) return measured.error();
    const experts::ReadRounds after = model.stats().expert_read_rounds;
    const double round_s = mean_round_seconds(experts::ReadRounds::between(before, after));
    if (round_s <= 0) break;  // nothing streams: no token waits
    const bool settled = rounds_settled(previous_s, round_s);
    if (!settled && previous_s > 0) kept_from = before;  // still moving: the passes before this one left out
    previous_s = round_s;
    rounds = experts::ReadRounds::between(kept_from, after);
    if ((settled && rounds.prices_resume()) || seconds_since(start) > kMaxRoundSeconds) break;
  }
  return rounds;
}

}  // namespace

Result<experts::UsageHistory> record_usage(const std::filesystem::path& model_path, runtime::ModelOptions options,
                                           const Workload& workload) {
  options.pins.clear();
  auto pass = run_workload_once(model_path, options, workload);
  if (!pass) return pass.error();
  // The trace then holds the timed prompt after the warm-up, as the runs
  // meet it; the read rounds are those of the next pass's workload after
  // its warm-up, as the grid's runs meet the disk (the warm-up's first reads
  // of the file took the tiny model's 8 KiB records on the H200 2x longer).
  auto history = runtime::usage_history_of(pass->model, &pass->cold);
  if (!history) return history.error();
  auto rounds = rounds_of_next_pass(pass->model, workload);
  if (!rounds) return rounds.error();
  if (!rounds->empty()) {
    if (Status st = history->set_read_rounds(*rounds); !st) return st.error();
  }
  return history;
}

Result<experts::ReadRounds> record_read_rounds(const std::filesystem::path& model_path,
                                               const runtime::ModelOptions& options, const Workload& workload) {
  auto pass = run_workload_once(model_path, options, workload);
  if (!pass) return pass.error();
  return rounds_of_next_pass(pass->model, workload);
}

void place_threads(runtime::ModelOptions& options, const CpuSet& pus) {
  options.threads = std::max(1, pus.size());
  options.compute_pus = pus;  // empty (a profile without a recommendation): unpinned
}

}  // namespace coli::bench
