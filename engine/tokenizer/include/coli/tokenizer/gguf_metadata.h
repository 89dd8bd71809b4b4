// GGUF metadata reader (header and key/value pairs; tensor infos are not
// read). Format: ggml/docs/gguf.md, versions 2 and 3, little-endian.
//
// Every read is bounds-checked against the file size before anything is
// allocated, so a truncated or corrupt file gives an Error that names the
// file, the byte offset and the key being read, never a crash or a huge
// allocation. Big-endian files and version 1 are refused with a clear message.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"

namespace coli {

enum class GgufType : std::uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5,
  kFloat32 = 6, kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

std::string_view gguf_type_name(GgufType type);

// One value. Which member holds it follows from `type` (and `element_type`
// for arrays): integers and bools in `integer` / `integers` (uint64 values
// above INT64_MAX wrap), floats in `real` / `reals`, strings in `text` /
// `strings`. Arrays of arrays are refused by the reader.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType element_type = GgufType::kUint8;
  std::int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<std::int64_t> integers;
  std::vector<double> reals;
  std::vector<std::string> strings;

  bool is_integer() const;  // any integer type or bool
  bool is_array_of(GgufType element) const { return type == GgufType::kArray && element_type == element; }
};

struct GgufMetadata {
  std::string origin;  // the file, for messages
  std::uint32_t version = 0;
  std::uint64_t tensor_count = 0;
  std::map<std::string, GgufValue, std::less<>> values;

  const GgufValue* find(std::string_view key) const;
};

Result<GgufMetadata> read_gguf_metadata(const std::filesystem::path& path);
// The same from a file's bytes in memory (a container's tokenizer.gguf); `origin` names it in errors.
Result<GgufMetadata> read_gguf_metadata(std::string_view bytes, const std::string& origin);

}  // namespace coli
