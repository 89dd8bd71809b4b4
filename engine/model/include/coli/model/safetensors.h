// safetensors headers: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the data.
// Everything is validated against the file size; no tensor data is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "coli/base/result.h"
#include "coli/model/dtype.h"

namespace coli::model {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::uint64_t> shape;
  std::filesystem::path file;
  std::uint64_t offset = 0;  // absolute byte offset of the first element in `file`
  std::uint64_t bytes = 0;

  std::uint64_t element_count() const;
};

struct SafetensorsFile {
  std::filesystem::path path;
  std::uint64_t file_size = 0;
  std::uint64_t header_size = 0;  // the JSON part, without the 8-byte length
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::vector<TensorInfo> tensors;               // in data-offset order
};

// Largest header accepted; the format itself caps it at 100 MB.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Reads and checks the header of one file (reads header bytes only).
Result<SafetensorsFile> read_safetensors_header(const std::filesystem::path& path);

// Checks a header already in memory; `file_size` is the whole file's size and
// `path` is only used for messages and TensorInfo::file.
Result<SafetensorsFile> parse_safetensors_header(std::string_view header_json, std::uint64_t file_size,
                                                 const std::filesystem::path& path);

// All tensors of a checkpoint: one model.safetensors, or the shards listed in
// model.safetensors.index.json (weight_map).
class TensorSet {
 public:
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::vector<std::filesystem::path>& files() const { return files_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Adds one file's tensors; fails on a name already present (names both files).
  Status add(SafetensorsFile file);

 private:
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<std::filesystem::path> files_;
  std::map<std::string, std::string> metadata_;
};

inline constexpr std::string_view kSingleFileName = "model.safetensors";
inline constexpr std::string_view kShardIndexName = "model.safetensors.index.json";

// Opens `dir`: model.safetensors if present (what transformers loads first),
// else model.safetensors.index.json and every shard it names.
Result<TensorSet> open_safetensors_dir(const std::filesystem::path& dir);

// Opens a sharded checkpoint through its index file.
Result<TensorSet> open_safetensors_index(const std::filesystem::path& index_path);

}  // namespace coli::model
