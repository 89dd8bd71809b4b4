#include "coli/tokenizer/gguf_metadata.h"

#include <bit>
#include <cstring>
#include <type_traits>
#include <fstream>
#include <sstream>
#include <system_error>

namespace coli {
namespace {

constexpr std::uint32_t kMaxVersion = 3;

// Sequential little-endian reader over a file of known size. `context` names
// the key being read, so every error says where it happened.
class GgufCursor {
 public:
  GgufCursor(std::istream& in, std::string origin, std::uint64_t size)
      : in_(in), origin_(std::move(origin)), size_(size) {}

  std::string context = "header";

  Error error(const std::string& what) const {
    return make_error(origin_ + ": " + what + " at offset " + std::to_string(offset_) + " (reading " +
                      context + ")");
  }
  std::uint64_t remaining() const { return size_ - offset_; }

  Status read_bytes(void* out, std::uint64_t n, const char* what) {
    if (n > remaining()) {
      return error(std::string("file ends early: ") + what + " needs " + std::to_string(n) + " bytes, " +
                   std::to_string(remaining()) + " left; the file is truncated or corrupt");
    }
    if (n > 0 && !in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n))) {
      return error(std::string("read failed for ") + what);
    }
    offset_ += n;
    return Ok{};
  }

  template <class T>
  Result<T> read_scalar(const char* what) {
    unsigned char buffer[sizeof(T)];
    if (Status s = read_bytes(buffer, sizeof(T), what); !s) return s.error();
    std::uint64_t bits = 0;  // assemble little-endian regardless of the host
    for (std::size_t i = sizeof(T); i-- > 0;) bits = (bits << 8) | buffer[i];
    if constexpr (std::is_same_v<T, float>) {
      const auto narrow = static_cast<std::uint32_t>(bits);
      return std::bit_cast<float>(narrow);
    } else if constexpr (std::is_same_v<T, double>) {
      return std::bit_cast<double>(bits);
    } else {
      return static_cast<T>(bits);  // modular, so signed values come out right
    }
  }

  Result<std::string> read_string(const char* what) {
    auto length = read_scalar<std::uint64_t>(what);
    if (!length) return length.error();
    if (*length > remaining()) {
      return error(std::string(what) + " claims " + std::to_string(*length) + " bytes but only " +
                   std::to_string(remaining()) + " remain; the file is truncated or corrupt");
    }
    std::string text(*length, '\0');
    if (Status s = read_bytes(text.data(), *length, what); !s) return s.error();
    return text;
  }

 private:
  std::istream& in_;
  std::string origin_;
  std::uint64_t size_;
  std::uint64_t offset_ = 0;
};

std::uint64_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;  // at least its length
    case GgufType::kArray: return 12;
  }
  return 0;
}

Result<GgufType> read_type(GgufCursor& cursor, const char* what) {
  auto raw = cursor.read_scalar<std::uint32_t>(what);
  if (!raw) return raw.error();
  if (*raw > static_cast<std::uint32_t>(GgufType::kFloat64)) {
    return cursor.error("unknown value type " + std::to_string(*raw));
  }
  return static_cast<GgufType>(*raw);
}

// Reads one non-array value of `type` into the scalar members of `value`.
Status read_scalar_value(GgufCursor& c, GgufType type, std::int64_t& integer, double& real, std::string& text) {
  auto take = [&](auto result, auto& target) -> Status {
    if (!result) return result.error();
    target = static_cast<std::remove_reference_t<decltype(target)>>(*result);
    return Ok{};
  };
  switch (type) {
    case GgufType::kUint8: return take(c.read_scalar<std::uint8_t>("uint8"), integer);
    case GgufType::kInt8: return take(c.read_scalar<std::int8_t>("int8"), integer);
    case GgufType::kBool: return take(c.read_scalar<std::uint8_t>("bool"), integer);
    case GgufType::kUint16: return take(c.read_scalar<std::uint16_t>("uint16"), integer);
    case GgufType::kInt16: return take(c.read_scalar<std::int16_t>("int16"), integer);
    case GgufType::kUint32: return take(c.read_scalar<std::uint32_t>("uint32"), integer);
    case GgufType::kInt32: return take(c.read_scalar<std::int32_t>("int32"), integer);
    case GgufType::kUint64: return take(c.read_scalar<std::uint64_t>("uint64"), integer);
    case GgufType::kInt64: return take(c.read_scalar<std::int64_t>("int64"), integer);
    case GgufType::kFloat32: return take(c.read_scalar<float>("float32"), real);
    case GgufType::kFloat64: return take(c.read_scalar<double>("float64"), real);
    case GgufType::kString: return take(c.read_string("string"), text);
    case GgufType::kArray: break;
  }
  return c.error("nested array");
}

Status read_array(GgufCursor& c, GgufValue& value) {
  auto element = read_type(c, "array element type");
  if (!element) return element.error();
  if (*element == GgufType::kArray) return c.error("arrays of arrays are not supported");
  auto count = c.read_scalar<std::uint64_t>("array length");
  if (!count) return count.error();
  // Each element takes at least scalar_size bytes: refuse impossible counts
  // before reserving memory for them.
  if (*count > c.remaining() / scalar_size(*element)) {
    return c.error("array of " + std::to_string(*count) + " " + std::string(gguf_type_name(*element)) +
                   " cannot fit in the " + std::to_string(c.remaining()) + " bytes left; truncated or corrupt");
  }
  value.element_type = *element;
  for (std::uint64_t i = 0; i < *count; ++i) {
    std::int64_t integer = 0;
    double real = 0;
    std::string text;
    if (Status s = read_scalar_value(c, *element, integer, real, text); !s) return s;
    if (*element == GgufType::kString) {
      value.strings.push_back(std::move(text));
    } else if (*element == GgufType::kFloat32 || *element == GgufType::kFloat64) {
      value.reals.push_back(real);
    } else {
      value.integers.push_back(integer);
    }
  }
  return Ok{};
}

Status read_header(GgufCursor& c, GgufMetadata& meta, std::uint64_t& kv_count) {
  char magic[4];
  if (Status s = c.read_bytes(magic, 4, "magic"); !s) return s;
  if (std::memcmp(magic, "GGUF", 4) != 0) return c.error("not a GGUF file (the first 4 bytes are not \"GGUF\")");
  auto version = c.read_scalar<std::uint32_t>("version");
  if (!version) return version.error();
  if (*version < 2 || *version > kMaxVersion) {
    return c.error("unsupported GGUF version " + std::to_string(*version) + " (this reader knows 2 and 3; a " +
                   "huge number means a big-endian file)");
  }
  meta.version = *version;
  auto tensors = c.read_scalar<std::uint64_t>("tensor count");
  if (!tensors) return tensors.error();
  meta.tensor_count = *tensors;
  auto kvs = c.read_scalar<std::uint64_t>("metadata key/value count");
  if (!kvs) return kvs.error();
  // Each key/value takes at least its name's length, its type and one byte.
  constexpr std::uint64_t kMinKeyValueBytes = 8 + 4 + 1;
  if (*kvs > c.remaining() / kMinKeyValueBytes) {
    return c.error("metadata key/value count " + std::to_string(*kvs) + " cannot fit in the " +
                   std::to_string(c.remaining()) + " bytes left; truncated or corrupt");
  }
  kv_count = *kvs;
  return Ok{};
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  static constexpr std::string_view kNames[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                                "bool", "string", "array", "uint64", "int64", "float64"};
  const auto index = static_cast<std::uint32_t>(type);
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

bool GgufValue::is_integer() const {
  return type != GgufType::kFloat32 && type != GgufType::kFloat64 && type != GgufType::kString &&
         type != GgufType::kArray;
}

const GgufValue* GgufMetadata::find(std::string_view key) const {
  const auto it = values.find(key);
  return it == values.end() ? nullptr : &it->second;
}

namespace {

Result<GgufMetadata> read_gguf_stream(std::istream& in, std::string origin, std::uint64_t size) {
  GgufMetadata meta;
  meta.origin = std::move(origin);
  GgufCursor cursor(in, meta.origin, size);
  std::uint64_t kv_count = 0;
  if (Status s = read_header(cursor, meta, kv_count); !s) return s.error();
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    cursor.context = "key " + std::to_string(i);
    auto key = cursor.read_string("key name");
    if (!key) return key.error();
    cursor.context = "key '" + *key + "'";
    auto type = read_type(cursor, "value type");
    if (!type) return type.error();
    GgufValue value;
    value.type = *type;
    const Status read = *type == GgufType::kArray ? read_array(cursor, value)
                                                  : read_scalar_value(cursor, *type, value.integer, value.real,
                                                                      value.text);
    if (!read) return read.error();
    if (!meta.values.emplace(*key, std::move(value)).second) return cursor.error("duplicate key");
  }
  return meta;
}

}  // namespace

Result<GgufMetadata> read_gguf_metadata(const std::filesystem::path& path) {
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return make_error("cannot read GGUF file " + path.string() + ": " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open GGUF file " + path.string());
  return read_gguf_stream(in, path.string(), size);
}

Result<GgufMetadata> read_gguf_metadata(std::string_view bytes, const std::string& origin) {
  std::istringstream in{std::string(bytes)};
  return read_gguf_stream(in, origin, bytes.size());
}

}  // namespace coli
