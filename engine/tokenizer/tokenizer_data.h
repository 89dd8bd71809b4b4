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

// Which algorithm a vocabulary uses.
enum class TokenizerModel {
  // GPT-2 style: bytes mapped to printable characters, merged by rank
  // within the words the split regexes cut.
  byte_level_bpe,
  // SentencePiece style (Llama 2, Mistral, Mixtral): spaces become U+2581, a
  // text that starts the input or follows an added token gets one in front
  // (add_space_prefix), characters merge by the merged token's score (GGUF)
  // or by merge rank (tokenizer.json), and a character that is no token is
  // written as its bytes' <0xXX> tokens (byte fallback).
  sentencepiece_bpe,
};

// U+2581, SentencePiece's word boundary: a space in its tokens' text.
inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";

// A vocabulary as read from a file, before indexing.
struct VocabularySource {
  TokenizerModel model = TokenizerModel::byte_level_bpe;
  std::vector<float> scores;           // by id (SentencePiece GGUF); empty: merges by rank
  bool add_space_prefix = false;       // SentencePiece only
  bool space_prefix_first_only = false;  // only before the input's first text, not after added tokens
  std::string origin;                  // the file, for error messages
  std::vector<std::string> tokens;     // by id; normal tokens in the byte-level alphabet
  std::vector<TokenKind> kinds;        // by id
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::vector<std::string> split_patterns;  // the pre-tokenizer's regexes, applied in order
  bool normalize_nfc = false;          // tokenizer.json "normalizer": NFC (Qwen2)
  bool ignore_merges = false;          // a word that is itself a token is not merged
  std::optional<std::int32_t> bos_id;
  std::optional<std::int32_t> eos_id;
  bool add_bos = false;                // a prompt starts with bos_id (the model was trained so)
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
  TokenizerModel model = TokenizerModel::byte_level_bpe;
  std::vector<float> scores;
  bool add_space_prefix = false;
  bool space_prefix_first_only = false;
  std::optional<WordSplitter> splitter;  // always set by build_tokenizer_data (byte-level BPE)
  bool normalize_nfc = false;
  bool ignore_merges = false;
  std::vector<std::string> texts;   // by id, as in the vocabulary
  std::vector<std::string> bytes;   // by id, what the token decodes to
  std::vector<TokenKind> kinds;     // by id
  std::unordered_map<std::string, std::int32_t> id_of_text;
  std::unordered_map<std::uint64_t, MergeTarget> merges;  // by merge_key(left, right)
  std::array<std::int32_t, 256> byte_token{};             // the single-byte tokens (SentencePiece: <0xXX>)
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

// The byte a SentencePiece byte-fallback token ("<0x0A>") stands for.
std::optional<unsigned char> sentencepiece_byte(std::string_view text);

// SentencePiece BPE of one text between added tokens (spm.cpp); `at_start`:
// it starts the input (else it follows an added token).
void encode_spm(const TokenizerData& data, std::string_view text, bool at_start, std::vector<std::int32_t>& out);

}  // namespace coli::bpe
