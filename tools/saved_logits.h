// A base model's logits saved once (`coli perplexity --save-logits FILE`), so
// later runs compare a quantised model against them (`--base FILE`) without
// loading the f32 model beside it: llama-perplexity's --kl-divergence-base.
// The file: one JSON line (the header: what was saved, of which tokens), then
// one row of `vocab` float32 logits per scored token, window after window.
// Written atomically; read back with its size and header checked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>

#include "coli/base/pending_file.h"
#include "coli/base/result.h"

namespace coli::tools {

struct SavedLogitsHeader {
  int vocab = 0;
  int ctx = 0;
  int windows = 0;
  int first_scored = 0;
  std::string tokens_hash;  // tokens_hash() of the whole text's tokens
  std::string experts, dense;  // the saving model's formats (coli perplexity --record needs f32 / source)
  std::uint64_t rows() const { return static_cast<std::uint64_t>(windows) * static_cast<std::uint64_t>(ctx - first_scored); }
};

// XXH3-64 of the token ids, in hex: a base saved for other tokens (another
// text, another tokenizer) is refused.
std::string tokens_hash(std::span<const std::int32_t> tokens);

// Whether `path` starts as a saved-logits file does (else: a container).
bool is_saved_logits(const std::filesystem::path& path);

class SavedLogitsWriter {
 public:
  static Result<SavedLogitsWriter> create(const std::filesystem::path& path, const SavedLogitsHeader& header);
  Status append(std::span<const float> logits);
  // Errors: fewer rows than the header promised (the file is not published).
  Status commit();

 private:
  SavedLogitsWriter(PendingFile file, SavedLogitsHeader header) : file_(std::move(file)), header_(std::move(header)) {}
  PendingFile file_;
  SavedLogitsHeader header_;
  std::uint64_t rows_ = 0;
};

class SavedLogitsReader {
 public:
  // Errors name the file: not one of these, a header field missing, a size
  // that does not match the header (a cut-off copy).
  static Result<SavedLogitsReader> open(const std::filesystem::path& path);
  const SavedLogitsHeader& header() const { return header_; }
  // The next row into `row` (vocab floats).
  Status next(std::span<float> row);

 private:
  SavedLogitsReader(std::filesystem::path path, std::ifstream stream, SavedLogitsHeader header)
      : path_(std::move(path)), stream_(std::move(stream)), header_(std::move(header)) {}
  std::filesystem::path path_;
  std::ifstream stream_;
  SavedLogitsHeader header_;
};

}  // namespace coli::tools
