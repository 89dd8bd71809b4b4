// One generation: a prompt through the model, then sampled tokens until an
// end token, a stop string, the token limit, the end of the context, or the
// caller says stop. `coli run` (one prompt, or a chat on a terminal) and
// `coli serve` (one request after another) both run this loop, so they stop,
// stream and count the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/runtime/moe_model.h"
#include "coli/tokenizer/tokenizer.h"
#include "sampler.h"
#include "stop_reason.h"

namespace coli::tools {

// Generated text passes through here so that a stop string never reaches the
// reader: text that could still become the start of one is held back until it
// cannot (as llama-server does).
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  // Appends `text`; returns what is safe to show now. When a stop string
  // completes, returns the text before it, sets matched(), and every later
  // push returns "".
  std::string push(std::string_view text);
  // The text still held back, at the end of generation ("" after a match).
  std::string flush();
  const std::optional<std::string>& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::optional<std::string> matched_;
};

struct GenerationLimits {
  int max_tokens = -1;                    // < 0: until an end token or the context is full
  std::vector<std::int32_t> end_tokens;   // EOS, the chat turn's end
  std::vector<std::string> stop_strings;  // need a tokenizer
};

struct GeneratedPiece {
  std::optional<std::int32_t> token;  // nullopt: the text held back until the end
  std::string text;                   // what to show now; "" without a tokenizer or while held back
};

struct GenerationResult {
  int prompt_tokens = 0;
  int reused_tokens = 0;  // of the prompt, already in the KV cache from the previous generation
  int generated = 0;      // tokens sampled and shown (end tokens excluded)
  StopReason stop = StopReason::max_tokens;
  std::optional<std::int32_t> end_token;  // the one that stopped it
  std::optional<std::string> stop_string;
  double prefill_seconds = 0;  // the prompt's forward pass (time to the first token's logits)
  // Minor page faults during that pass: memory the process touched for the
  // first time (a first pass's prompt-sized buffers), which warm passes do
  // not pay.
  std::uint64_t prompt_page_faults = 0;
  bool first_pass = false;  // the generator's first prompt (its model's buffers fresh, as coli run's one prompt)
  double decode_seconds = 0;   // from the first pick to the end
  // Expert cache misses (records read from disk) of the prompt's pass and of
  // the decode passes after it, and how many decode passes ran: plan vs
  // actual for the reads the speed prediction counts.
  std::uint64_t prompt_misses = 0, decode_misses = 0, decode_passes = 0;
  std::string text;            // everything shown (with a tokenizer)
};

// A text prompt's tokens: BOS first, once, where the tokenizer asks for it
// (SentencePiece and Llama 3 vocabularies), as the model was trained, unless
// `allow_bos` is false (--no-bos). `added_bos` (optional) says whether it did.
std::vector<std::int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text, bool allow_bos,
                                        bool* added_bos = nullptr);

// The model and what its KV cache holds, across generations: a prompt that
// starts with the previous generation's tokens (a chat's next turn, a client
// resending its history) runs only its new part.
class Generator {
 public:
  Generator(runtime::MoeModel& model, const Tokenizer* tokenizer);
  // false: stop now (the piece was shown; the result says cancelled).
  using OnPiece = std::function<bool(const GeneratedPiece&)>;
  // `after_prefill` runs once the prompt's pass is done (coli run takes its
  // --op-times table there). Errors: the engine's (the cache is then
  // forgotten), a prompt longer than the context, stop strings without a tokenizer.
  Result<GenerationResult> generate(std::span<const std::int32_t> prompt, const SamplingOptions& sampling,
                                    const GenerationLimits& limits, const OnPiece& on_piece,
                                    const std::function<void()>& after_prefill = {});
  int context_size() const;
  // The tokens the KV cache holds (positions 0..n-1).
  const std::vector<std::int32_t>& cached_tokens() const { return cached_; }

 private:
  Result<int> run_prompt(std::span<const std::int32_t> prompt);
  runtime::MoeModel& model_;
  const Tokenizer* tokenizer_;
  std::vector<std::int32_t> cached_;
  std::vector<float> logits_;
  bool generated_before_ = false;
};

}  // namespace coli::tools
