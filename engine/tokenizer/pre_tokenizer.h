// Pre-tokenisation: cuts text into the words BPE merges within. Each split
// regex is implemented as a hand-written matcher over code points, trying the
// regex's alternatives in order at each position with the regex's greedy /
// backtracking outcome (no regex engine: std::regex has no \p{L}).
//
// GPT-2 (also OLMoE):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Qwen2 (also Qwen3):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
#pragma once

#include <string_view>
#include <vector>

#include "coli/tokenizer/tokenizer.h"

namespace coli::bpe {

// The exact pattern strings, as tokenizer.json files spell them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Appends the words of `text` (consecutive, covering all of it) to `words`.
void split_words(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& words);

}  // namespace coli::bpe
