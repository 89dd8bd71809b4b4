#include "sweep_run.h"

#include <algorithm>
#include <chrono>
#include <span>

namespace coli::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::int32_t argmax(const std::vector<float>& logits) {
  return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// One prompt: prefill, then greedy decode. Adds the timings to `record`.
Status run_prompt(runtime::MoeModel& model, const std::vector<std::int32_t>& prompt, int decode_tokens,
                  std::vector<float>& logits, std::vector<std::int32_t>& tokens, RunRecord* record) {
  model.reset();
  tokens.clear();
  auto start = Clock::now();
  if (Status s = model.forward(prompt, 0, logits); !s) return s;
  if (record) {
    record->prefill_seconds += seconds_since(start);
    record->prefill_tokens += static_cast<int>(prompt.size());
  }
  tokens.push_back(argmax(logits));
  start = Clock::now();
  for (int i = 0; i < decode_tokens; ++i) {
    const int position = static_cast<int>(prompt.size()) + i;
    if (Status s = model.forward(std::span(&tokens.back(), 1), position, logits); !s) return s;
    tokens.push_back(argmax(logits));
  }
  if (record) {
    record->decode_seconds += seconds_since(start);
    record->decode_tokens += decode_tokens;
  }
  return Ok{};
}

}  // namespace

int Workload::context() const {
  std::size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  return static_cast<int>(longest) + decode_tokens;
}

Workload make_workload(int prompts, int prompt_tokens, int decode_tokens, std::uint64_t vocab) {
  Workload w;
  w.decode_tokens = decode_tokens;
  const std::uint64_t v = std::max<std::uint64_t>(vocab, 1);
  for (int p = 0; p < prompts; ++p) {
    std::vector<std::int32_t> ids;
    // Spread over the vocabulary; a different stride per prompt so prompts route differently.
    for (int i = 0; i < prompt_tokens; ++i)
      ids.push_back(static_cast<std::int32_t>((static_cast<std::uint64_t>(i) * (7919 + 104 * p) + 13 + 977 * p) % v));
    w.prompts.push_back(std::move(ids));
  }
  return w;
}

Result<RunOutput> run_config(const std::filesystem::path& model_path, const runtime::ModelOptions& options,
                             const Workload& workload) {
  RunOutput out;
  const auto load_start = Clock::now();
  auto model = runtime::MoeModel::load(model_path, options);
  if (!model) return model.error();
  out.record.load_seconds = seconds_since(load_start);
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  std::vector<std::int32_t> tokens;
  if (workload.prompts.empty()) return make_error("the workload has no prompt");
  // Warm-up, untimed: every prompt's prefill (it routes to most experts) and
  // the first prompt's decode.
  for (std::size_t p = workload.prompts.size(); p-- > 0;) {
    if (Status s = run_prompt(*model, workload.prompts[p], p == 0 ? workload.decode_tokens : 0, logits, tokens, nullptr); !s)
      return s.error();
  }

  const runtime::ModelStats before = model->stats();
  for (const auto& prompt : workload.prompts) {
    if (Status s = run_prompt(*model, prompt, workload.decode_tokens, logits, tokens, &out.record); !s) return s.error();
    out.tokens.push_back(tokens);
  }
  const runtime::ModelStats& after = model->stats();
  out.record.expert_hits = after.expert_hits - before.expert_hits;
  out.record.expert_misses = after.expert_misses - before.expert_misses;
  out.record.expert_bytes_read = after.expert_bytes_read - before.expert_bytes_read;
  out.record.kernel_used = after.cpu_kernel;
  return out;
}

Result<experts::UsageHistory> record_usage(const std::filesystem::path& model_path, runtime::ModelOptions options,
                                           const Workload& workload) {
  options.cache_capacity = runtime::kAllExperts;
  options.pins.clear();
  auto model = runtime::MoeModel::load(model_path, options);
  if (!model) return model.error();
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  std::vector<std::int32_t> tokens;
  for (const auto& prompt : workload.prompts) {
    if (Status s = run_prompt(*model, prompt, workload.decode_tokens, logits, tokens, nullptr); !s) return s.error();
  }
  auto history = experts::UsageHistory::create(runtime::usage_history_key(model->shape()));
  if (!history) return history.error();
  if (Status s = history->add_counts(model->routing_counts(), model->stats().tokens); !s) return s.error();
  return history;
}

void place_threads(runtime::ModelOptions& options, const CpuSet& pus) {
  options.threads = std::max(1, pus.size());
  options.compute_pus = pus;  // empty (a profile without a recommendation): unpinned
}

}  // namespace coli::bench
