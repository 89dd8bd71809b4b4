// The tables behind a Tokenizer, and the neutral form both file loaders
// produce before those tables are built.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "coli/base/result.h"
#include "coli/tokenizer/tokenizer.h"
#include "pre_tokenizer.h"

namespace coli::bpe {

// A vocabulary as read from a file, before indexing.
struct VocabularySource {
  std::string origin;                  // the file, for error messages
  std::vector<std::string> tokens;     // by id; normal tokens in the byte-level alphabet
  std::vector<TokenKind> kinds;        // by id
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::vector<std::string> split_patterns;  // the pre-tokenizer's regexes, applied in order
  bool normalize_nfc = false;          // tokenizer.json "normalizer": NFC (Qwen2)
  bool ignore_merges = false;          // a word that is itself a token is not merged
  std::optional<std::int32_t> bos_id;
  std::optional<std::int32_t> eos_id;
};

struct MergeTarget {
  std::int32_t rank;    // lower merges first
  std::int32_t merged;  // id of the concatenation
};

inline std::uint64_t merge_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

struct TokenizerData {
  std::optional<WordSplitter> splitter;  // always set by build_tokenizer_data
  bool normalize_nfc = false;
  bool ignore_merges = false;
  std::vector<std::string> texts;   // by id, as in the vocabulary
  std::vector<std::string> bytes;   // by id, what the token decodes to
  std::vector<TokenKind> kinds;     // by id
  std::unordered_map<std::string, std::int32_t> id_of_text;
  std::unordered_map<std::uint64_t, MergeTarget> merges;  // by merge_key(left, right)
  std::array<std::int32_t, 256> byte_token{};             // the single-byte tokens
  // Control and user-defined tokens by first byte, longest first, so the
  // first hit at a position is the longest match.
  std::array<std::vector<std::int32_t>, 256> added_by_first_byte;
};

// Indexes a source; fails when merges name unknown tokens, a byte has no
// token, a split regex does not compile, or the tables are otherwise
// inconsistent (message names the origin).
Result<std::shared_ptr<const TokenizerData>> build_tokenizer_data(const VocabularySource& source);

// BPE within one pre-tokenised word (raw bytes); appends the ids to `out`.
void merge_word(const TokenizerData& data, std::string_view word, std::vector<std::int32_t>& out);

}  // namespace coli::bpe
