// check_sampling alone (no engine code), so coli serve's request parser and
// its fuzzer use it without the forward pass.
#include <cmath>
#include <string>

#include "sampler.h"

namespace coli::tools {

Status check_sampling(const SamplingOptions& options) {
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    return make_error("--temperature " + std::to_string(options.temperature) + " must be a finite number >= 0 (0 = greedy)");
  }
  if (!std::isfinite(options.top_p) || options.top_p <= 0 || options.top_p > 1) {
    return make_error("--top-p " + std::to_string(options.top_p) + " must be in (0, 1] (1 = every token)");
  }
  if (options.top_k < 0) return make_error("--top-k " + std::to_string(options.top_k) + " must be >= 0 (0 = every token)");
  if (!std::isfinite(options.min_p) || options.min_p < 0 || options.min_p > 1) {
    return make_error("--min-p " + std::to_string(options.min_p) + " must be in [0, 1] (0 = off)");
  }
  if (!std::isfinite(options.repeat_penalty) || options.repeat_penalty <= 0) {
    return make_error("--repeat-penalty " + std::to_string(options.repeat_penalty) + " must be a finite number > 0 (1 = off)");
  }
  if (options.repeat_last_n < 0) {
    return make_error("--repeat-last-n " + std::to_string(options.repeat_last_n) + " must be >= 0");
  }
  return Ok{};
}

}  // namespace coli::tools
