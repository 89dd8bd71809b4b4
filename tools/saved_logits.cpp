#include "saved_logits.h"

#include <xxhash.h>

#include <cstdint>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace coli::tools {

namespace {

constexpr const char* kMagicKey = "coli_saved_logits";  // the header's first key, its value the schema version
constexpr int kSchemaVersion = 1;
constexpr std::size_t kMaxHeaderBytes = 1 << 16;

// A string field, or "" when absent or of another type (nlohmann's value()
// throws on a type mismatch: a hostile file must get an error, not an exception).
std::string text_field(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string tokens_hash(std::span<const std::int32_t> tokens) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(tokens.data(), tokens.size_bytes())));
  return hex;
}

bool is_saved_logits(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::string start(32, '\0');
  file.read(start.data(), static_cast<std::streamsize>(start.size()));
  return start.rfind(std::string("{\"") + kMagicKey + "\"", 0) == 0;
}

Result<SavedLogitsWriter> SavedLogitsWriter::create(const std::filesystem::path& path, const SavedLogitsHeader& h) {
  auto file = PendingFile::create(path);
  if (!file) return file.error();
  // nlohmann's ordered_json keeps the magic key first, where is_saved_logits looks.
  const nlohmann::ordered_json header = {{kMagicKey, kSchemaVersion}, {"vocab", h.vocab}, {"ctx", h.ctx},
                                         {"windows", h.windows}, {"first_scored", h.first_scored},
                                         {"tokens_hash", h.tokens_hash}, {"experts", h.experts}, {"dense", h.dense}};
  if (Status s = file->write_all(header.dump() + "\n"); !s) return s.error();
  return SavedLogitsWriter(std::move(*file), h);
}

Status SavedLogitsWriter::append(std::span<const float> logits) {
  if (logits.size() != static_cast<std::size_t>(header_.vocab)) return make_error("a logits row of the wrong width");
  ++rows_;
  return file_.write_all(std::string_view(reinterpret_cast<const char*>(logits.data()), logits.size_bytes()));
}

Status SavedLogitsWriter::commit() {
  if (rows_ != header_.rows()) {
    return make_error("wrote " + std::to_string(rows_) + " rows of " + std::to_string(header_.rows()) + ": not published");
  }
  return file_.commit();
}

Result<SavedLogitsReader> SavedLogitsReader::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::ifstream stream(path, std::ios::binary);
  std::string line;
  if (!stream || !std::getline(stream, line) || line.size() > kMaxHeaderBytes) {
    return make_error(name + " is not a saved-logits file (coli perplexity --save-logits writes them)");
  }
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  const auto magic = j.is_object() ? j.find(kMagicKey) : j.end();
  if (!j.is_object() || magic == j.end() || !magic->is_number_integer() || magic->get<std::int64_t>() != kSchemaVersion) {
    return make_error(name + ": not a saved-logits file of schema version " + std::to_string(kSchemaVersion));
  }
  SavedLogitsHeader h;
  for (auto [key, target] : {std::pair{"vocab", &h.vocab}, std::pair{"ctx", &h.ctx}, std::pair{"windows", &h.windows},
                             std::pair{"first_scored", &h.first_scored}}) {
    if (!j.contains(key) || !j.at(key).is_number_integer() || j.at(key).get<int>() <= 0) {
      return make_error(name + ": header field " + key + " must be a positive integer");
    }
    *target = j.at(key).get<int>();
  }
  if (h.first_scored >= h.ctx) return make_error(name + ": header field first_scored must be below ctx");
  h.tokens_hash = text_field(j, "tokens_hash");
  h.experts = text_field(j, "experts");
  h.dense = text_field(j, "dense");
  // The rows the header promises, without overflow: the payload must be exactly rows x vocab floats.
  std::error_code error;
  const std::uint64_t size = std::filesystem::file_size(path, error);
  const std::uint64_t header_bytes = line.size() + 1, row_bytes = static_cast<std::uint64_t>(h.vocab) * sizeof(float);
  if (error || size < header_bytes || (size - header_bytes) % row_bytes != 0 || (size - header_bytes) / row_bytes != h.rows()) {
    return make_error(name + " is " + std::to_string(size) + " bytes where its header promises " +
                      std::to_string(h.rows()) + " rows of " + std::to_string(h.vocab) + " floats (cut off? save it again)");
  }
  return SavedLogitsReader(path, std::move(stream), std::move(h));
}

Status SavedLogitsReader::next(std::span<float> row) {
  if (row.size() != static_cast<std::size_t>(header_.vocab)) return make_error(path_.string() + ": a row of the wrong width");
  if (!stream_.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(row.size_bytes()))) {
    return make_error(path_.string() + ": ran out of rows");
  }
  return Ok{};
}

}  // namespace coli::tools
