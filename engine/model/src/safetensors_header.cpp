// One safetensors file: the length prefix, the JSON header, and every check
// that can be made against the file size without reading tensor data.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "coli/base/checked_math.h"
#include "coli/model/safetensors.h"
#include "json_text.h"

namespace coli::model {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::uint64_t kLengthPrefixBytes = 8;
const std::string kRedownload = " (the file is truncated or corrupt: re-download it)";

std::optional<std::uint64_t> as_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  return std::nullopt;
}

Result<std::vector<std::uint64_t>> unsigned_list(const json& entry, const char* field, const std::string& where) {
  const auto found = entry.find(field);
  if (found == entry.end() || !found->is_array())
    return make_error(where + ": '" + field + "' is missing or not a list" + kRedownload);
  std::vector<std::uint64_t> values;
  for (const json& item : *found) {
    const auto number = as_unsigned(item);
    if (!number)
      return make_error(where + ": '" + field + "' holds " + detail::describe_json_value(item) +
                        ", not a non-negative integer" + kRedownload);
    values.push_back(*number);
  }
  return values;
}

Result<TensorInfo> parse_tensor_entry(const std::string& name, const json& entry, std::uint64_t data_start,
                                      std::uint64_t data_size, const fs::path& path) {
  const std::string where = path.string() + ": tensor '" + name + "'";
  if (!entry.is_object()) return make_error(where + ": header entry is not an object" + kRedownload);
  const auto dtype_field = entry.find("dtype");
  if (dtype_field == entry.end() || !dtype_field->is_string())
    return make_error(where + ": 'dtype' is missing or not a string" + kRedownload);
  const std::string dtype_text = dtype_field->get<std::string>();
  const auto dtype = parse_dtype(dtype_text);
  if (!dtype)
    return make_error(where + ": unknown dtype '" + dtype_text + "'; coli reads " +
                      std::string(known_dtype_names()) + " (convert the checkpoint to BF16 or F16)");

  auto shape = unsigned_list(entry, "shape", where);
  if (!shape) return shape.error();
  auto offsets = unsigned_list(entry, "data_offsets", where);
  if (!offsets) return offsets.error();
  if (offsets->size() != 2)
    return make_error(where + ": 'data_offsets' must hold [begin, end], found " +
                      detail::format_shape(*offsets) + kRedownload);
  const std::uint64_t begin = (*offsets)[0];
  const std::uint64_t end = (*offsets)[1];
  if (begin > end)
    return make_error(where + ": data_offsets " + detail::format_shape(*offsets) + " end before they begin" +
                      kRedownload);
  if (end > data_size)
    return make_error(where + ": data_offsets " + detail::format_shape(*offsets) + " run past the end of the file (" +
                      std::to_string(data_size) + " data bytes after the header)" + kRedownload);

  const auto elements = checked_product(*shape);
  const auto expected_bytes = elements ? checked_mul(*elements, dtype_size(*dtype)) : std::nullopt;
  if (!expected_bytes || *expected_bytes != end - begin)
    return make_error(where + ": data_offsets " + detail::format_shape(*offsets) + " hold " +
                      std::to_string(end - begin) + " bytes but shape " + detail::format_shape(*shape) + " x " +
                      dtype_text + " needs " + (expected_bytes ? std::to_string(*expected_bytes) : "too many") +
                      " bytes" + kRedownload);

  TensorInfo info;
  info.name = name;
  info.dtype = *dtype;
  info.shape = std::move(*shape);
  info.file = path;
  info.offset = data_start + begin;
  info.bytes = end - begin;
  return info;
}

Status check_no_overlap(std::vector<TensorInfo>& tensors, const fs::path& path) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
  });
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& tensor : tensors) {
    if (tensor.bytes == 0) continue;  // empty tensors occupy no bytes
    if (previous != nullptr && tensor.offset < previous->offset + previous->bytes)
      return make_error(path.string() + ": tensors '" + previous->name + "' and '" + tensor.name +
                        "' overlap in the data section" + kRedownload);
    previous = &tensor;
  }
  return Ok{};
}

Status read_exactly(int fd, std::uint64_t offset, char* out, std::uint64_t length, const fs::path& path) {
  while (length > 0) {
    const ssize_t n = ::pread(fd, out, length, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error("cannot read " + path.string() + ": " + std::strerror(errno));
    if (n == 0) return make_error(path.string() + ": file ended while reading its header" + kRedownload);
    out += n;
    offset += static_cast<std::uint64_t>(n);
    length -= static_cast<std::uint64_t>(n);
  }
  return Ok{};
}

}  // namespace

std::uint64_t TensorInfo::element_count() const {
  std::uint64_t count = 1;
  for (std::uint64_t dim : shape) count *= dim;
  return count;
}

Result<SafetensorsFile> parse_safetensors_header(std::string_view header_json, std::uint64_t file_size,
                                                 const fs::path& path) {
  const std::uint64_t data_start = kLengthPrefixBytes + header_json.size();
  if (data_start > file_size)
    return make_error(path.string() + ": header (" + std::to_string(header_json.size()) +
                      " bytes) is larger than the file (" + std::to_string(file_size) + " bytes)" + kRedownload);
  auto parsed = detail::parse_json_text(header_json, path.string() + " header");
  if (!parsed) return parsed.error();
  if (!parsed->duplicate_top_level_keys.empty())
    return make_error(path.string() + ": tensor '" + parsed->duplicate_top_level_keys.front() +
                      "' is listed twice in the header" + kRedownload);
  if (!parsed->value.is_object())
    return make_error(path.string() + ": header is not a JSON object; not a safetensors file");

  SafetensorsFile file;
  file.path = path;
  file.file_size = file_size;
  file.header_size = header_json.size();
  const std::uint64_t data_size = file_size - data_start;
  for (const auto& [key, entry] : parsed->value.items()) {
    if (key == "__metadata__") {
      if (!entry.is_object()) return make_error(path.string() + ": '__metadata__' is not an object" + kRedownload);
      for (const auto& [meta_key, meta_value] : entry.items()) {
        if (!meta_value.is_string())
          return make_error(path.string() + ": __metadata__ '" + meta_key + "' is not a string" + kRedownload);
        file.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    auto tensor = parse_tensor_entry(key, entry, data_start, data_size, path);
    if (!tensor) return tensor.error();
    file.tensors.push_back(std::move(*tensor));
  }
  if (Status status = check_no_overlap(file.tensors, path); !status) return status.error();
  return file;
}

Result<SafetensorsFile> read_safetensors_header(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + path.string() + ": " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};

  struct stat facts {};
  if (::fstat(fd, &facts) != 0) return make_error("cannot stat " + path.string() + ": " + std::strerror(errno));
  if (!S_ISREG(facts.st_mode)) return make_error(path.string() + ": not a regular file");
  const auto file_size = static_cast<std::uint64_t>(facts.st_size);
  if (file_size < kLengthPrefixBytes)
    return make_error(path.string() + ": file is " + std::to_string(file_size) +
                      " bytes, shorter than the 8-byte header length" + kRedownload);

  unsigned char prefix[kLengthPrefixBytes];
  if (Status status = read_exactly(fd, 0, reinterpret_cast<char*>(prefix), kLengthPrefixBytes, path); !status)
    return status.error();
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | prefix[i];  // little-endian
  if (header_size > file_size - kLengthPrefixBytes)
    return make_error(path.string() + ": header length " + std::to_string(header_size) +
                      " bytes is larger than the file (" + std::to_string(file_size) + " bytes)" + kRedownload);
  if (header_size > kMaxSafetensorsHeaderBytes)
    return make_error(path.string() + ": header length " + std::to_string(header_size) +
                      " bytes is over the format's 100 MB limit; not a safetensors file");

  std::string header(header_size, '\0');
  if (Status status = read_exactly(fd, kLengthPrefixBytes, header.data(), header_size, path); !status)
    return status.error();
  return parse_safetensors_header(header, file_size, path);
}

}  // namespace coli::model
