// The one measurement routine of the speed tests (speed_tests.h) on a
// loaded MoeModel: fixed token ids (speed does not depend on them), one
// repeat of every test per call, so callers interleave configurations.
#pragma once

#include <cstdint>
#include <vector>

#include "coli/base/result.h"
#include "coli/runtime/moe_model.h"
#include "speed_tests.h"

namespace coli::bench {

// The prompt of the prefill test and the context the decode tests start
// from: ids spread over the vocabulary, the same on every run and machine.
struct BenchTokens {
  std::vector<std::int32_t> prompt;   // prefill_tokens ids
  std::vector<std::int32_t> context;  // max_depth + 1 ids: the KV contents, then the first decode input
  // prefill_tokens other ids, for the untimed pass before the timed ones: it
  // warms the thread team, the page cache and the allocator, but leaves the
  // expert cache holding other routings than the timed prompt's. Warmed by
  // the prompt it then timed, a streaming cache met its own experts again:
  // OLMoE at cap 48 read 661 records where a prompt after another reads 777.
  std::vector<std::int32_t> warmup;
};
BenchTokens bench_tokens(const SpeedTests& tests, int vocab);

// Expert-cache counters of timed steps.
struct ExpertTraffic {
  std::uint64_t hits = 0, misses = 0, bytes_read = 0;
  double read_seconds = 0;  // the I/O threads' time in those reads (ModelStats::expert_read_seconds)
  experts::ReadRounds rounds;  // the rounds that read, by read count (ModelStats::expert_read_rounds)
  ExpertTraffic& operator+=(const ExpertTraffic& other) {
    hits += other.hits, misses += other.misses, bytes_read += other.bytes_read, read_seconds += other.read_seconds;
    rounds += other.rounds;
    return *this;
  }
};

// One repeat of every test.
struct SpeedPass {
  double prefill_seconds = 0;
  ExpertTraffic prefill_traffic;                   // of the timed prefill pass
  std::vector<double> decode_seconds;              // per depth
  std::vector<std::vector<std::int32_t>> greedy;   // per depth: the decode test's greedy tokens
  ExpertTraffic decode_traffic;                    // over the timed decode steps only
  std::vector<ExpertTraffic> depth_traffic;        // the same per depth
};

Result<SpeedPass> measure_pass(runtime::MoeModel& model, const SpeedTests& tests, const BenchTokens& tokens);

// Seconds of one prefill pass, from an empty KV cache; its expert-cache
// counters to `traffic` when given.
Result<double> time_prefill(runtime::MoeModel& model, const std::vector<std::int32_t>& prompt,
                            ExpertTraffic* traffic = nullptr);

// Fills the KV cache with `depth` context tokens (untimed), then times
// `steps` greedy decode steps; the greedy tokens go to `greedy`.
Result<double> time_decode(runtime::MoeModel& model, const std::vector<std::int32_t>& context, int depth, int steps,
                           std::vector<std::int32_t>& greedy, ExpertTraffic* traffic = nullptr);

}  // namespace coli::bench
