// llama-bench's speed tests, shared by coli-speed-bench, coli-decode-bench
// and coli-sweep: pp = tok/s of one forward pass of prefill_tokens tokens
// from an empty KV cache; tg at depth d = tok/s of decode_tokens greedy
// steps after d tokens are already in the KV cache (llama-bench -p, -n, -d,
// -r). Pure: the summaries and option parsing; speed_measure.h runs them.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace coli::bench {

struct SpeedTests {
  int prefill_tokens = 512;
  int decode_tokens = 64;
  std::vector<int> depths{0, 512};
  int repeats = 3;
  int max_depth() const;
  int context() const;  // KV positions the tests need
  std::string prefill_label() const;      // "pp512"
  std::string decode_label(int depth) const;  // "tg64 @ d512"
};

// -p, -n, -d, -r (with --repeats), defaults from `tests`.
void add_speed_options(CLI::App& app, SpeedTests& tests);

struct MetricStats {
  double median = 0;
  double min = 0, max = 0;
  double spread = 0;  // (max - min) / median
};

MetricStats metric_stats(std::vector<double> values);  // an empty list gives zeros

// "123.45 [120.00 .. 125.00]"
std::string format_stats(const MetricStats& stats);

}  // namespace coli::bench
