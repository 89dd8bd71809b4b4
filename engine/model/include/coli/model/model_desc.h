// describe_model: what the planner needs to know about a checkpoint, from
// config.json and safetensors headers only (no weight is read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/model/dtype.h"
#include "coli/model/model_config.h"
#include "coli/model/safetensors.h"
#include "coli/model/tensor_layout.h"

namespace coli::model {

struct DescribedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::uint64_t> shape;
  std::filesystem::path file;
  std::uint64_t offset = 0;  // absolute in `file`
  std::uint64_t bytes = 0;
  TensorRole role = TensorRole::Embedding;
  int layer = -1;
  int expert = -1;
};

struct ModelDesc {
  std::filesystem::path directory;
  ModelConfig config;
  std::vector<DescribedTensor> tensors;  // expected tensors, in layer order
  std::vector<std::uint64_t> moe_layers;  // decoder layers with routed experts
  std::vector<std::filesystem::path> files;  // safetensors files read

  DType expert_dtype = DType::BF16;
  std::uint64_t bytes_per_expert = 0;    // gate+up+down of one routed expert, source dtype
  std::uint64_t expert_count = 0;        // moe_layers.size() * num_experts
  std::uint64_t expert_bytes_total = 0;  // all routed experts
  std::uint64_t dense_bytes_total = 0;   // everything else the model uses
  // Tensors in the files that the model does not use (e.g. rotary inv_freq
  // buffers); listed so nothing is dropped silently, not counted above.
  std::vector<std::string> ignored_tensors;
};

// Reads dir/config.json and the safetensors headers in `dir`, checks every
// expected tensor's presence, dtype and shape, and sums the sizes.
Result<ModelDesc> describe_model(const std::filesystem::path& dir);

// The same check for a config and tensor set already read.
Result<ModelDesc> describe_tensors(const ModelConfig& config, const TensorSet& tensors,
                                   const std::filesystem::path& dir);

}  // namespace coli::model
