#include "metrics_page.h"

#include <cstdio>

namespace coli::serve {

namespace {

class Page {
 public:
  void metric(const char* name, const char* type, const char* help, double value) {
    char line[64];
    std::snprintf(line, sizeof line, "%.17g", value);
    text_ += std::string("# HELP coli_") + name + " " + help + "\n# TYPE coli_" + name + " " + type + "\ncoli_" + name +
             " " + line + "\n";
  }
  std::string text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace

std::string metrics_page(const MetricsSnapshot& s) {
  const ServedCounts& c = s.counts;
  Page page;
  page.metric("requests_total", "counter", "Requests answered with a completion.", static_cast<double>(c.requests));
  page.metric("requests_rejected_total", "counter", "Requests answered with a 4xx error.", static_cast<double>(c.requests_rejected));
  page.metric("requests_failed_total", "counter", "Requests the engine failed.", static_cast<double>(c.requests_failed));
  page.metric("requests_cancelled_total", "counter", "Requests whose client went away before the end.",
              static_cast<double>(c.requests_cancelled));
  page.metric("requests_queued", "gauge", "Requests waiting for the model (one runs at a time).", s.queued);
  page.metric("busy", "gauge", "1 while a request runs on the model.", s.busy ? 1 : 0);
  page.metric("prompt_tokens_total", "counter", "Prompt tokens of answered requests.", static_cast<double>(c.prompt_tokens));
  page.metric("prompt_tokens_reused_total", "counter", "Prompt tokens found in the KV cache (not recomputed).",
              static_cast<double>(c.prompt_tokens_reused));
  page.metric("generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(c.generated_tokens));
  page.metric("prefill_seconds_total", "counter", "Seconds spent on prompts.", c.prefill_seconds);
  page.metric("decode_seconds_total", "counter", "Seconds spent generating.", c.decode_seconds);
  page.metric("prefill_tokens_per_second", "gauge", "The last request's prompt speed.", c.last_prefill_tok_s);
  page.metric("decode_tokens_per_second", "gauge", "The last request's generation speed.", c.last_decode_tok_s);
  if (s.predicted_prefill_tok_s) {
    page.metric("predicted_prefill_tokens_per_second", "gauge", "The plan's predicted prompt speed.", *s.predicted_prefill_tok_s);
  }
  if (s.predicted_decode_tok_s) {
    page.metric("predicted_decode_tokens_per_second", "gauge", "The plan's predicted generation speed.", *s.predicted_decode_tok_s);
  }
  const double lookups = static_cast<double>(s.expert_hits + s.expert_misses);
  page.metric("expert_hits_total", "counter", "Routed experts found in the expert cache.", static_cast<double>(s.expert_hits));
  page.metric("expert_misses_total", "counter", "Routed experts read from disk.", static_cast<double>(s.expert_misses));
  page.metric("expert_hit_rate", "gauge", "Hits over lookups since the model was loaded.",
              lookups > 0 ? static_cast<double>(s.expert_hits) / lookups : 0.0);
  page.metric("expert_bytes_read_total", "counter", "Expert bytes read from disk.", static_cast<double>(s.expert_bytes_read));
  page.metric("resident_bytes", "gauge", "The process's resident set now.", static_cast<double>(s.rss_bytes));
  page.metric("peak_resident_bytes", "gauge", "The process's largest resident set.", static_cast<double>(s.peak_rss_bytes));
  if (s.planned_ram_bytes) {
    page.metric("planned_ram_bytes", "gauge", "RAM the plan priced for this process.", static_cast<double>(*s.planned_ram_bytes));
    page.metric("planned_ram_margin_bytes", "gauge", "The plan's margin above it.", static_cast<double>(*s.planned_margin_bytes));
  }
  page.metric("dense_weight_bytes", "gauge", "Dense weights held in memory.", static_cast<double>(s.dense_bytes));
  page.metric("expert_cache_bytes", "gauge", "The expert cache's slabs.", static_cast<double>(s.expert_cache_bytes));
  page.metric("kv_cache_bytes", "gauge", "The KV cache.", static_cast<double>(s.kv_cache_bytes));
  page.metric("context_size", "gauge", "KV cache positions (prompt plus generated tokens per request).", s.context_size);
  return page.text();
}

}  // namespace coli::serve
