// GET /metrics of `coli serve`: Prometheus' text format (what vLLM and
// llama-server expose), built from a plain snapshot so the test can check
// every line without a server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace coli::serve {

struct ServedCounts {
  std::uint64_t requests = 0;            // answered 200
  std::uint64_t requests_rejected = 0;   // answered 4xx
  std::uint64_t requests_failed = 0;     // the engine failed (5xx or an error in the stream)
  std::uint64_t requests_cancelled = 0;  // the client went away before the end
  std::uint64_t prompt_tokens = 0;
  std::uint64_t prompt_tokens_reused = 0;  // found in the KV cache (a chat's earlier turns)
  std::uint64_t generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;  // totals
  double last_prefill_tok_s = 0, last_decode_tok_s = 0;
};

struct MetricsSnapshot {
  ServedCounts counts;
  int queued = 0;  // requests waiting for the model
  bool busy = false;
  std::uint64_t expert_hits = 0, expert_misses = 0, expert_bytes_read = 0;
  std::uint64_t rss_bytes = 0, peak_rss_bytes = 0;
  std::optional<std::uint64_t> planned_ram_bytes, planned_margin_bytes;  // with a plan
  std::optional<double> predicted_decode_tok_s, predicted_prefill_tok_s;  // with a plan's speed prediction
  std::uint64_t kv_cache_bytes = 0, dense_bytes = 0, expert_cache_bytes = 0;
  int context_size = 0;
};

std::string metrics_page(const MetricsSnapshot& snapshot);

}  // namespace coli::serve
