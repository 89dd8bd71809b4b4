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

}  // namespace

Result<std::shared_ptr<const TokenizerData>> build_tokenizer_data(const VocabularySource& source) {
  if (source.tokens.empty()) return make_error(source.origin + ": the vocabulary is empty");
  if (source.kinds.size() != source.tokens.size()) {
    return make_error(source.origin + ": " + std::to_string(source.kinds.size()) + " token types for " +
                      std::to_string(source.tokens.size()) + " tokens");
  }
  auto data = std::make_shared<TokenizerData>();
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
    // Added tokens are literal text; a normal token outside the byte-level
    // alphabet cannot come out of BPE, so its text is kept as it is.
    std::optional<std::string> raw;
    if (source.kinds[id] == TokenKind::kNormal) raw = decode_byte_level(text);
    data->bytes.push_back(raw ? *raw : text);
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
  for (unsigned b = 0; b < 256; ++b) {
    const std::string text = encode_byte_level(std::string(1, static_cast<char>(b)));
    const auto it = data->id_of_text.find(text);
    if (it == data->id_of_text.end()) {
      return make_error(source.origin + ": byte 0x" + "0123456789ABCDEF"[b >> 4] + "0123456789ABCDEF"[b & 15] +
                        " ('" + text + "') has no token: not a byte-level BPE vocabulary");
    }
    data->byte_token[b] = it->second;
  }
  if (Status merged = index_merges(source, *data); !merged) return merged.error();
  return std::shared_ptr<const TokenizerData>(std::move(data));
}

}  // namespace coli::bpe
