// coli-sweep's runner: the fixed workload and one configuration run through
// MoeModel in this process, timing prefill and decode separately and keeping
// the greedy tokens for the cross-configuration check.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "coli/base/cpu_set.h"
#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/runtime/moe_model.h"
#include "speed_measure.h"
#include "sweep_duration.h"  // kMaxPasses
#include "sweep_report.h"
#include "sweep_retime.h"

namespace coli::bench {

// llama-bench's tests (speed_tests.h) on fixed token ids.
struct Workload {
  SpeedTests tests;
  BenchTokens tokens;
  // A run repeats its warm-up and timed pass until the timed parts add up
  // to this (at most kMaxPasses): the tiny model's pp512 took 6 ms and its
  // tg16 5 ms on the H200, where one preemption moved a run 20-70%.
  double min_timed_seconds = 0;
  int context() const { return tests.context(); }
};

Workload make_workload(const SpeedTests& tests, std::uint64_t vocab);

struct RunOutput {
  RunRecord record;
  std::vector<std::vector<std::int32_t>> tokens;  // per depth: the decode test's greedy tokens
};

// Loads the model with `options`, warms up with one untimed prefill of other
// tokens than the timed prompt's (BenchTokens::warmup: a resident cache then
// holds nearly every expert the timed pass needs, a streaming one is in its
// steady state without holding the timed prompt's own experts), then one pass of
// the tests (speed_measure.h); warm-up and pass again while the passes' timed
// parts are under workload.min_timed_seconds, each figure then the median
// over the passes (the expert traffic and tokens: the first pass's). The
// record's config and repeat are left to the caller.
Result<RunOutput> run_config(const std::filesystem::path& model, const runtime::ModelOptions& options,
                             const Workload& workload);

// One untimed pass of the workload (its warm-up prompt first, as run_config) at options' cache capacity, as a usage
// history (what `coli run` would have recorded for these prompts; a
// capacity that streams records its read rounds too, from a second pass:
// the first over a file the disk's cache has not seen reads slower than
// any run then does).
Result<experts::UsageHistory> record_usage(const std::filesystem::path& model, runtime::ModelOptions options,
                                           const Workload& workload);

// The read rounds of untimed passes of the workload after its warm-up
// prompt (from the second in one load, as record_usage's), with `options`
// as given (a grid configuration's): the disk as that configuration's
// compute team and I/O pool meet it once its rounds settled (rounds_settled).
Result<experts::ReadRounds> record_read_rounds(const std::filesystem::path& model, const runtime::ModelOptions& options,
                                               const Workload& workload);

// The engine's compute threads: one per PU of `pus`, pinned there.
void place_threads(runtime::ModelOptions& options, const CpuSet& pus);

}  // namespace coli::bench
