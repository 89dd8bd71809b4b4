// BPE tokenizers: byte-level (GPT-2, OLMoE, Qwen2/3/3.5, Llama 3, DeepSeek)
// and SentencePiece-style with byte fallback (Llama 2, Mistral, Mixtral).
//
// A vocabulary comes from a Hugging Face tokenizer.json or from the tokenizer
// keys of a GGUF file (llama.cpp's "gpt2" and "llama" models). Encoding is: added/special
// tokens are cut out first, the rest is split into words by the model's
// pre-tokenizer regexes (PCRE2, see pre_tokenizer.h), every word's bytes are
// mapped to GPT-2's printable byte alphabet and merged by rank.
//
// Errors (all returned as Result, never thrown or fatal):
//   - the file is missing or unreadable (message names the path and OS reason);
//   - a GGUF file is truncated or corrupt (names the file, byte offset and key);
//   - the tokenizer is not byte-level BPE (a Unigram/WordPiece tokenizer.json,
//     a GGUF whose tokenizer.ggml.model is "llama" or "bert"), or its
//     pre-tokenizer / normaliser is one this code does not implement (a GGUF
//     tokenizer.ggml.pre name it does not know, a tokenizer.json
//     pre-tokenizer type other than Split, ByteLevel, Digits and Sequence):
//     the message says which value was found;
//   - the vocabulary is inconsistent (a merge naming an unknown token, ids out
//     of range, a byte without its token).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"

namespace coli {

// What a token is for (llama.cpp's token_type, HF's added_tokens "special").
enum class TokenKind : std::uint8_t {
  kNormal,       // a BPE token: its text is in the byte-level alphabet
  kControl,      // special token (<|im_start|>): matched only when parse_special
  kUserDefined,  // added, non-special token: always matched, literal text
  kUnused,       // padding / unused slot: never produced by encode
};

namespace bpe {
struct TokenizerData;  // immutable tables, shared between copies
}
struct GgufMetadata;  // gguf_metadata.h

// Cheap to copy (the tables are shared and immutable); const methods are
// safe to call from several threads at once.
class Tokenizer {
 public:
  static Result<Tokenizer> from_tokenizer_json(const std::filesystem::path& path);
  static Result<Tokenizer> from_gguf(const std::filesystem::path& path);
  // The same from a file's contents in memory (a container's runtime
  // files); `origin` names it in errors.
  static Result<Tokenizer> from_tokenizer_json_text(std::string_view text, const std::string& origin);
  static Result<Tokenizer> from_gguf_bytes(std::string_view bytes, const std::string& origin);
  // Either kind, told by the file's name: a GGUF vocabulary when it ends in
  // ".gguf" (a container carries one as "tokenizer.gguf"), else a tokenizer.json.
  static Result<Tokenizer> from_file(const std::filesystem::path& path);
  static Result<Tokenizer> from_file_bytes(const std::filesystem::path& file_name, std::string_view bytes,
                                           const std::string& origin);

  // Token ids for `text`. With parse_special, control tokens written in the
  // text ("<|im_end|>") become their ids; without, they are encoded as plain
  // text. User-defined added tokens are always matched (as HF and llama.cpp do).
  // Never adds BOS/EOS. Bytes that are not valid UTF-8 are encoded byte-wise.
  std::vector<std::int32_t> encode(std::string_view text, bool parse_special = true) const;

  // The bytes the ids stand for, concatenated. Ids out of range are skipped;
  // with skip_special, control tokens are left out. The result is UTF-8 only
  // when the ids form whole characters (StreamDecoder handles the pieces).
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token ("" for an id out of range).
  std::string_view token_bytes(std::int32_t id) const;
  // The token as written in the vocabulary (byte-level alphabet, "Ġthe").
  std::string_view token_text(std::int32_t id) const;
  std::optional<std::int32_t> find_token(std::string_view vocabulary_text) const;
  TokenKind token_kind(std::int32_t id) const;

  std::size_t vocab_size() const;
  // The pre-tokenizer's split regexes, in the order they run (none for
  // SentencePiece BPE).
  const std::vector<std::string>& split_patterns() const;
  // SentencePiece BPE: encode() puts a space (U+2581) before the text, so
  // decode(encode(text)) is " " + text; the first generated piece after a
  // prompt carries its own.
  bool adds_space_prefix() const;
  bool sentencepiece() const;
  // From the GGUF keys tokenizer.ggml.bos/eos_token_id; tokenizer.json does not
  // carry them (they live in tokenizer_config.json / config.json): set them.
  std::optional<std::int32_t> bos_id() const { return bos_id_; }
  std::optional<std::int32_t> eos_id() const { return eos_id_; }
  void set_bos_id(std::optional<std::int32_t> id) { bos_id_ = id; }
  void set_eos_id(std::optional<std::int32_t> id) { eos_id_ = id; }
  // Whether a prompt starts with BOS, as the model was trained (GGUF
  // tokenizer.ggml.add_bos_token, else llama.cpp's default for the
  // vocabulary; tokenizer.json: a post_processor whose single-sequence
  // template starts with a special token). encode() never adds it.
  bool add_bos() const { return add_bos_ && bos_id_.has_value(); }
  void set_add_bos(bool add) { add_bos_ = add; }
  // The model's Jinja chat template where the file carries one (GGUF
  // tokenizer.chat_template); "" otherwise (tokenizer_config.json holds it).
  const std::string& chat_template() const { return chat_template_; }

 private:
  explicit Tokenizer(std::shared_ptr<const bpe::TokenizerData> data) : data_(std::move(data)) {}
  static Result<Tokenizer> from_gguf_metadata(const Result<GgufMetadata>& meta);

  std::shared_ptr<const bpe::TokenizerData> data_;
  std::optional<std::int32_t> bos_id_;
  std::optional<std::int32_t> eos_id_;
  bool add_bos_ = false;
  std::string chat_template_;
};

// Turns a stream of generated ids into text that is always whole UTF-8: bytes
// of a character split across tokens are held back until it is complete.
// Keeps a pointer to the tokenizer, which must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // Text that became complete with this token (may be empty).
  std::string push(std::int32_t id);
  // Whatever is still held (an unfinished character at the end of the
  // stream) as one U+FFFD replacement character; resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace coli
