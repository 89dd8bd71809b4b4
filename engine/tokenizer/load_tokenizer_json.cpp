// Tokenizer::from_tokenizer_json: a Hugging Face tokenizers file whose model
// is byte-level BPE, with any split regexes and an NFC normaliser or none.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "coli/base/files.h"
#include "pre_tokenizer.h"
#include "tokenizer_data.h"

namespace coli {
namespace {

using nlohmann::json;
using bpe::VocabularySource;

// Thrown inside this file only, turned into an Error at the boundary.
struct Unsupported {
  std::string message;
};

// A regex matching `text` literally: \Q...\E, with any \E inside closed and reopened.
std::string literal_pattern(const std::string& text) {
  std::string out = "\\Q";
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += text[i];
    }
  }
  return out + "\\E";
}

// The split regexes a pre_tokenizer defines, in order: ByteLevel (with
// use_regex, GPT-2's pattern), Split (a Regex, or a String matched
// literally; behavior Isolated, not inverted), Digits (one digit at a time or
// runs) and a Sequence of them. Byte-level BPE needs a ByteLevel step;
// `byte_level` says whether one was seen.
void add_split_patterns(const json& pre, std::vector<std::string>& patterns, bool& byte_level) {
  const std::string type = pre.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& step : pre.at("pretokenizers")) add_split_patterns(step, patterns, byte_level);
    return;
  }
  if (type == "ByteLevel") {
    if (pre.value("add_prefix_space", false)) throw Unsupported{"ByteLevel pre_tokenizer with add_prefix_space true"};
    if (pre.value("use_regex", true)) patterns.emplace_back(bpe::kGpt2Pattern);
    byte_level = true;
    return;
  }
  if (type == "Split") {
    if (pre.value("behavior", "") != "Isolated" || pre.value("invert", false)) {
      throw Unsupported{"Split pre_tokenizer with behavior " + pre.value("behavior", std::string("(none)")) +
                        (pre.value("invert", false) ? ", inverted" : "") + " (known: Isolated, not inverted)"};
    }
    const json& pattern = pre.at("pattern");
    if (pattern.contains("Regex")) patterns.push_back(pattern.at("Regex").get<std::string>());
    else patterns.push_back(literal_pattern(pattern.at("String").get<std::string>()));
    return;
  }
  if (type == "Digits") {
    patterns.emplace_back(pre.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
    return;
  }
  throw Unsupported{"pre_tokenizer type '" + type + "' (known: ByteLevel, Split, Digits, Sequence)"};
}

std::vector<std::string> split_patterns(const json& pre) {
  if (pre.is_null()) throw Unsupported{"no pre_tokenizer; byte-level BPE needs a ByteLevel one"};
  std::vector<std::string> patterns;
  bool byte_level = false;
  add_split_patterns(pre, patterns, byte_level);
  if (!byte_level) throw Unsupported{"pre_tokenizer without a ByteLevel step: not byte-level BPE"};
  return patterns;
}

bool wants_nfc(const json& normalizer) {
  if (normalizer.is_null()) return false;
  if (normalizer.at("type") == "NFC") return true;
  throw Unsupported{"normalizer " + normalizer.dump() + " (known: none, NFC)"};
}

// SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Mixtral):
// spaces become U+2581 and one is put in front, either by the normaliser
// (a Sequence of Prepend "U+2581" and Replace " " -> "U+2581", as those
// models ship it) or by a Metaspace pre-tokenizer (replacement U+2581,
// prepend_scheme always or first, no split); merges by rank.
void read_sentencepiece_steps(const json& root, VocabularySource& source) {
  const std::string space(bpe::kSentencePieceSpace);
  source.model = bpe::TokenizerModel::sentencepiece_bpe;
  const json normalizer = root.value("normalizer", json());
  const json pre = root.value("pre_tokenizer", json());
  if (!normalizer.is_null()) {
    const json steps = normalizer.value("type", "") == "Sequence" ? normalizer.at("normalizers") : json::array({normalizer});
    bool replaced = false;
    for (const json& step : steps) {
      const std::string type = step.at("type").get<std::string>();
      if (type == "Prepend" && step.at("prepend") == space) {
        source.add_space_prefix = true;
      } else if (type == "Replace" && step.at("pattern").value("String", "") == " " && step.at("content") == space) {
        replaced = true;
      } else {
        throw Unsupported{"SentencePiece normalizer step " + step.dump() + " (known: Prepend and Replace of U+2581)"};
      }
    }
    if (!replaced) throw Unsupported{"SentencePiece normalizer without Replace \" \" -> U+2581"};
    if (!pre.is_null()) throw Unsupported{"pre_tokenizer " + pre.dump() + " beside a SentencePiece normalizer"};
    return;
  }
  if (pre.is_null() || pre.value("type", "") != "Metaspace" || pre.value("replacement", space) != space ||
      pre.value("split", false)) {
    throw Unsupported{"SentencePiece BPE needs a normalizer or a Metaspace pre_tokenizer without split, not " + pre.dump()};
  }
  const std::string scheme = pre.value("prepend_scheme", pre.value("add_prefix_space", true) ? "always" : "never");
  if (scheme != "always" && scheme != "first" && scheme != "never") throw Unsupported{"Metaspace prepend_scheme " + scheme};
  source.add_space_prefix = scheme != "never";
  source.space_prefix_first_only = scheme == "first";
}

void read_merges(const json& merges, VocabularySource& source) {
  source.merges.reserve(merges.size());
  for (const json& merge : merges) {
    if (merge.is_array()) {  // newer files: ["a", "b"]
      if (merge.size() != 2) throw Unsupported{"merge entry " + merge.dump() + " is not a pair"};
      source.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      continue;
    }
    const std::string text = merge.get<std::string>();  // older files: "a b"
    const std::size_t space = text.find(' ', 1);
    if (space == std::string::npos) throw Unsupported{"merge entry '" + text + "' is not 'a b'"};
    source.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
  }
}

// The id table grows to the largest id, so ids are bounded by what the file
// lists: at most twice its token count plus kIdSlack (a few holes are fine;
// a table that is mostly holes is a corrupt file asking for gigabytes).
constexpr std::uint64_t kIdSlack = 1024;

std::uint64_t id_limit(std::size_t listed_tokens) {
  return std::min<std::uint64_t>(2 * static_cast<std::uint64_t>(listed_tokens) + kIdSlack, INT32_MAX);
}

// A token id: a non-negative integer below `limit` (never a float, whose
// conversion to an integer is undefined when out of range).
std::int64_t token_id(const json& id, std::uint64_t limit, const std::string& where) {
  if (!id.is_number_integer()) throw Unsupported{where + " has id " + id.dump() + ", which is not an integer"};
  const bool negative = !id.is_number_unsigned() && id.get<std::int64_t>() < 0;
  if (negative || id.get<std::uint64_t>() >= limit)
    throw Unsupported{where + " has id " + id.dump() + "; ids must be in [0, " + std::to_string(limit) +
                      "), at most twice the tokens the file lists plus " + std::to_string(kIdSlack)};
  return static_cast<std::int64_t>(id.get<std::uint64_t>());
}

// Places token `text` at `id`, growing the table; holes stay unused slots.
void put_token(VocabularySource& source, std::int64_t id, std::string text, TokenKind kind) {
  const auto index = static_cast<std::size_t>(id);
  if (index >= source.tokens.size()) {
    source.tokens.resize(index + 1);
    source.kinds.resize(index + 1, TokenKind::kUnused);
  }
  source.tokens[index] = std::move(text);
  source.kinds[index] = kind;
}

// The token a TemplateProcessing post_processor (alone, or in a Sequence,
// as Llama 3 has it) puts before a single sequence, or none: that is BOS.
std::optional<std::int32_t> bos_of_post_processor(const json& post, const VocabularySource& source) {
  if (!post.is_object()) return std::nullopt;
  if (post.value("type", "") == "Sequence" && post.contains("processors") && post.at("processors").is_array()) {
    for (const json& step : post.at("processors")) {
      if (const auto bos = bos_of_post_processor(step, source)) return bos;
    }
    return std::nullopt;
  }
  if (post.value("type", "") != "TemplateProcessing" || !post.contains("single") || !post.at("single").is_array() ||
      post.at("single").empty() || !post.at("single")[0].is_object() || !post.at("single")[0].contains("SpecialToken")) {
    return std::nullopt;
  }
  const json& special = post.at("single")[0].at("SpecialToken");
  const std::string name = special.is_object() ? special.value("id", "") : "";
  for (std::size_t id = 0; id < source.tokens.size(); ++id) {
    if (source.tokens[id] == name && source.kinds[id] == TokenKind::kControl) return static_cast<std::int32_t>(id);
  }
  throw Unsupported{"post_processor starts a sequence with '" + name + "', which is not a special token of the vocabulary"};
}

VocabularySource source_from_json(const json& root, const std::string& origin) {
  VocabularySource source;
  source.origin = origin;
  const json& model = root.at("model");
  const std::string model_type = model.value("type", "");
  if (model_type != "BPE") {
    throw Unsupported{"model type '" + model_type + "'; only BPE (byte-level, or SentencePiece-style with byte_fallback) is supported"};
  }
  source.ignore_merges = model.value("ignore_merges", false);
  if (model.value("byte_fallback", false)) {
    read_sentencepiece_steps(root, source);
  } else {
    source.split_patterns = split_patterns(root.value("pre_tokenizer", json()));
    source.normalize_nfc = wants_nfc(root.value("normalizer", json()));
  }
  const json& vocab = model.at("vocab");
  const json added_tokens = root.value("added_tokens", json::array());
  if (!vocab.is_object()) throw Unsupported{"model.vocab is not an object of token: id"};
  if (!added_tokens.is_array()) throw Unsupported{"added_tokens is not a list"};
  const std::uint64_t limit = id_limit(vocab.size() + added_tokens.size());
  for (const auto& [text, id] : vocab.items()) {
    put_token(source, token_id(id, limit, "vocab token '" + text + "'"), text, TokenKind::kNormal);
  }
  read_merges(model.at("merges"), source);
  // Added tokens match their content exactly; the lstrip / rstrip /
  // single_word flags are not applied (Qwen2/Qwen3 and GPT-2 set none).
  for (const json& added : added_tokens) {
    const TokenKind kind = added.value("special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
    std::string content = added.at("content").get<std::string>();
    const std::int64_t id = token_id(added.at("id"), limit, "added token '" + content + "'");
    put_token(source, id, std::move(content), kind);
  }
  source.bos_id = bos_of_post_processor(root.value("post_processor", json()), source);
  source.add_bos = source.bos_id.has_value();
  return source;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_tokenizer_json(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return from_tokenizer_json_text(*text, path.string());
}

Result<Tokenizer> Tokenizer::from_tokenizer_json_text(std::string_view text, const std::string& origin) {
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return make_error(origin + ": not valid JSON");
  Result<VocabularySource> source = make_error("");
  try {
    source = source_from_json(root, origin);
  } catch (const Unsupported& e) {
    return make_error(origin + ": unsupported tokenizer: " + e.message);
  } catch (const json::exception& e) {
    return make_error(origin + ": unexpected tokenizer.json layout: " + e.what());
  }
  auto data = bpe::build_tokenizer_data(*source);
  if (!data) return data.error();
  Tokenizer tokenizer(std::move(*data));
  tokenizer.set_bos_id(source->bos_id);
  tokenizer.set_add_bos(source->add_bos);
  return tokenizer;
}

}  // namespace coli
