// Tokenizer::from_gguf: the tokenizer.ggml.* keys llama.cpp writes for a
// byte-level BPE ("gpt2") or SentencePiece BPE ("llama") vocabulary.
#include <limits>

#include "coli/tokenizer/gguf_metadata.h"
#include "pre_tokenizer.h"
#include "tokenizer_data.h"

namespace coli {
namespace {

using bpe::VocabularySource;

// llama.cpp's tokenizer.ggml.pre names, mapped to the split regexes they use.
Result<bpe::GgufPreTokenizer> pre_tokenizer_for(const GgufMetadata& meta) {
  const GgufValue* pre = meta.find("tokenizer.ggml.pre");
  if (pre == nullptr) {
    return make_error(meta.origin + ": no tokenizer.ggml.pre key; cannot tell which pre-tokenizer to use");
  }
  auto known = bpe::gguf_pre_tokenizer(pre->text);
  if (!known) {
    return make_error(meta.origin + ": tokenizer.ggml.pre '" + pre->text + "' is not supported (known: " +
                      bpe::known_gguf_pre_tokenizers() + ")");
  }
  return *known;
}

// llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte.
TokenKind kind_for_type(std::int64_t type) {
  switch (type) {
    case 2: case 3: return TokenKind::kControl;
    case 4: return TokenKind::kUserDefined;
    case 5: return TokenKind::kUnused;
    default: return TokenKind::kNormal;
  }
}

Status split_merges(const GgufMetadata& meta, const GgufValue& merges, VocabularySource& source) {
  source.merges.reserve(merges.strings.size());
  for (std::size_t i = 0; i < merges.strings.size(); ++i) {
    const std::string& merge = merges.strings[i];
    // Byte-level tokens never hold a plain space, so the first space after
    // the first character separates the pair.
    const std::size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      return make_error(meta.origin + ": tokenizer.ggml.merges[" + std::to_string(i) + "] '" + merge +
                        "' is not two tokens separated by a space");
    }
    source.merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
  }
  return Ok{};
}

Result<std::optional<std::int32_t>> optional_id(const GgufMetadata& meta, const char* key, std::size_t vocab) {
  const GgufValue* value = meta.find(key);
  if (value == nullptr) return std::optional<std::int32_t>{};
  if (!value->is_integer() || value->integer < 0 || static_cast<std::uint64_t>(value->integer) >= vocab) {
    return make_error(meta.origin + ": " + key + " is not a token id below the vocabulary size " +
                      std::to_string(vocab));
  }
  return std::optional<std::int32_t>(static_cast<std::int32_t>(value->integer));
}

// Byte-level BPE ("gpt2"): the split regexes of its pre-tokenizer name, and merges.
Status read_byte_level(const GgufMetadata& meta, VocabularySource& source) {
  auto pre = pre_tokenizer_for(meta);
  if (!pre) return pre.error();
  source.split_patterns = std::move(pre->patterns);
  source.ignore_merges = pre->ignore_merges;
  source.add_bos = pre->add_bos;
  const GgufValue* merges = meta.find("tokenizer.ggml.merges");
  if (merges == nullptr || !merges->is_array_of(GgufType::kString)) {
    return make_error(meta.origin + ": tokenizer.ggml.merges is missing or not an array of strings");
  }
  return split_merges(meta, *merges, source);
}

// SentencePiece BPE ("llama"): a score per token, and the space prefix
// (llama.cpp's default: on).
Status read_sentencepiece(const GgufMetadata& meta, VocabularySource& source) {
  source.model = bpe::TokenizerModel::sentencepiece_bpe;
  const GgufValue* scores = meta.find("tokenizer.ggml.scores");
  if (scores == nullptr || !scores->is_array_of(GgufType::kFloat32) || scores->reals.size() != source.tokens.size()) {
    return make_error(meta.origin + ": tokenizer.ggml.scores is missing or not " + std::to_string(source.tokens.size()) +
                      " float32 scores");
  }
  source.scores.assign(scores->reals.begin(), scores->reals.end());
  source.add_space_prefix = true;
  source.add_bos = true;  // llama.cpp's default for SentencePiece vocabularies
  if (const GgufValue* prefix = meta.find("tokenizer.ggml.add_space_prefix")) {
    if (prefix->type != GgufType::kBool) return make_error(meta.origin + ": tokenizer.ggml.add_space_prefix is not a bool");
    source.add_space_prefix = prefix->integer != 0;
  }
  return Ok{};
}

Result<VocabularySource> source_from_metadata(const GgufMetadata& meta) {
  VocabularySource source;
  source.origin = meta.origin;
  const GgufValue* model = meta.find("tokenizer.ggml.model");
  if (model == nullptr) return make_error(meta.origin + ": no tokenizer.ggml.model key: not a vocabulary");
  if (model->text != "gpt2" && model->text != "llama") {
    return make_error(meta.origin + ": tokenizer.ggml.model '" + model->text +
                      "' is not supported; only byte-level BPE ('gpt2') and SentencePiece BPE ('llama') are");
  }
  const GgufValue* tokens = meta.find("tokenizer.ggml.tokens");
  if (tokens == nullptr || !tokens->is_array_of(GgufType::kString)) {
    return make_error(meta.origin + ": tokenizer.ggml.tokens is missing or not an array of strings");
  }
  if (tokens->strings.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return make_error(meta.origin + ": tokenizer.ggml.tokens has more tokens than int32 ids can name");
  }
  source.tokens = tokens->strings;
  source.kinds.assign(source.tokens.size(), TokenKind::kNormal);
  if (const GgufValue* types = meta.find("tokenizer.ggml.token_type")) {
    if (types->type != GgufType::kArray || types->integers.size() != source.tokens.size()) {
      return make_error(meta.origin + ": tokenizer.ggml.token_type is not an integer array of " +
                        std::to_string(source.tokens.size()) + " entries");
    }
    for (std::size_t i = 0; i < source.kinds.size(); ++i) source.kinds[i] = kind_for_type(types->integers[i]);
  }
  const Status model_keys = model->text == "gpt2" ? read_byte_level(meta, source) : read_sentencepiece(meta, source);
  if (!model_keys) return model_keys.error();

  auto bos = optional_id(meta, "tokenizer.ggml.bos_token_id", source.tokens.size());
  if (!bos) return bos.error();
  auto eos = optional_id(meta, "tokenizer.ggml.eos_token_id", source.tokens.size());
  if (!eos) return eos.error();
  source.bos_id = *bos;
  source.eos_id = *eos;
  if (const GgufValue* add_bos = meta.find("tokenizer.ggml.add_bos_token")) {
    if (add_bos->type != GgufType::kBool) return make_error(meta.origin + ": tokenizer.ggml.add_bos_token is not a bool");
    source.add_bos = add_bos->integer != 0;
  }
  if (source.add_bos && !source.bos_id) {
    return make_error(meta.origin + ": prompts should start with BOS (tokenizer.ggml.add_bos_token) but there is no "
                      "tokenizer.ggml.bos_token_id");
  }
  return source;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const std::filesystem::path& path) { return from_gguf_metadata(read_gguf_metadata(path)); }

Result<Tokenizer> Tokenizer::from_gguf_bytes(std::string_view bytes, const std::string& origin) {
  return from_gguf_metadata(read_gguf_metadata(bytes, origin));
}

Result<Tokenizer> Tokenizer::from_gguf_metadata(const Result<GgufMetadata>& meta) {
  if (!meta) return meta.error();
  auto source = source_from_metadata(*meta);
  if (!source) return source.error();
  auto data = bpe::build_tokenizer_data(*source);
  if (!data) return data.error();
  Tokenizer tokenizer(std::move(*data));
  tokenizer.set_bos_id(source->bos_id);
  tokenizer.set_eos_id(source->eos_id);
  tokenizer.set_add_bos(source->add_bos);
  if (const GgufValue* chat = meta->find("tokenizer.chat_template"); chat && chat->type == GgufType::kString) {
    tokenizer.chat_template_ = chat->text;
  }
  return tokenizer;
}

}  // namespace coli
