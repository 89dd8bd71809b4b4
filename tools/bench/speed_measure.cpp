#include "speed_measure.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "coli/base/clock.h"
#include "coli/forward/ops.h"

namespace coli::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The sampler's greedy pick (what the speed model prices as sampling).
std::int32_t argmax(const std::vector<float>& logits) { return forward::greedy_token(logits); }

std::vector<std::int32_t> spread_ids(int count, int vocab, std::uint64_t stride, std::uint64_t offset) {
  std::vector<std::int32_t> ids;
  const std::uint64_t v = static_cast<std::uint64_t>(std::max(vocab, 1));
  for (int i = 0; i < count; ++i) ids.push_back(static_cast<std::int32_t>((static_cast<std::uint64_t>(i) * stride + offset) % v));
  return ids;
}

// Adds the expert-cache counters since `before` to `traffic`.
void add_traffic(const runtime::ModelStats& before, const runtime::ModelStats& after, ExpertTraffic& traffic) {
  traffic.hits += after.expert_hits - before.expert_hits;
  traffic.misses += after.expert_misses - before.expert_misses;
  traffic.bytes_read += after.expert_bytes_read - before.expert_bytes_read;
  traffic.read_seconds += after.expert_read_seconds - before.expert_read_seconds;
  traffic.rounds += experts::ReadRounds::between(before.expert_read_rounds, after.expert_read_rounds);
}

}  // namespace

BenchTokens bench_tokens(const SpeedTests& tests, int vocab) {
  return {spread_ids(tests.prefill_tokens, vocab, 7919, 13), spread_ids(tests.max_depth() + 1, vocab, 8023, 990),
          spread_ids(tests.prefill_tokens, vocab, 7907, 577)};
}

Result<double> time_prefill(runtime::MoeModel& model, const std::vector<std::int32_t>& prompt, ExpertTraffic* traffic) {
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  model.reset();
  const runtime::ModelStats before = model.stats();
  const auto start = Clock::now();
  if (Status s = model.forward(prompt, 0, logits); !s) return s.error();
  const double seconds = seconds_since(start);
  if (traffic) add_traffic(before, model.stats(), *traffic);
  return seconds;
}

Result<double> time_decode(runtime::MoeModel& model, const std::vector<std::int32_t>& context, int depth, int steps,
                           std::vector<std::int32_t>& greedy, ExpertTraffic* traffic) {
  if (depth < 0 || static_cast<std::size_t>(depth) >= context.size()) return make_error("decode depth beyond the bench context");
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  model.reset();
  if (depth > 0) {
    if (Status s = model.forward(std::span(context).first(static_cast<std::size_t>(depth)), 0, logits); !s) return s.error();
  }
  greedy.clear();
  std::int32_t next = context[static_cast<std::size_t>(depth)];
  const runtime::ModelStats before = model.stats();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) {
    if (Status s = model.forward(std::span(&next, 1), depth + i, logits); !s) return s.error();
    next = argmax(logits);
    greedy.push_back(next);
  }
  const double seconds = seconds_since(start);
  if (traffic) add_traffic(before, model.stats(), *traffic);
  return seconds;
}

Result<SpeedPass> measure_pass(runtime::MoeModel& model, const SpeedTests& tests, const BenchTokens& tokens) {
  SpeedPass pass;
  auto prefill = time_prefill(model, tokens.prompt, &pass.prefill_traffic);
  if (!prefill) return prefill.error();
  pass.prefill_seconds = *prefill;
  for (int depth : tests.depths) {
    pass.greedy.emplace_back();
    ExpertTraffic& traffic = pass.depth_traffic.emplace_back();
    auto decode = time_decode(model, tokens.context, depth, tests.decode_tokens, pass.greedy.back(), &traffic);
    if (!decode) return decode.error();
    pass.decode_traffic += traffic;
    pass.decode_seconds.push_back(*decode);
  }
  return pass;
}

}  // namespace coli::bench
