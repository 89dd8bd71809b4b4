// Byte-level BPE tokenizer: llama.cpp's test vectors for the GPT-2 and Qwen2
// vocabularies (test-tokenizer-0), the same vocabularies through a
// tokenizer.json, streaming decode, NFC, and the load errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "coli/base/clock.h"
#include "coli/base/files.h"
#include "coli/tokenizer/gguf_metadata.h"
#include "coli/tokenizer/tokenizer.h"

namespace coli {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::int32_t>;

const fs::path kFixtures = fs::path(COLI_FIXTURES_DIR) / "tokenizer";

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Case {
  std::string text;
  Ids ids;
};

// As llama.cpp's test-tokenizer-0 reads them: inputs separated by
// "\n__ggml_vocab_test__\n" (so each input loses the newline before the
// separator and keeps any others), outputs one line of ids per input.
std::vector<Case> read_cases(const std::string& vocab) {
  const std::string raw = slurp(kFixtures / (vocab + ".inp"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (std::size_t pos = 0; pos < raw.size();) {
    const std::size_t next = raw.find(separator, pos);
    cases.push_back({raw.substr(pos, next == std::string::npos ? std::string::npos : next - pos), {}});
    if (next == std::string::npos) break;
    pos = next + separator.size();
  }
  std::ifstream out(kFixtures / (vocab + ".out"));
  std::size_t index = 0;
  for (std::string line; std::getline(out, line); ++index) {
    if (index >= cases.size()) return {};  // more outputs than inputs: caller sees the size mismatch
    std::istringstream ids(line);
    for (std::int32_t id = 0; ids >> id;) cases[index].ids.push_back(id);
  }
  if (index != cases.size()) return {};
  return cases;
}

Tokenizer load_gguf(const std::string& vocab) {
  auto tokenizer = Tokenizer::from_gguf(kFixtures / vocab);
  if (!tokenizer) ADD_FAILURE() << tokenizer.error().message;
  return std::move(tokenizer).value();
}

// Encodes every case as test-tokenizer-0 does (no BOS, special tokens not
// parsed) and returns how many match; reports each mismatch.
int count_matches(const Tokenizer& tokenizer, const std::vector<Case>& cases) {
  int matches = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Ids got = tokenizer.encode(cases[i].text, /*parse_special=*/false);
    EXPECT_EQ(got, cases[i].ids) << "case " << i << ": '" << cases[i].text << "'";
    matches += got == cases[i].ids ? 1 : 0;
    const std::string prefix = tokenizer.adds_space_prefix() && !cases[i].text.empty() ? " " : "";
    EXPECT_EQ(tokenizer.decode(got), prefix + cases[i].text) << "round trip of case " << i;
  }
  return matches;
}

// A scratch folder for this process, removed when the tests end.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("coli_tokenizer_test_" + std::to_string(::getpid()));
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

fs::path temp_path(const std::string& name) {
  static const ScratchDir scratch;
  fs::create_directories(scratch.path);
  return scratch.path / name;
}

void write_bytes(const fs::path& path, std::string_view bytes) {
  ASSERT_TRUE(write_file_atomically(path, bytes).ok()) << path;
}

class GgufVocabularies : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocabularies, ReproducesEveryLlamaCppTestVector) {
  const std::vector<Case> cases = read_cases(GetParam());
  ASSERT_GE(cases.size(), 46u) << "fixture split or line count changed";
  const Tokenizer tokenizer = load_gguf(GetParam());
  EXPECT_EQ(count_matches(tokenizer, cases), static_cast<int>(cases.size())) << GetParam();
}

// The same vocabulary written as a minimal tokenizer.json (vocab, merges,
// added tokens, pre_tokenizer and normalizer as the model ships them) must
// give the ids the GGUF gives, and so the expected ones.
std::string tokenizer_json_for(const std::string& vocab, const Tokenizer& from_gguf) {
  auto meta = read_gguf_metadata(kFixtures / vocab);
  EXPECT_TRUE(meta.ok());
  const std::vector<std::string>& patterns = from_gguf.split_patterns();
  const bool gpt2 = patterns.size() == 1 && patterns[0] == bpe::kGpt2Pattern;
  const bool nfc = vocab == "ggml-vocab-qwen2.gguf";  // as Qwen2's tokenizer.json has it
  nlohmann::json model = {{"type", "BPE"}, {"vocab", nlohmann::json::object()}, {"merges", nlohmann::json::array()},
                         {"ignore_merges", vocab == "ggml-vocab-llama-bpe.gguf"}};  // as Llama 3's file has it
  nlohmann::json added = nlohmann::json::array();
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(from_gguf.vocab_size()); ++id) {
    const std::string text(from_gguf.token_text(id));
    if (from_gguf.token_kind(id) == TokenKind::kNormal) {
      model["vocab"][text] = id;
    } else if (from_gguf.token_kind(id) != TokenKind::kUnused) {
      added.push_back({{"id", id}, {"content", text}, {"special", from_gguf.token_kind(id) == TokenKind::kControl}});
    }
  }
  for (const std::string& merge : meta->find("tokenizer.ggml.merges")->strings) {
    const std::size_t space = merge.find(' ', 1);
    if (!gpt2) {  // newer files write pairs, older ones "a b": cover both
      model["merges"].push_back({merge.substr(0, space), merge.substr(space + 1)});
    } else {
      model["merges"].push_back(merge);
    }
  }
  nlohmann::json root = {{"version", "1.0"}, {"model", model}, {"added_tokens", added}};
  // As the models ship them: GPT-2 a ByteLevel with its own regex; the
  // others a Sequence of Splits and a ByteLevel without one (Qwen with NFC).
  root["normalizer"] = nfc ? nlohmann::json{{"type", "NFC"}} : nlohmann::json(nullptr);
  if (gpt2) {
    root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    return root.dump();
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const std::string& pattern : patterns) {
    steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}});
  }
  steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}});
  root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  return root.dump();
}

// A SentencePiece vocabulary (Llama 2's, as Mixtral's is) written as the
// tokenizer.json Hugging Face's converter makes of it: byte-fallback BPE
// whose merges are every pair of tokens that concatenates to a token, by
// that token's score (ties: the merged token's id, then the pair's ids),
// and a normaliser that prepends U+2581 and replaces spaces by it.
std::string sentencepiece_json_for(const Tokenizer& from_gguf, const std::vector<double>& scores) {
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  struct Merge {
    std::int32_t merged, left, right;
  };
  std::vector<Merge> merges;
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(from_gguf.vocab_size()); ++id) {
    const std::string text(from_gguf.token_text(id));
    if (from_gguf.token_kind(id) != TokenKind::kNormal) {
      added.push_back({{"id", id}, {"content", text}, {"special", true}});
      continue;
    }
    vocab[text] = id;
    std::vector<Merge> local;
    for (std::size_t cut = 1; cut < text.size(); ++cut) {
      if ((static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) continue;  // inside a character
      const auto left = from_gguf.find_token(text.substr(0, cut)), right = from_gguf.find_token(text.substr(cut));
      if (left && right && from_gguf.token_kind(*left) == TokenKind::kNormal && from_gguf.token_kind(*right) == TokenKind::kNormal)
        local.push_back({id, *left, *right});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) { return std::pair(a.left, a.right) < std::pair(b.left, b.right); });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [&](const Merge& a, const Merge& b) { return scores[a.merged] > scores[b.merged]; });
  nlohmann::json merge_list = nlohmann::json::array();
  for (const Merge& m : merges) merge_list.push_back({from_gguf.token_text(m.left), from_gguf.token_text(m.right)});
  const std::string space = "\xE2\x96\x81";
  nlohmann::json root;
  root["version"] = "1.0";
  root["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"byte_fallback", true},
                   {"fuse_unk", true}, {"unk_token", "<unk>"}};
  root["added_tokens"] = added;
  nlohmann::json prepend = {{"type", "Prepend"}, {"prepend", space}};
  nlohmann::json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
  root["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({prepend, replace})}};
  root["pre_tokenizer"] = nullptr;
  return root.dump();
}

TEST_P(GgufVocabularies, TokenizerJsonOfTheSameVocabularyGivesTheSameIds) {
  const Tokenizer gguf = load_gguf(GetParam());
  const fs::path json_path = temp_path(std::string(GetParam()) + ".tokenizer.json");
  if (gguf.sentencepiece()) {
    auto meta = read_gguf_metadata(kFixtures / GetParam());
    ASSERT_TRUE(meta.ok());
    write_bytes(json_path, sentencepiece_json_for(gguf, meta->find("tokenizer.ggml.scores")->reals));
  } else {
    write_bytes(json_path, tokenizer_json_for(GetParam(), gguf));
  }
  auto json = Tokenizer::from_tokenizer_json(json_path);
  ASSERT_TRUE(json.ok()) << json.error().message;
  EXPECT_EQ(json->split_patterns(), gguf.split_patterns());
  const std::vector<Case> cases = read_cases(GetParam());
  for (const Case& c : cases) EXPECT_EQ(json->encode(c.text, false), gguf.encode(c.text, false)) << c.text;
  EXPECT_EQ(count_matches(*json, cases), static_cast<int>(cases.size()));
  fs::remove(json_path);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufVocabularies,
                         ::testing::Values("ggml-vocab-qwen2.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-bpe.gguf",
                                           "ggml-vocab-qwen35.gguf", "ggml-vocab-deepseek-llm.gguf",
                                           "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-llama-spm.gguf"));

TEST(Tokenizer, ReadsVocabularyFactsFromGguf) {
  const Tokenizer qwen = load_gguf("ggml-vocab-qwen2.gguf");
  EXPECT_EQ(qwen.vocab_size(), 151936u);
  EXPECT_EQ(qwen.split_patterns(), std::vector<std::string>{std::string(bpe::kQwen2Pattern)});
  EXPECT_EQ(qwen.eos_id(), 151643);
  EXPECT_EQ(qwen.find_token("<|im_start|>"), 151644);
  EXPECT_EQ(qwen.token_kind(151644), TokenKind::kControl);
  const Tokenizer gpt2 = load_gguf("ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(gpt2.vocab_size(), 50257u);
  EXPECT_EQ(gpt2.split_patterns(), std::vector<std::string>{std::string(bpe::kGpt2Pattern)});
  EXPECT_EQ(gpt2.bos_id(), 50256);
  EXPECT_EQ(gpt2.token_text(50256), "<|endoftext|>");
}

// Whether a prompt starts with BOS is the model's: the GGUF key, else
// llama.cpp's default for the vocabulary (SentencePiece and Llama 3: yes);
// a tokenizer.json says so with a post_processor template.
TEST(Tokenizer, PromptsStartWithBosWhereTheModelSaysSo) {
  EXPECT_TRUE(load_gguf("ggml-vocab-llama-spm.gguf").add_bos());
  EXPECT_EQ(load_gguf("ggml-vocab-llama-spm.gguf").bos_id(), 1);
  EXPECT_TRUE(load_gguf("ggml-vocab-llama-bpe.gguf").add_bos());  // no key: the llama3 default
  EXPECT_FALSE(load_gguf("ggml-vocab-qwen2.gguf").add_bos());
  EXPECT_FALSE(load_gguf("ggml-vocab-gpt-2.gguf").add_bos());
  // A byte-level vocabulary of GPT-2's 256 byte tokens (ids 2..257) and <s> (id 1).
  const fs::path path = temp_path("bos.tokenizer.json");
  const Tokenizer gpt2 = load_gguf("ggml-vocab-gpt-2.gguf");
  nlohmann::json vocab = nlohmann::json::object();
  for (std::int32_t id = 0; id < 256; ++id) vocab[std::string(gpt2.token_text(id))] = id + 2;
  nlohmann::json root = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                         {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}}},
                         {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}}};
  const nlohmann::json bos_first = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  const nlohmann::json sequence = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const nlohmann::json template_step = {{"type", "TemplateProcessing"}, {"single", nlohmann::json::array({bos_first, sequence})}};
  root["post_processor"] = {{"type", "Sequence"},
                            {"processors", nlohmann::json::array({nlohmann::json{{"type", "ByteLevel"}}, template_step})}};
  write_bytes(path, root.dump());
  auto with_template = Tokenizer::from_tokenizer_json(path);
  ASSERT_TRUE(with_template.ok()) << with_template.error().message;
  EXPECT_TRUE(with_template->add_bos());
  EXPECT_EQ(with_template->bos_id(), 1);
  root.erase("post_processor");
  write_bytes(path, root.dump());
  auto without = Tokenizer::from_tokenizer_json(path);
  ASSERT_TRUE(without.ok()) << without.error().message;
  EXPECT_FALSE(without->add_bos());
  fs::remove(path);
}

TEST(Tokenizer, SpecialTokensAreMatchedOnlyWhenAsked) {
  const Tokenizer qwen = load_gguf("ggml-vocab-qwen2.gguf");
  const std::string chat = "<|im_start|>user\nHi<|im_end|>";
  const Ids parsed = qwen.encode(chat, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 151644);
  EXPECT_EQ(parsed.back(), 151645);
  const Ids literal = qwen.encode(chat, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 151644), 0);
  EXPECT_GT(literal.size(), parsed.size());
  EXPECT_EQ(qwen.decode(parsed), chat);
  EXPECT_EQ(qwen.decode(literal), chat);
  EXPECT_EQ(qwen.decode(parsed, /*skip_special=*/true), "user\nHi");
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const std::size_t n = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(StreamDecoder, EmitsOnlyWholeCharacters) {
  const Tokenizer qwen = load_gguf("ggml-vocab-qwen2.gguf");
  const std::string text = "emoji 🦙🚀 and Khmer ស្រុក and 4 ½ months";
  const Ids ids = qwen.encode(text);
  StreamDecoder stream(qwen);
  std::string joined;
  int held_back = 0;
  for (std::int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "after id " << id;
    held_back += is_valid_utf8(qwen.token_bytes(id)) ? 0 : 1;
    joined += piece;
  }
  EXPECT_GT(held_back, 0) << "the text should split some character across tokens";
  EXPECT_EQ(stream.flush(), "");
  EXPECT_EQ(joined, text);

  // A stream that stops inside a character ends with one U+FFFD.
  const Ids hwair = qwen.encode("\xF0\x90\x8D\x88");  // U+10348, rare: several tokens
  ASSERT_GT(hwair.size(), 1u);
  StreamDecoder cut(qwen);
  EXPECT_EQ(cut.push(hwair[0]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, TokenizerJsonAppliesNfcLikeQwen2) {
  const Tokenizer gguf = load_gguf("ggml-vocab-qwen2.gguf");
  const fs::path json_path = temp_path("nfc.tokenizer.json");
  write_bytes(json_path, tokenizer_json_for("ggml-vocab-qwen2.gguf", gguf));
  auto json = Tokenizer::from_tokenizer_json(json_path);
  ASSERT_TRUE(json.ok()) << json.error().message;
  // e + U+0301 composes to é; Hangul jamo compose to a syllable; U+212B
  // (Angstrom sign) becomes U+00C5; the order of two marks is canonical.
  EXPECT_EQ(json->encode("Cafe\xCC\x81"), json->encode("Caf\xC3\xA9"));
  EXPECT_EQ(json->encode("\xE1\x84\x80\xE1\x85\xA1"), json->encode("\xEA\xB0\x80"));
  EXPECT_EQ(json->encode("\xE2\x84\xAB"), json->encode("\xC3\x85"));
  EXPECT_EQ(json->encode("a\xCC\xA3\xCC\x87"), json->encode("a\xCC\x87\xCC\xA3"));
  EXPECT_NE(gguf.encode("Cafe\xCC\x81"), gguf.encode("Caf\xC3\xA9")) << "llama.cpp applies no NFC";
  fs::remove(json_path);
}

TEST(Tokenizer, EncodesLongTextQuickly) {
  const Tokenizer qwen = load_gguf("ggml-vocab-qwen2.gguf");
  const std::string sample = slurp(kFixtures / "ggml-vocab-qwen2.gguf.inp");
  std::string text;
  while (text.size() < (4u << 20)) text += sample;
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = qwen.encode(text, false);
  const double seconds = coli::seconds_since(start);
  std::printf("encoded %zu bytes into %zu tokens in %.3f s: %.0f tokens/s\n", text.size(), ids.size(), seconds,
              static_cast<double>(ids.size()) / seconds);
  EXPECT_EQ(qwen.decode(ids), text);
  EXPECT_LT(seconds, 30.0) << "encode is far too slow for long prompts";
}

// ---------------------------------------------------------------- errors

TEST(TokenizerErrors, MissingFilesNameThePath) {
  for (auto load : {&Tokenizer::from_gguf, &Tokenizer::from_tokenizer_json}) {
    auto missing = load(kFixtures / "no-such-file");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("no-such-file"), std::string::npos) << missing.error().message;
  }
}

TEST(TokenizerErrors, TruncatedGgufIsAnErrorAtEveryCut) {
  const std::string whole = slurp(kFixtures / "ggml-vocab-gpt-2.gguf");
  const fs::path cut_path = temp_path("cut.gguf");
  std::vector<std::size_t> cuts = {0, 3, 4, 7, 8, 23, 24, 30, 60, 61, 100};
  for (std::size_t cut = 200; cut < whole.size(); cut += 99991) cuts.push_back(cut);
  cuts.push_back(whole.size() - 1);
  for (std::size_t cut : cuts) {
    write_bytes(cut_path, std::string_view(whole).substr(0, cut));
    auto tokenizer = Tokenizer::from_gguf(cut_path);
    ASSERT_FALSE(tokenizer.ok()) << "cut at " << cut;
    const std::string& message = tokenizer.error().message;
    EXPECT_NE(message.find("cut.gguf"), std::string::npos) << message;
    EXPECT_NE(message.find("offset"), std::string::npos) << message;
  }
  fs::remove(cut_path);
}

TEST(TokenizerErrors, WrongMagicAndCorruptCountsAreRefused) {
  std::string bytes = slurp(kFixtures / "ggml-vocab-gpt-2.gguf");
  const fs::path path = temp_path("bad.gguf");
  std::string wrong_magic = bytes;
  wrong_magic[0] = 'X';
  write_bytes(path, wrong_magic);
  auto tokenizer = Tokenizer::from_gguf(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().message.find("not a GGUF file"), std::string::npos) << tokenizer.error().message;

  // Header + one key whose string array claims 2^60 elements.
  std::string corrupt("GGUF", 4);
  const auto put = [&](std::uint64_t value, int size) {
    for (int i = 0; i < size; ++i) corrupt += static_cast<char>((value >> (8 * i)) & 0xFF);
  };
  put(3, 4), put(0, 8), put(1, 8);
  const std::string key = "tokenizer.ggml.tokens";
  put(key.size(), 8), corrupt += key;
  put(9, 4), put(8, 4), put(std::uint64_t{1} << 60, 8);
  write_bytes(path, corrupt);
  tokenizer = Tokenizer::from_gguf(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().message.find("tokenizer.ggml.tokens"), std::string::npos) << tokenizer.error().message;

  // A header claiming 2^62 key/values in a 24-byte file is refused before the first key.
  corrupt = std::string("GGUF", 4);  // `put` appends to it
  put(3, 4), put(0, 8), put(std::uint64_t{1} << 62, 8);
  write_bytes(path, corrupt);
  tokenizer = Tokenizer::from_gguf(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().message.find("key/value count 4611686018427387904 cannot fit in the 0 bytes left"),
            std::string::npos)
      << tokenizer.error().message;
  fs::remove(path);
}

// A Split with a literal String pattern and Digits are regexes too: the
// string is matched literally (no regex syntax), Digits cuts digit runs.
TEST(Tokenizer, SplitStringsAreLiteralAndDigitsSplitNumbers) {
  const Tokenizer gpt2 = load_gguf("ggml-vocab-gpt-2.gguf");
  const fs::path path = temp_path("split-string.tokenizer.json");
  nlohmann::json vocab = nlohmann::json::object();
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(gpt2.vocab_size()); ++id) vocab[std::string(gpt2.token_text(id))] = id;
  auto write = [&](nlohmann::json pre) {
    write_bytes(path, nlohmann::json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                                     {"pre_tokenizer", pre}}.dump());
    auto tokenizer = Tokenizer::from_tokenizer_json(path);
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.error().message;
    return std::move(tokenizer).value();
  };
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"use_regex", false}};
  const Tokenizer dots = write({{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"String", "."}}},
                                                                          {"behavior", "Isolated"}}, byte_level}}});
  // No merges: every word is its bytes; "." cut out literally, not as "any character".
  EXPECT_EQ(dots.encode("a.b"), (Ids{*gpt2.find_token("a"), *gpt2.find_token("."), *gpt2.find_token("b")}));
  const Tokenizer digits = write({{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}});
  EXPECT_EQ(digits.split_patterns(), std::vector<std::string>{"\\p{N}"});
  EXPECT_EQ(digits.encode("12"), (Ids{*gpt2.find_token("1"), *gpt2.find_token("2")}));
  fs::remove(path);
}

TEST(TokenizerErrors, UnknownGgufPreTokenizerIsRefusedByName) {
  std::string bytes = slurp(kFixtures / "ggml-vocab-gpt-2.gguf");
  const std::size_t at = bytes.find("gpt-2", bytes.find("tokenizer.ggml.pre"));  // that key's value
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "zzz-9");
  const fs::path path = temp_path("unknown-pre.gguf");
  write_bytes(path, bytes);
  auto tokenizer = Tokenizer::from_gguf(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.error().message.find("tokenizer.ggml.pre 'zzz-9' is not supported (known: gpt-2"), std::string::npos)
      << tokenizer.error().message;
  EXPECT_NE(tokenizer.error().message.find("llama-bpe"), std::string::npos);
  fs::remove(path);
}

TEST(TokenizerErrors, UnsupportedTokenizerJsonSaysWhy) {
  const fs::path path = temp_path("unigram.json");
  write_bytes(path, R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
  auto unigram = Tokenizer::from_tokenizer_json(path);
  ASSERT_FALSE(unigram.ok());
  EXPECT_NE(unigram.error().message.find("Unigram"), std::string::npos) << unigram.error().message;

  write_bytes(path, R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                        "pre_tokenizer": {"type": "Metaspace"}})");
  auto metaspace = Tokenizer::from_tokenizer_json(path);
  ASSERT_FALSE(metaspace.ok());
  EXPECT_NE(metaspace.error().message.find("Metaspace"), std::string::npos) << metaspace.error().message;

  // A split regex PCRE2 cannot compile, and a Split behavior other than Isolated, are named.
  write_bytes(path, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                          {"type": "Split", "pattern": {"Regex": "[z-a]+"}, "behavior": "Isolated", "invert": false},
                          {"type": "ByteLevel", "use_regex": false}]}})");
  auto bad_regex = Tokenizer::from_tokenizer_json(path);
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_NE(bad_regex.error().message.find("regex '[z-a]+' does not compile"), std::string::npos) << bad_regex.error().message;
  write_bytes(path, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious"}})");
  auto merged = Tokenizer::from_tokenizer_json(path);
  ASSERT_FALSE(merged.ok());
  EXPECT_NE(merged.error().message.find("behavior MergedWithPrevious"), std::string::npos) << merged.error().message;

  write_bytes(path, "{not json");
  auto broken = Tokenizer::from_tokenizer_json(path);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("not valid JSON"), std::string::npos);
  fs::remove(path);
}

// Issue 12: a token id of 2^31-2 in a small tokenizer.json asked for a
// 2^31-entry table (64 GiB), and a float id was converted to an integer with
// undefined behaviour. Ids are integers bounded by what the file lists.
TEST(TokenizerErrors, TokenIdsMustBeIntegersWithinWhatTheFileLists) {
  const fs::path path = temp_path("ids.json");
  const auto refusal = [&](const std::string& vocab, const std::string& added = "[]") {
    write_bytes(path, R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []},
                          "pre_tokenizer": {"type": "ByteLevel", "use_regex": true}, "added_tokens": )" + added + "}");
    auto tokenizer = Tokenizer::from_tokenizer_json(path);
    return tokenizer.ok() ? std::string("accepted") : tokenizer.error().message;
  };
  std::string huge = refusal(R"({"a": 0, "b": 2147483646})");
  EXPECT_NE(huge.find("ids.json"), std::string::npos) << huge;
  EXPECT_NE(huge.find("vocab token 'b' has id 2147483646; ids must be in [0, 1028)"), std::string::npos) << huge;
  std::string added = refusal(R"({"a": 0})", R"([{"id": 4000000000, "content": "<x>"}])");
  EXPECT_NE(added.find("added token '<x>' has id 4000000000"), std::string::npos) << added;
  for (const char* id : {"1.5", "1e300", "-1e300", "\"7\"", "null"}) {
    const std::string message = refusal(std::string(R"({"a": )") + id + "}");
    EXPECT_NE(message.find("vocab token 'a' has id"), std::string::npos) << id << ": " << message;
    EXPECT_NE(message.find("not an integer"), std::string::npos) << id << ": " << message;
  }
  EXPECT_NE(refusal(R"({"a": -1})").find("ids must be in [0, 1026)"), std::string::npos);
  fs::remove(path);
}

}  // namespace
}  // namespace coli

namespace coli {
namespace {

// The demo model's own tokenizer (trained with Hugging Face tokenizers on the
// Python documentation, tests/fixtures/models/trained-demo): the ids
// tokenizers itself gave for the first 300 lines of the held-out text.
TEST(Tokenizer, TheTrainedDemoTokenizerGivesTheIdsHuggingFaceTokenizersGave) {
  const std::filesystem::path dir = std::filesystem::path(COLI_FIXTURES_DIR) / "models" / "trained-demo";
  auto tokenizer = Tokenizer::from_file(dir / "tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  std::ifstream file(dir / "tokenizer_vectors.json");
  const nlohmann::json vectors = nlohmann::json::parse(file);
  ASSERT_EQ(vectors.at("lines").size(), 300u);
  for (const nlohmann::json& line : vectors.at("lines")) {
    const std::string text = line.at("text").get<std::string>();
    const auto expected = line.at("ids").get<std::vector<std::int32_t>>();
    EXPECT_EQ(tokenizer->encode(text), expected) << text;
    EXPECT_EQ(tokenizer->decode(expected), text);
  }
  EXPECT_EQ(tokenizer->find_token("<|endoftext|>"), std::optional<std::int32_t>(0));
}

}  // namespace
}  // namespace coli
