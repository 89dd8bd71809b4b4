// A checkpoint's tensors across one file or a sharded set.
#include <set>

#include "coli/base/files.h"
#include "coli/model/safetensors.h"
#include "json_text.h"

namespace coli::model {
namespace fs = std::filesystem;
using nlohmann::json;

const TensorInfo* TensorSet::find(std::string_view name) const {
  const auto found = index_.find(std::string(name));
  return found == index_.end() ? nullptr : &tensors_[found->second];
}

Status TensorSet::add(SafetensorsFile file) {
  for (TensorInfo& tensor : file.tensors) {
    if (const TensorInfo* existing = find(tensor.name))
      return make_error("tensor '" + tensor.name + "' is in both " + existing->file.string() + " and " +
                        tensor.file.string() + "; remove the stale file");
    index_.emplace(tensor.name, tensors_.size());
    tensors_.push_back(std::move(tensor));
  }
  for (auto& [key, value] : file.metadata) metadata_.emplace(key, value);
  files_.push_back(file.path);
  return Ok{};
}

namespace {

// Shard names come from a downloaded file: keep them inside the directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

struct ShardEntry {
  std::string tensor;
  std::string shard;
};

Result<std::vector<ShardEntry>> read_weight_map(const fs::path& index_path) {
  auto text = read_text_file(index_path);
  if (!text) return text.error();
  auto parsed = detail::parse_json_text(*text, index_path.string());
  if (!parsed) return parsed.error();
  const json& root = parsed->value;
  const auto weight_map = root.is_object() ? root.find("weight_map") : root.end();
  if (!root.is_object() || weight_map == root.end() || !weight_map->is_object())
    return make_error(index_path.string() + ": 'weight_map' is missing or not an object (re-download the file)");
  std::vector<ShardEntry> entries;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string())
      return make_error(index_path.string() + ": weight_map entry '" + tensor + "' is " +
                        detail::describe_json_value(shard) + ", not a file name (re-download the file)");
    const std::string shard_name = shard.get<std::string>();
    if (!is_plain_file_name(shard_name))
      return make_error(index_path.string() + ": weight_map entry '" + tensor + "' names '" + shard_name +
                        "', which is not a file name in the checkpoint directory");
    entries.push_back({tensor, shard_name});
  }
  if (entries.empty()) return make_error(index_path.string() + ": weight_map is empty (re-download the file)");
  return entries;
}

}  // namespace

Result<TensorSet> open_safetensors_index(const fs::path& index_path) {
  auto entries = read_weight_map(index_path);
  if (!entries) return entries.error();
  const fs::path dir = index_path.parent_path();

  std::set<std::string> opened;
  TensorSet set;
  for (const ShardEntry& entry : *entries) {
    if (!opened.insert(entry.shard).second) continue;
    const fs::path shard_path = dir / entry.shard;
    std::error_code ec;
    if (!fs::exists(shard_path, ec))
      return make_error(index_path.string() + ": shard '" + entry.shard + "' (holding '" + entry.tensor +
                        "') does not exist in " + dir.string() + "; the download is incomplete");
    auto shard = read_safetensors_header(shard_path);
    if (!shard) return shard.error();
    if (Status status = set.add(std::move(*shard)); !status) return status.error();
  }
  for (const ShardEntry& entry : *entries) {
    const TensorInfo* tensor = set.find(entry.tensor);
    if (tensor == nullptr || tensor->file.filename() != entry.shard)
      return make_error(index_path.string() + ": weight_map puts '" + entry.tensor + "' in '" + entry.shard +
                        "', but that shard does not contain it; the index and shards do not match (re-download)");
  }
  return set;
}

Result<TensorSet> open_safetensors_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return make_error(dir.string() + " is not a directory (give a checkpoint directory)");
  const fs::path single = dir / kSingleFileName;
  if (fs::exists(single, ec)) {
    auto file = read_safetensors_header(single);
    if (!file) return file.error();
    TensorSet set;
    if (Status status = set.add(std::move(*file)); !status) return status.error();
    return set;
  }
  const fs::path index = dir / kShardIndexName;
  if (fs::exists(index, ec)) return open_safetensors_index(index);
  return make_error(dir.string() + ": no " + std::string(kSingleFileName) + " or " + std::string(kShardIndexName) +
                    "; give a Hugging Face checkpoint directory with safetensors weights (.bin checkpoints "
                    "must be converted to safetensors first)");
}

}  // namespace coli::model
