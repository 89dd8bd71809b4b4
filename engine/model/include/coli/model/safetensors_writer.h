// Writes small safetensors files: test checkpoints, converted tensors. The
// whole file is built in memory, so this is for small data only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/model/dtype.h"

namespace coli::model {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::uint64_t> shape;
  std::vector<std::byte> data;  // empty: zero-filled to shape x dtype size
};

// The complete file image: length prefix, JSON header (space-padded to a
// multiple of 8 like the reference writer), data in the given order.
Result<std::string> build_safetensors(const std::vector<TensorToWrite>& tensors,
                                      const std::map<std::string, std::string>& metadata = {});

Status write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace coli::model
