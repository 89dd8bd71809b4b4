#include "generation.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "coli/base/clock.h"
#include "coli/base/process_memory.h"

namespace coli::tools {

namespace {

using Clock = std::chrono::steady_clock;

// The length of the longest suffix of `text` that is a proper prefix of `stop`.
std::size_t partial_match_length(std::string_view text, std::string_view stop) {
  for (std::size_t n = std::min(text.size(), stop.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == stop.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopStringFilter::push(std::string_view text) {
  if (matched_) return "";
  held_.append(text);
  // The earliest complete stop string wins.
  std::size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    const std::size_t at = held_.find(stop);
    if (at != std::string::npos && at < first) {
      first = at;
      matched_ = stop;
    }
  }
  if (matched_) {
    std::string before = held_.substr(0, first);
    held_.clear();
    return before;
  }
  std::size_t keep = 0;
  for (const std::string& stop : stops_) keep = std::max(keep, partial_match_length(held_, stop));
  std::string ready = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return ready;
}

std::string StopStringFilter::flush() {
  std::string rest = matched_ ? std::string() : held_;
  held_.clear();
  return rest;
}

std::vector<std::int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text, bool allow_bos,
                                        bool* added_bos) {
  std::vector<std::int32_t> prompt = tokenizer.encode(text);
  const bool add = allow_bos && tokenizer.add_bos() && (prompt.empty() || prompt.front() != *tokenizer.bos_id());
  if (add) prompt.insert(prompt.begin(), *tokenizer.bos_id());
  if (added_bos) *added_bos = add;
  return prompt;
}

Generator::Generator(runtime::MoeModel& model, const Tokenizer* tokenizer)
    : model_(model), tokenizer_(tokenizer), logits_(static_cast<std::size_t>(model.vocab_size())) {}

int Generator::context_size() const { return model_.max_context(); }

// The prompt's pass over what the cache does not hold yet (at least its last
// token, whose logits come next). Returns the reused length.
Result<int> Generator::run_prompt(std::span<const std::int32_t> prompt) {
  const std::size_t limit = std::min(cached_.size(), prompt.size() - 1);
  std::size_t reused = 0;
  while (reused < limit && cached_[reused] == prompt[reused]) ++reused;
  cached_.resize(reused);
  if (Status s = model_.forward(prompt.subspan(reused), static_cast<int>(reused), logits_); !s) {
    cached_.clear();  // what the failed pass left in the cache is unknown
    return s.error();
  }
  cached_.assign(prompt.begin(), prompt.end());
  return static_cast<int>(reused);
}

Result<GenerationResult> Generator::generate(std::span<const std::int32_t> prompt, const SamplingOptions& sampling,
                                             const GenerationLimits& limits, const OnPiece& on_piece,
                                             const std::function<void()>& after_prefill) {
  if (prompt.empty()) return make_error("the prompt is empty");
  if (static_cast<int>(prompt.size()) > context_size()) {
    return make_error("the prompt is " + std::to_string(prompt.size()) + " tokens and the context holds " +
                      std::to_string(context_size()) + ": shorten it or plan a larger --ctx");
  }
  if (!limits.stop_strings.empty() && tokenizer_ == nullptr) return make_error("stop strings need a tokenizer");
  GenerationResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  const std::uint64_t misses_before = model_.stats().expert_misses;
  const std::uint64_t faults_before = process_minor_page_faults();
  const auto prefill_start = Clock::now();
  auto reused = run_prompt(prompt);
  if (!reused) return reused.error();
  result.reused_tokens = *reused;
  result.prefill_seconds = seconds_since(prefill_start);
  result.prompt_page_faults = process_minor_page_faults() - faults_before;
  result.first_pass = !std::exchange(generated_before_, true);
  const std::uint64_t misses_after_prompt = model_.stats().expert_misses, tokens_after_prompt = model_.stats().tokens;
  result.prompt_misses = misses_after_prompt - misses_before;
  if (after_prefill) after_prefill();

  Sampler sampler(sampling);
  for (std::int32_t token : prompt) sampler.accept(token);  // the repeat penalty sees the prompt too
  std::optional<StreamDecoder> decoder;
  if (tokenizer_) decoder.emplace(*tokenizer_);
  StopStringFilter filter(limits.stop_strings);
  auto show = [&](std::optional<std::int32_t> token, std::string text) {
    result.text += text;
    return on_piece(GeneratedPiece{token, std::move(text)});
  };
  const auto decode_start = Clock::now();
  for (int position = static_cast<int>(prompt.size());; ++position) {
    const auto picked = sampler.pick(logits_);
    if (!picked) return picked.error();
    const std::int32_t next = *picked;
    if (std::find(limits.end_tokens.begin(), limits.end_tokens.end(), next) != limits.end_tokens.end()) {
      result.stop = StopReason::end_token;
      result.end_token = next;
      break;
    }
    ++result.generated;
    sampler.accept(next);
    const std::string text = decoder ? filter.push(decoder->push(next)) : std::string();
    if (filter.matched()) {
      if (!text.empty()) show(next, text);
      result.stop = StopReason::stop_string;
      result.stop_string = filter.matched();
      break;
    }
    if (!show(next, text)) {
      result.stop = StopReason::cancelled;
      break;
    }
    if (result.generated == limits.max_tokens) {
      result.stop = StopReason::max_tokens;
      break;
    }
    if (position >= context_size()) {
      result.stop = StopReason::context_full;
      break;
    }
    if (Status s = model_.forward(std::span(&next, 1), position, logits_); !s) {
      cached_.clear();
      return s.error();
    }
    cached_.push_back(next);
  }
  if (decoder && result.stop != StopReason::cancelled && result.stop != StopReason::stop_string) {
    const std::string rest = filter.push(decoder->flush()) + filter.flush();
    if (!rest.empty()) show(std::nullopt, rest);
    if (filter.matched()) {
      result.stop = StopReason::stop_string;
      result.stop_string = filter.matched();
    }
  }
  result.decode_seconds = seconds_since(decode_start);
  result.decode_misses = model_.stats().expert_misses - misses_after_prompt;
  result.decode_passes = model_.stats().tokens - tokens_after_prompt;
  return result;
}

}  // namespace coli::tools
