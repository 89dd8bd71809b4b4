// Pre-tokenisation: cuts text into the words BPE merges within, with the
// split regexes the tokenizer defines, run by PCRE2 (UTF-8, Unicode
// properties). Several regexes run in order, each over the previous one's
// pieces on their own; text a regex does not match stays a piece of its own
// (Hugging Face's Split with behavior "Isolated", llama.cpp's
// unicode_regex_split). Bytes that are not valid UTF-8 match no pattern
// character, so they end up in pieces of their own and are encoded byte-wise.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"

namespace coli::bpe {

// The split regexes of the common byte-level BPE tokenizers, as their
// tokenizer.json files spell them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's GGUF pre-tokenizer name (tokenizer.ggml.pre) -> the regexes
// its tokenizer.json defines, whether it ignores merges for words that are
// tokens and whether its prompts start with BOS; nullopt for a name this
// table does not know.
struct GgufPreTokenizer {
  std::vector<std::string> patterns;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when the file has no tokenizer.ggml.add_bos_token
};
std::optional<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view name);
// The names the table knows, for error messages.
std::string known_gguf_pre_tokenizers();

class WordSplitter {
 public:
  // Compiles every pattern; an error names the origin, the pattern and
  // PCRE2's reason and offset.
  static Result<WordSplitter> create(std::vector<std::string> patterns, const std::string& origin);

  // Appends the words of `text` (consecutive, covering all of it) to `words`.
  // Safe to call from several threads at once.
  void split(std::string_view text, std::vector<std::string_view>& words) const;
  const std::vector<std::string>& patterns() const;

 private:
  struct Compiled;
  explicit WordSplitter(std::shared_ptr<const Compiled> compiled) : compiled_(std::move(compiled)) {}
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace coli::bpe
