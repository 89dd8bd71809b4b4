#include "sampler.h"

#include "coli/forward/ops.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace coli::tools {

namespace {

using Candidate = std::pair<double, std::int32_t>;  // (weight, token), most probable first by std::greater

struct Nucleus {
  std::size_t count = 0;  // candidates[0, count)
  double mass = 0;        // their weights summed in that order
};

// The nucleus: the most probable candidates, in order, until they hold
// top_p of `total` (at least one). Only as many are sorted as it needs (a
// full sort of a 150k vocabulary each token cost more than the token's
// forward pass on small models): the top k by std::partial_sort, k growing
// until its mass suffices. The comparator orders every pair strictly, so
// the prefix is the one a full sort would give.
Nucleus sort_nucleus(std::vector<Candidate>& candidates, double top_p, double total) {
  for (std::size_t k = std::min<std::size_t>(candidates.size(), 64);; k = std::min(candidates.size(), 4 * k)) {
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(k), candidates.end(),
                      std::greater<>());
    double kept = candidates.front().first;
    std::size_t count = 1;
    while (count < k && kept < top_p * total) kept += candidates[count++].first;
    if (kept >= top_p * total || k == candidates.size()) return {count, kept};
  }
}

// A token of the nucleus drawn with probability weight / its mass.
std::int32_t draw(const std::vector<Candidate>& candidates, const Nucleus& nucleus, std::mt19937_64& rng) {
  double target = std::uniform_real_distribution<double>(0, nucleus.mass)(rng);
  for (std::size_t i = 0; i < nucleus.count; ++i) {
    target -= candidates[i].first;
    if (target <= 0) return candidates[i].second;
  }
  return candidates[nucleus.count - 1].second;
}

}  // namespace

// The k highest finite logits at or above `floor` (min-p), ties to the higher
// token id (the order the weights' comparator gives them), in heap order.
const std::vector<Sampler::Logit>& Sampler::highest_logits(std::span<const float> logits, std::size_t k, double floor) {
  std::vector<Logit>& heap = top_;  // a min-heap under std::greater: its front is the lowest kept
  heap.clear();
  heap.reserve(k);
  // Below `lowest` a logit cannot enter: the floor, then the heap's lowest
  // once it is full. One compare rejects it (NaN too: it fails every compare).
  double lowest = floor;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (!(l >= lowest) || !std::isfinite(l)) continue;
    const Logit candidate{l, static_cast<std::int32_t>(i)};
    if (heap.size() < k) {
      heap.push_back(candidate);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
      if (heap.size() == k) lowest = std::max<double>(floor, heap.front().first);
    } else if (candidate > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = candidate;
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
      lowest = heap.front().first;
    }
  }
  return heap;
}

void Sampler::accept(std::int32_t token) {
  if (options_.repeat_last_n <= 0 || options_.repeat_penalty == 1) return;
  recent_.push_back(token);
  if (recent_.size() > static_cast<std::size_t>(options_.repeat_last_n)) recent_.erase(recent_.begin());
}

Result<std::int32_t> Sampler::pick(std::span<const float> logits) {
  if (!recent_.empty()) {  // llama.cpp's penalty: once per distinct recent token
    penalised_.assign(logits.begin(), logits.end());
    std::vector<std::int32_t> distinct = recent_;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    const auto penalty = static_cast<float>(options_.repeat_penalty);
    for (std::int32_t t : distinct) {
      if (t < 0 || static_cast<std::size_t>(t) >= penalised_.size()) continue;
      float& l = penalised_[static_cast<std::size_t>(t)];
      l = l > 0 ? l / penalty : l * penalty;
    }
    logits = penalised_;
  }
  const int greedy = forward::greedy_token(logits);
  if (greedy < 0) return make_error("the model produced no finite logit: its weights or the run are broken");
  const auto best = static_cast<std::size_t>(greedy);
  if (options_.temperature <= 0) return static_cast<std::int32_t>(best);
  const double peak = logits[best];
  // min-p on the untempered probabilities: exp(l - peak) >= min_p.
  const double floor = options_.min_p > 0 ? peak + std::log(options_.min_p) : -std::numeric_limits<double>::infinity();
  std::vector<Candidate> candidates;
  if (options_.top_k > 0 && static_cast<std::size_t>(options_.top_k) < logits.size()) {
    // top-k on the logits before any exp, as llama.cpp: one pass keeping the
    // k highest in a heap (a 150k vocabulary's exps and selection cost
    // milliseconds a token; the heap rejects nearly every logit with one compare).
    const std::vector<Logit>& top = highest_logits(logits, static_cast<std::size_t>(options_.top_k), floor);
    candidates.reserve(top.size());
    for (const Logit& l : top) candidates.emplace_back(std::exp((l.first - peak) / options_.temperature), l.second);
  } else {
    candidates.reserve(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) {
      if (!std::isfinite(logits[i]) || logits[i] < floor) continue;
      candidates.emplace_back(std::exp((logits[i] - peak) / options_.temperature), static_cast<std::int32_t>(i));
    }
  }
  double total = 0;
  for (const Candidate& c : candidates) total += c.first;
  // top_p 1 keeps every token: no order is needed to draw from all of them,
  // and their mass is the total, summed in the same order.
  const Nucleus nucleus = options_.top_p >= 1 ? Nucleus{candidates.size(), total} : sort_nucleus(candidates, options_.top_p, total);
  return draw(candidates, nucleus, rng_);
}

}  // namespace coli::tools
