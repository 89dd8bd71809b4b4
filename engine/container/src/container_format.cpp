#include "container_format.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "coli/base/base64.h"

namespace coli::container::format {

using nlohmann::json;

struct Checksum::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

Checksum::Checksum() : state_(std::make_unique<State>()) { XXH3_64bits_reset(state_->xxh); }
Checksum::~Checksum() = default;

void Checksum::update(std::span<const std::byte> bytes) { XXH3_64bits_update(state_->xxh, bytes.data(), bytes.size()); }

void Checksum::update_zeros(std::uint64_t count) {
  static constexpr std::array<std::byte, kAlignment> kZeros{};
  while (count > 0) {
    const std::uint64_t n = std::min<std::uint64_t>(count, kZeros.size());
    update(std::span(kZeros.data(), n));
    count -= n;
  }
}

std::uint64_t Checksum::digest() const { return XXH3_64bits_digest(state_->xxh); }

std::uint64_t checksum_of(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string checksum_hex(std::uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(checksum));
  return text;
}

std::optional<std::uint64_t> parse_checksum_hex(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value << 4 | static_cast<std::uint64_t>(digit);
  }
  return value;
}

json index_to_json(const ContainerIndex& index, const ChecksumTable& table) {
  json tensors = json::array();
  for (const TensorEntry& t : index.tensors) {
    tensors.push_back({{"name", t.name}, {"dtype", traits(t.dtype).container_dtype}, {"shape", t.shape}, {"offset", t.offset},
                       {"bytes", t.bytes}});
  }
  json parts = json::array();
  for (const ExpertPart& p : index.experts.parts) {
    parts.push_back({{"name", p.name}, {"rows", p.rows}, {"cols", p.cols}, {"weights_offset", p.weights_offset},
                     {"weights_bytes", p.weights_bytes}, {"scales_offset", p.scales_offset},
                     {"scales_bytes", p.scales_bytes}});
  }
  const ExpertLayout& e = index.experts;
  json runtime = json::array();
  for (const RuntimeFile& file : index.runtime_files) {
    runtime.push_back({{"name", file.name}, {"bytes", file.bytes.size()}, {"base64", base64_encode(file.bytes)}});
  }
  json out = {{"format", "coli-container"},
          {"format_version", kFormatVersion},
          {"architecture", index.architecture},
          {"source", index.source},
          {"config", json::parse(index.config_json)},
          {"checksums", {{"algorithm", "xxh3_64"}, {"offset", table.offset}, {"count", table.count}, {"xxh3", checksum_hex(table.checksum)}}},
          {"tensors", tensors},
          {"experts",
           {{"format", traits(e.format).name}, {"layers", e.layers}, {"experts", e.experts}, {"model_layers", e.model_layers},
            {"parts", parts}, {"record_bytes", e.record_bytes}, {"record_stride", e.record_stride},
            {"layer_offsets", e.layer_offsets}}}};
  if (!runtime.empty()) out["runtime_files"] = std::move(runtime);
  return out;
}

namespace {

// Thrown only inside index_from_json, which turns it into an error value.
struct FieldError {
  std::string message;
};

constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kU64 = std::numeric_limits<std::uint64_t>::max();

// "experts" + "parts" -> "experts.parts"; top-level fields have an empty `where`.
std::string path_of(const std::string& where, const std::string& key) { return where.empty() ? key : where + "." + key; }

const json& field(const json& object, const std::string& key, const std::string& where) {
  if (!object.is_object()) throw FieldError{where.empty() ? "the index is not a JSON object" : "index field " + where + " is not an object"};
  const auto it = object.find(key);
  if (it == object.end()) throw FieldError{"index field " + path_of(where, key) + " is missing"};
  return *it;
}

// A whole number in [0, max]: nlohmann would wrap -1 and truncate 1.5 or 2^40 silently.
std::uint64_t unsigned_value(const json& value, std::uint64_t max, const std::string& where) {
  if (!value.is_number_unsigned()) throw FieldError{"index field " + where + " is not a whole number >= 0"};
  const auto number = value.get<std::uint64_t>();
  if (number > max) throw FieldError{"index field " + where + " is " + std::to_string(number) + ", above " + std::to_string(max)};
  return number;
}

std::uint64_t unsigned_field(const json& object, const std::string& key, std::uint64_t max, const std::string& where) {
  return unsigned_value(field(object, key, where), max, path_of(where, key));
}

std::string string_field(const json& object, const std::string& key, const std::string& where) {
  const json& value = field(object, key, where);
  if (!value.is_string()) throw FieldError{"index field " + path_of(where, key) + " is not a string"};
  return value.get<std::string>();
}

const json& array_field(const json& object, const std::string& key, const std::string& where) {
  const json& value = field(object, key, where);
  if (!value.is_array()) throw FieldError{"index field " + path_of(where, key) + " is not an array"};
  return value;
}

template <typename T>
std::vector<T> unsigned_array(const json& object, const std::string& key, std::uint64_t max, const std::string& where) {
  std::vector<T> values;
  for (const json& value : array_field(object, key, where)) {
    values.push_back(static_cast<T>(unsigned_value(value, max, path_of(where, key) + "[" + std::to_string(values.size()) + "]")));
  }
  return values;
}

std::uint64_t checksum_field(const json& object, const std::string& key, const std::string& where) {
  const auto checksum = parse_checksum_hex(string_field(object, key, where));
  if (!checksum) throw FieldError{"index field " + path_of(where, key) + " is not 16 hex digits"};
  return *checksum;
}

// The optional runtime files: known names, each once, base64 of the size said.
std::vector<RuntimeFile> runtime_files(const json& j) {
  std::vector<RuntimeFile> files;
  for (const json& f : array_field(j, "runtime_files", "")) {
    const std::string where = "runtime_files[" + std::to_string(files.size()) + "]";
    RuntimeFile file{string_field(f, "name", where), {}};
    if (std::find(kRuntimeFileNames.begin(), kRuntimeFileNames.end(), file.name) == kRuntimeFileNames.end()) {
      throw FieldError{"index field " + where + ".name '" + file.name + "' is not a runtime file coli knows"};
    }
    for (const RuntimeFile& earlier : files) {
      if (earlier.name == file.name) throw FieldError{"index field " + where + " repeats " + file.name};
    }
    const std::uint64_t bytes = unsigned_field(f, "bytes", kMaxRuntimeFileBytes, where);
    auto decoded = base64_decode(string_field(f, "base64", where));
    if (!decoded || decoded->size() != bytes) {
      throw FieldError{"index field " + where + ".base64 is not base64 of " + std::to_string(bytes) + " bytes"};
    }
    file.bytes = std::move(*decoded);
    files.push_back(std::move(file));
  }
  return files;
}

Result<ParsedIndex> parse_index(const json& j) {
  ParsedIndex parsed;
  ContainerIndex& index = parsed.index;
  const json& table = field(j, "checksums", "");
  if (string_field(table, "algorithm", "checksums") != "xxh3_64") throw FieldError{"index field checksums.algorithm is not xxh3_64"};
  parsed.table = {unsigned_field(table, "offset", kU64, "checksums"), unsigned_field(table, "count", kU64, "checksums"),
                  checksum_field(table, "xxh3", "checksums")};
  index.architecture = string_field(j, "architecture", "");
  index.source = string_field(j, "source", "");
  index.config_json = field(j, "config", "").dump();
  // Format strings become WeightFormat here, once, so nothing downstream compares strings.
  for (const json& t : array_field(j, "tensors", "")) {
    const std::string where = "tensors[" + std::to_string(index.tensors.size()) + "]";
    const auto name = string_field(t, "name", where);
    auto dtype = parse_container_dtype(string_field(t, "dtype", where), "index field tensors[" + name + "].dtype");
    if (!dtype) return dtype.error();
    index.tensors.push_back({name, *dtype, unsigned_array<std::uint64_t>(t, "shape", kU64, where),
                             unsigned_field(t, "offset", kU64, where), unsigned_field(t, "bytes", kU64, where)});
  }
  const json& e = field(j, "experts", "");
  ExpertLayout& layout = index.experts;
  auto format = parse_weight_format(string_field(e, "format", "experts"), "index field experts.format");
  if (!format) return format.error();
  layout.format = *format;
  layout.layers = static_cast<std::uint32_t>(unsigned_field(e, "layers", kU32, "experts"));
  layout.experts = static_cast<std::uint32_t>(unsigned_field(e, "experts", kU32, "experts"));
  layout.model_layers = unsigned_array<std::uint32_t>(e, "model_layers", kU32, "experts");
  for (const json& p : array_field(e, "parts", "experts")) {
    const std::string where = "experts.parts[" + std::to_string(layout.parts.size()) + "]";
    layout.parts.push_back({string_field(p, "name", where), static_cast<std::uint32_t>(unsigned_field(p, "rows", kU32, where)),
                            static_cast<std::uint32_t>(unsigned_field(p, "cols", kU32, where)),
                            unsigned_field(p, "weights_offset", kU64, where), unsigned_field(p, "weights_bytes", kU64, where),
                            unsigned_field(p, "scales_offset", kU64, where), unsigned_field(p, "scales_bytes", kU64, where)});
  }
  layout.record_bytes = unsigned_field(e, "record_bytes", kU64, "experts");
  layout.record_stride = unsigned_field(e, "record_stride", kU64, "experts");
  layout.layer_offsets = unsigned_array<std::uint64_t>(e, "layer_offsets", kU64, "experts");
  if (j.contains("runtime_files")) index.runtime_files = runtime_files(j);
  return parsed;
}

}  // namespace

Result<ParsedIndex> index_from_json(const json& j) {
  try {
    return parse_index(j);
  } catch (const FieldError& error) {
    return make_error(error.message);
  } catch (const json::exception& error) {
    return make_error("damaged index (" + std::string(error.what()) + ")");
  }
}

}  // namespace coli::container::format
