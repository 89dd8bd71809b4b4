#include "coli/model/safetensors_writer.h"

#include <set>

#include "coli/base/files.h"
#include "json_text.h"

namespace coli::model {
using nlohmann::json;

Result<std::string> build_safetensors(const std::vector<TensorToWrite>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::uint64_t data_size = 0;
  std::vector<std::uint64_t> sizes;
  for (const TensorToWrite& tensor : tensors) {
    if (tensor.name == "__metadata__" || !names.insert(tensor.name).second)
      return make_error("cannot write tensor '" + tensor.name + "': the name is reserved or used twice");
    std::uint64_t bytes = dtype_size(tensor.dtype);
    for (std::uint64_t dim : tensor.shape) bytes *= dim;
    if (!tensor.data.empty() && tensor.data.size() != bytes)
      return make_error("cannot write tensor '" + tensor.name + "': " + std::to_string(tensor.data.size()) +
                        " bytes given, shape " + detail::format_shape(tensor.shape) + " needs " +
                        std::to_string(bytes));
    header[tensor.name] = {{"dtype", std::string(dtype_name(tensor.dtype))},
                           {"shape", tensor.shape},
                           {"data_offsets", {data_size, data_size + bytes}}};
    sizes.push_back(bytes);
    data_size += bytes;
  }
  std::string header_text = header.dump();
  // The reference writer pads with spaces so the data starts 8-byte aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string image;
  image.reserve(8 + header_text.size() + data_size);
  std::uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) image.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  image += header_text;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].data.empty())
      image.append(sizes[i], '\0');
    else
      image.append(reinterpret_cast<const char*>(tensors[i].data.data()), tensors[i].data.size());
  }
  return image;
}

Status write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  auto image = build_safetensors(tensors, metadata);
  if (!image) return image.error();
  return write_file_atomically(path, *image);
}

}  // namespace coli::model
