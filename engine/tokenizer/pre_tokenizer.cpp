#include "pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <utility>

namespace coli::bpe {
namespace {

// Each tokenizer's split regexes, as its tokenizer.json spells them (the
// Llama-3, Qwen3.5 and DeepSeek families' are theirs; llama.cpp lists the
// same per GGUF name, some respelled for std::regex).
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Non-ASCII characters as \x{...} escapes: literal ones risk Unicode
// normalisation by editors and tools (U+2126 OHM SIGN silently becomes U+03A9).
const std::vector<std::string> kDeepseekLlm = {
    "[\r\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
};
const std::vector<std::string> kDeepseekCoder = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}",
};
const std::vector<std::string> kDeepseekV3 = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

struct NamedPreTokenizer {
  std::vector<std::string_view> names;
  GgufPreTokenizer pre;
};

// Llama 3's tokenizer.json sets "ignore_merges" (a word that is a token is
// not merged) and its prompts start with <|begin_of_text|> (llama.cpp sets
// both for the same names).
const std::vector<NamedPreTokenizer>& gguf_table() {
  static const std::vector<NamedPreTokenizer> table = {
      {{"gpt-2", "olmo", "mpt", "phi-2"}, {{std::string(kGpt2Pattern)}}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2"}, {{std::string(kQwen2Pattern)}}},
      {{"qwen35"}, {{std::string(kQwen35Pattern)}}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {{std::string(kLlama3Pattern)}, true, true}},
      {{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, {{std::string(kLlama3Pattern)}}},
      {{"deepseek-llm"}, {kDeepseekLlm}},
      {{"deepseek-coder"}, {kDeepseekCoder}},
      {{"deepseek-v3"}, {kDeepseekV3}},
      {{"starcoder", "refact", "command-r", "smollm"}, {{"\\p{N}", std::string(kGpt2Pattern)}}},
  };
  return table;
}

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(code, buffer.data(), buffer.size());
  return reinterpret_cast<const char*>(buffer.data());
}

}  // namespace

std::optional<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view name) {
  for (const NamedPreTokenizer& entry : gguf_table()) {
    for (std::string_view known : entry.names) {
      if (known == name) return entry.pre;
    }
  }
  return std::nullopt;
}

std::string known_gguf_pre_tokenizers() {
  std::string names;
  for (const NamedPreTokenizer& entry : gguf_table()) {
    for (std::string_view name : entry.names) names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names;
}

struct WordSplitter::Compiled {
  std::vector<std::string> patterns;
  std::vector<pcre2_code*> codes;
  ~Compiled() {
    for (pcre2_code* code : codes) pcre2_code_free(code);
  }
};

Result<WordSplitter> WordSplitter::create(std::vector<std::string> patterns, const std::string& origin) {
  auto compiled = std::make_shared<Compiled>();
  for (const std::string& pattern : patterns) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // UTF + UCP: \s, \p{L} and (?i) by Unicode, and $ only at the very end,
    // as the Rust regex crate of Hugging Face's tokenizers has them; invalid
    // UTF-8 in a subject is allowed and matches nothing.
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &error, &offset, nullptr);
    if (code == nullptr) {
      return make_error(origin + ": pre-tokenizer regex '" + pattern + "' does not compile (" + pcre2_message(error) +
                        " at offset " + std::to_string(offset) + ")");
    }
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // faster where PCRE2 has a JIT; the interpreter otherwise
    compiled->codes.push_back(code);
  }
  compiled->patterns = std::move(patterns);
  return WordSplitter(std::move(compiled));
}

const std::vector<std::string>& WordSplitter::patterns() const { return compiled_->patterns; }

void WordSplitter::split(std::string_view text, std::vector<std::string_view>& words) const {
  const std::size_t first = words.size();
  if (!text.empty()) words.push_back(text);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(pcre2_match_data_create(1, nullptr),
                                                                             &pcre2_match_data_free);
  std::vector<std::string_view> pieces;
  for (pcre2_code* code : compiled_->codes) {
    pieces.assign(words.begin() + static_cast<std::ptrdiff_t>(first), words.end());
    words.resize(first);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      std::size_t done = 0, from = 0;
      while (from <= piece.size() &&
             pcre2_match(code, subject, piece.size(), from, 0, match.get(), nullptr) >= 0) {
        const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match.get());
        const std::size_t begin = span[0], end = span[1];
        if (begin > done) words.push_back(piece.substr(done, begin - done));  // what no alternative matched
        if (end > begin) words.push_back(piece.substr(begin, end - begin));
        done = std::max(done, end);
        from = end > begin ? end : end + 1;  // an empty match moves on by one byte
      }
      if (done < piece.size()) words.push_back(piece.substr(done));
    }
  }
}

}  // namespace coli::bpe
