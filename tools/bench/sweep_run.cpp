#include "sweep_run.h"

#include <algorithm>
#include <chrono>

namespace coli::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

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

Result<RunOutput> run_config(const std::filesystem::path& model_path, const runtime::ModelOptions& options,
                             const Workload& workload) {
  RunOutput out;
  const auto load_start = Clock::now();
  auto model = runtime::MoeModel::load(model_path, options);
  if (!model) return model.error();
  out.record.load_seconds = seconds_since(load_start);
  if (auto warm = time_prefill(*model, workload.tokens.warmup); !warm) return warm.error();
  auto pass = measure_pass(*model, workload.tests, workload.tokens);
  if (!pass) return pass.error();
  RunRecord& r = out.record;
  r.prefill_tokens = workload.tests.prefill_tokens;
  r.prefill_seconds = pass->prefill_seconds;
  for (double seconds : pass->decode_seconds) {
    r.decode_tokens += workload.tests.decode_tokens;
    r.decode_seconds += seconds;
    r.depth_tok_s.push_back(workload.tests.decode_tokens / seconds);
  }
  r.expert_hits = pass->decode_traffic.hits;
  r.expert_misses = pass->decode_traffic.misses;
  r.expert_bytes_read = pass->decode_traffic.bytes_read;
  for (const ExpertTraffic& t : pass->depth_traffic) r.depth_misses.push_back(t.misses);
  r.prefill_misses = pass->prefill_traffic.misses;
  r.prefill_bytes_read = pass->prefill_traffic.bytes_read;
  r.read_seconds = pass->decode_traffic.read_seconds;
  r.prefill_read_seconds = pass->prefill_traffic.read_seconds;
  r.read_batches = read_batches(pass->decode_traffic.rounds);
  r.prefill_read_batches = read_batches(pass->prefill_traffic.rounds);
  r.kernel_used = model->stats().cpu_kernel;
  out.tokens = std::move(pass->greedy);
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

}  // namespace

Result<experts::UsageHistory> record_usage(const std::filesystem::path& model_path, runtime::ModelOptions options,
                                           const Workload& workload) {
  options.pins.clear();
  auto pass = run_workload_once(model_path, options, workload);
  if (!pass) return pass.error();
  // The trace then holds the timed prompt after the warm-up, as the runs
  // meet it; the read rounds are the workload's after the warm-up, as the
  // grid's runs meet the disk (the warm-up's first reads of the file took
  // the tiny model's 8 KiB records on the H200 2x longer).
  return runtime::usage_history_of(pass->model, &pass->cold);
}

Result<experts::ReadRounds> record_read_rounds(const std::filesystem::path& model_path,
                                               const runtime::ModelOptions& options, const Workload& workload) {
  auto pass = run_workload_once(model_path, options, workload);
  if (!pass) return pass.error();
  return experts::ReadRounds::between(pass->cold, pass->model.stats().expert_read_rounds);
}

void place_threads(runtime::ModelOptions& options, const CpuSet& pus) {
  options.threads = std::max(1, pus.size());
  options.compute_pus = pus;  // empty (a profile without a recommendation): unpinned
}

}  // namespace coli::bench
