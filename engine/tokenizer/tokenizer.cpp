// Tokenizer: encode (added tokens, then pre-tokeniser + BPE), decode, lookups.
#include "coli/tokenizer/tokenizer.h"

#include "nfc.h"
#include "pre_tokenizer.h"
#include "tokenizer_data.h"

namespace coli {
namespace {

bool in_range(const bpe::TokenizerData& data, std::int32_t id) {
  return id >= 0 && static_cast<std::size_t>(id) < data.texts.size();
}

// Ordinary text between added tokens: normalise, split into words, merge
// (SentencePiece: escape the spaces and merge the whole text).
// `at_start`: the text starts the input (else it follows an added token).
void encode_plain(const bpe::TokenizerData& data, std::string_view text, bool at_start, std::vector<std::int32_t>& out) {
  if (text.empty()) return;
  if (data.model == bpe::TokenizerModel::sentencepiece_bpe) {
    bpe::encode_spm(data, text, at_start, out);
    return;
  }
  std::string normalized;
  if (data.normalize_nfc) {
    normalized = bpe::to_nfc(text);
    text = normalized;
  }
  std::vector<std::string_view> words;
  data.splitter->split(text, words);
  for (std::string_view word : words) bpe::merge_word(data, word, out);
}

// The longest added token that starts at text[pos], or -1.
std::int32_t added_token_at(const bpe::TokenizerData& data, std::string_view text, std::size_t pos,
                            bool parse_special) {
  for (std::int32_t id : data.added_by_first_byte[static_cast<unsigned char>(text[pos])]) {
    if (!parse_special && data.kinds[id] == TokenKind::kControl) continue;
    if (text.substr(pos).starts_with(data.texts[id])) return id;
  }
  return -1;
}

}  // namespace

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const bpe::TokenizerData& data = *data_;
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::size_t plain_start = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::int32_t added = added_token_at(data, text, pos, parse_special);
    if (added < 0) {
      ++pos;
      continue;
    }
    encode_plain(data, text.substr(plain_start, pos - plain_start), plain_start == 0, out);
    out.push_back(added);
    pos += data.texts[added].size();
    plain_start = pos;
  }
  encode_plain(data, text.substr(plain_start), plain_start == 0, out);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::string text;
  for (std::int32_t id : ids) {
    if (!in_range(*data_, id)) continue;
    if (skip_special && data_->kinds[id] == TokenKind::kControl) continue;
    text += data_->bytes[id];
  }
  return text;
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  return in_range(*data_, id) ? std::string_view(data_->bytes[id]) : std::string_view();
}

std::string_view Tokenizer::token_text(std::int32_t id) const {
  return in_range(*data_, id) ? std::string_view(data_->texts[id]) : std::string_view();
}

std::optional<std::int32_t> Tokenizer::find_token(std::string_view vocabulary_text) const {
  const auto it = data_->id_of_text.find(std::string(vocabulary_text));
  if (it == data_->id_of_text.end()) return std::nullopt;
  return it->second;
}

TokenKind Tokenizer::token_kind(std::int32_t id) const {
  return in_range(*data_, id) ? data_->kinds[id] : TokenKind::kUnused;
}

Result<Tokenizer> Tokenizer::from_file(const std::filesystem::path& path) {
  return path.extension() == ".gguf" ? from_gguf(path) : from_tokenizer_json(path);
}

Result<Tokenizer> Tokenizer::from_file_bytes(const std::filesystem::path& file_name, std::string_view bytes,
                                             const std::string& origin) {
  return file_name.extension() == ".gguf" ? from_gguf_bytes(bytes, origin) : from_tokenizer_json_text(bytes, origin);
}

std::size_t Tokenizer::vocab_size() const { return data_->texts.size(); }
const std::vector<std::string>& Tokenizer::split_patterns() const { return data_->splitter->patterns(); }
bool Tokenizer::adds_space_prefix() const { return data_->model == bpe::TokenizerModel::sentencepiece_bpe && data_->add_space_prefix; }
bool Tokenizer::sentencepiece() const { return data_->model == bpe::TokenizerModel::sentencepiece_bpe; }

}  // namespace coli
