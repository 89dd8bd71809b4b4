#include "speed_tests.h"

#include <algorithm>
#include <cstdio>

#include <CLI/CLI.hpp>

namespace coli::bench {

int SpeedTests::max_depth() const { return depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end()); }

int SpeedTests::context() const { return std::max(prefill_tokens, max_depth() + decode_tokens); }

std::string SpeedTests::prefill_label() const { return "pp" + std::to_string(prefill_tokens); }

std::string SpeedTests::decode_label(int depth) const {
  return "tg" + std::to_string(decode_tokens) + " @ d" + std::to_string(depth);
}

void add_speed_options(CLI::App& app, SpeedTests& tests) {
  app.add_option("-p,--prefill-tokens", tests.prefill_tokens, "Prefill test: tokens of one forward pass (pp)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("-n,--decode-tokens,--tokens", tests.decode_tokens, "Decode test: greedy tokens timed at each depth (tg)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("-d,--depths", tests.depths, "Decode depths: tokens already in the KV cache, comma-separated")
      ->delimiter(',')->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("-r,--repeats", tests.repeats, "Repeats of every test (interleaved across configurations)")
      ->check(CLI::Range(1, 1000))->capture_default_str();
}

MetricStats metric_stats(std::vector<double> values) {
  MetricStats s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  s.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  s.min = values.front();
  s.max = values.back();
  s.spread = s.median > 0 ? (s.max - s.min) / s.median : 0;
  return s;
}

std::string format_stats(const MetricStats& stats) {
  char text[96];
  std::snprintf(text, sizeof text, "%.2f [%.2f .. %.2f]", stats.median, stats.min, stats.max);
  return text;
}

}  // namespace coli::bench
