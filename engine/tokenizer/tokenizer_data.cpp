#include "tokenizer_data.h"

#include <algorithm>

#include "byte_level.h"

namespace coli::bpe {
namespace {

Status index_merges(const VocabularySource& source, TokenizerData& data) {
  data.merges.reserve(source.merges.size());
  for (std::size_t rank = 0; rank < source.merges.size(); ++rank) {
    const auto& [left, right] = source.merges[rank];
    const auto l = data.id_of_text.find(left);
    const auto r = data.id_of_text.find(right);
    const auto m = data.id_of_text.find(left + right);
    if (l == data.id_of_text.end() || r == data.id_of_text.end() || m == data.id_of_text.end()) {
      return make_error(source.origin + ": merge " + std::to_string(rank) + " ('" + left + "' '" + right +
                        "') names a token that is not in the vocabulary");
    }
    // A repeated pair keeps its first (lowest) rank, as HF does.
    data.merges.try_emplace(merge_key(l->second, r->second),
                            MergeTarget{static_cast<std::int32_t>(rank), m->second});
  }
  return Ok{};
}

// What a token decodes to: byte-level tokens from their alphabet,
// SentencePiece ones with U+2581 as a space and <0xXX> as that byte; added
// tokens, and text outside the alphabet (it cannot come out of BPE), as they are.
std::string token_bytes(const VocabularySource& source, std::size_t id) {
  const std::string& text = source.tokens[id];
  if (source.kinds[id] != TokenKind::kNormal) return text;
  if (source.model == TokenizerModel::byte_level_bpe) return decode_byte_level(text).value_or(text);
  if (const auto byte = sentencepiece_byte(text)) return std::string(1, static_cast<char>(*byte));
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, kSentencePieceSpace.size(), kSentencePieceSpace) == 0) out += ' ', i += kSentencePieceSpace.size() - 1;
    else out += text[i];
  }
  return out;
}

// The token of each byte: byte-level BPE's one-byte tokens, SentencePiece's <0xXX>.
Status index_byte_tokens(const VocabularySource& source, TokenizerData& data) {
  for (unsigned b = 0; b < 256; ++b) {
    const char hex[] = {"0123456789ABCDEF"[b >> 4], "0123456789ABCDEF"[b & 15], 0};
    const std::string text = source.model == TokenizerModel::byte_level_bpe
                                 ? encode_byte_level(std::string(1, static_cast<char>(b)))
                                 : "<0x" + std::string(hex) + ">";
    const auto it = data.id_of_text.find(text);
    if (it == data.id_of_text.end()) {
      return make_error(source.origin + ": byte 0x" + hex + " ('" + text + "') has no token: " +
                        (source.model == TokenizerModel::byte_level_bpe ? "not a byte-level BPE vocabulary"
                                                                        : "a SentencePiece vocabulary without byte fallback"));
    }
    data.byte_token[b] = it->second;
  }
  return Ok{};
}

}  // namespace

std::optional<unsigned char> sentencepiece_byte(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>' || hex(text[3]) < 0 || hex(text[4]) < 0) return std::nullopt;
  return static_cast<unsigned char>(hex(text[3]) * 16 + hex(text[4]));
}

Result<std::shared_ptr<const TokenizerData>> build_tokenizer_data(const VocabularySource& source) {
  if (source.tokens.empty()) return make_error(source.origin + ": the vocabulary is empty");
  if (source.kinds.size() != source.tokens.size()) {
    return make_error(source.origin + ": " + std::to_string(source.kinds.size()) + " token types for " +
                      std::to_string(source.tokens.size()) + " tokens");
  }
  if (!source.scores.empty() && source.scores.size() != source.tokens.size()) {
    return make_error(source.origin + ": " + std::to_string(source.scores.size()) + " token scores for " +
                      std::to_string(source.tokens.size()) + " tokens");
  }
  auto data = std::make_shared<TokenizerData>();
  data->model = source.model;
  data->scores = source.scores;
  data->add_space_prefix = source.add_space_prefix;
  data->space_prefix_first_only = source.space_prefix_first_only;
  auto splitter = WordSplitter::create(source.split_patterns, source.origin);
  if (!splitter) return splitter.error();
  data->splitter = std::move(*splitter);
  data->normalize_nfc = source.normalize_nfc;
  data->ignore_merges = source.ignore_merges;
  data->texts = source.tokens;
  data->kinds = source.kinds;
  data->bytes.reserve(source.tokens.size());
  data->id_of_text.reserve(source.tokens.size());

  for (std::size_t id = 0; id < source.tokens.size(); ++id) {
    const std::string& text = source.tokens[id];
    const auto id32 = static_cast<std::int32_t>(id);
    data->bytes.push_back(token_bytes(source, id));
    if (source.kinds[id] != TokenKind::kUnused || !text.empty()) data->id_of_text.try_emplace(text, id32);
    const bool matched_in_text = source.kinds[id] == TokenKind::kControl ||
                                 source.kinds[id] == TokenKind::kUserDefined;
    if (matched_in_text && !text.empty()) {
      data->added_by_first_byte[static_cast<unsigned char>(text[0])].push_back(id32);
    }
  }
  for (auto& bucket : data->added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::int32_t a, std::int32_t b) {
      return data->texts[a].size() > data->texts[b].size();
    });
  }
  if (Status bytes = index_byte_tokens(source, *data); !bytes) return bytes.error();
  if (Status merged = index_merges(source, *data); !merged) return merged.error();
  return std::shared_ptr<const TokenizerData>(std::move(data));
}

}  // namespace coli::bpe
