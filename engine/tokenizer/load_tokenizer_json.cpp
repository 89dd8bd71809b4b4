// Tokenizer::from_tokenizer_json: a Hugging Face tokenizers file whose model
// is byte-level BPE, with the pre-tokeniser and normaliser GPT-2 or Qwen2 ship.
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

// GPT-2: {"type": "ByteLevel", "use_regex": true}. Qwen2: a Sequence of a
// Split with the Qwen2 regex and a ByteLevel with use_regex false.
PreTokenizer classify_pre_tokenizer(const json& pre) {
  if (pre.is_null()) throw Unsupported{"no pre_tokenizer; byte-level BPE needs a ByteLevel one"};
  const std::string type = pre.at("type").get<std::string>();
  if (pre.value("add_prefix_space", false)) throw Unsupported{"pre_tokenizer with add_prefix_space true"};
  if (type == "ByteLevel") {
    if (!pre.value("use_regex", true)) throw Unsupported{"ByteLevel pre_tokenizer without a split regex"};
    return PreTokenizer::kGpt2;
  }
  if (type == "Sequence") {
    const json& steps = pre.at("pretokenizers");
    if (steps.size() == 2 && steps[0].at("type") == "Split" && steps[1].at("type") == "ByteLevel" &&
        !steps[1].value("use_regex", true) && !steps[1].value("add_prefix_space", false)) {
      const json& split = steps[0];
      const std::string pattern = split.at("pattern").value("Regex", "");
      if (split.value("behavior", "") != "Isolated" || split.value("invert", false)) {
        throw Unsupported{"Split pre_tokenizer with behavior other than Isolated"};
      }
      if (pattern == bpe::kQwen2Pattern) return PreTokenizer::kQwen2;
      if (pattern == bpe::kGpt2Pattern) return PreTokenizer::kGpt2;
      throw Unsupported{"Split pre_tokenizer regex " + pattern + " (known: the GPT-2 and Qwen2 patterns)"};
    }
  }
  throw Unsupported{"pre_tokenizer " + pre.dump()};
}

bool wants_nfc(const json& normalizer) {
  if (normalizer.is_null()) return false;
  if (normalizer.at("type") == "NFC") return true;
  throw Unsupported{"normalizer " + normalizer.dump() + " (known: none, NFC)"};
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

VocabularySource source_from_json(const json& root, const std::string& origin) {
  VocabularySource source;
  source.origin = origin;
  const json& model = root.at("model");
  const std::string model_type = model.value("type", "");
  if (model_type != "BPE") {
    throw Unsupported{"model type '" + model_type + "'; only byte-level BPE is supported"};
  }
  if (model.value("byte_fallback", false)) throw Unsupported{"BPE with byte_fallback (SentencePiece style)"};
  source.ignore_merges = model.value("ignore_merges", false);
  source.pre_tokenizer = classify_pre_tokenizer(root.value("pre_tokenizer", json()));
  source.normalize_nfc = wants_nfc(root.value("normalizer", json()));
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
  return source;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_tokenizer_json(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  const json root = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return make_error(path.string() + ": not valid JSON");
  Result<VocabularySource> source = make_error("");
  try {
    source = source_from_json(root, path.string());
  } catch (const Unsupported& e) {
    return make_error(path.string() + ": unsupported tokenizer: " + e.message);
  } catch (const json::exception& e) {
    return make_error(path.string() + ": unexpected tokenizer.json layout: " + e.what());
  }
  auto data = bpe::build_tokenizer_data(*source);
  if (!data) return data.error();
  return Tokenizer(std::move(*data));
}

}  // namespace coli
