// describe_model: match the tensors config.json implies against the
// safetensors headers, then size dense and expert weights for the planner.
#include "coli/model/model_desc.h"

#include <charconv>
#include <optional>
#include <unordered_set>

#include "json_text.h"

namespace coli::model {
namespace fs = std::filesystem;

namespace {

// The number after `marker` in `name` ("model.layers.12.mlp" -> 12).
std::optional<std::uint64_t> index_after(std::string_view name, std::string_view marker) {
  const std::size_t at = name.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  const char* begin = name.data() + at + marker.size();
  const char* end = name.data() + name.size();
  std::uint64_t value = 0;
  const auto [stop, error] = std::from_chars(begin, end, value);
  if (error != std::errc() || stop == begin || (stop != end && *stop != '.')) return std::nullopt;
  return value;
}

// A tensor the config does not expect that shows config.json and the weights
// disagree (rather than a harmless extra such as a rotary inv_freq buffer).
Status check_unexpected_tensor(const ModelConfig& config, const TensorInfo& tensor, const std::string& where) {
  const std::string mismatch = where + ": config.json does not match the weights: ";
  const auto layer = index_after(tensor.name, "model.layers.");
  if (layer && *layer >= config.num_hidden_layers)
    return make_error(mismatch + "tensor '" + tensor.name + "' belongs to layer " + std::to_string(*layer) +
                      " but num_hidden_layers is " + std::to_string(config.num_hidden_layers));
  const auto expert = index_after(tensor.name, ".experts.");
  if (expert && *expert >= config.num_experts)
    return make_error(mismatch + "tensor '" + tensor.name + "' belongs to expert " + std::to_string(*expert) +
                      " but config.json has " + std::to_string(config.num_experts) + " experts");
  if (expert && layer && !config.is_moe_layer(*layer))
    return make_error(mismatch + "tensor '" + tensor.name + "' is a routed expert in layer " + std::to_string(*layer) +
                      ", which config.json makes a dense layer (mlp_only_layers / decoder_sparse_step)");
  if (expert && layer)
    return make_error(mismatch + "tensor '" + tensor.name + "' is not named the way " + config.model_type +
                      " names its experts (" + moe_block_prefix(config, *layer) +
                      ".experts.N...); is model_type right?");
  if (layer && tensor.name.find(".shared_expert") != std::string::npos)
    return make_error(mismatch + "tensor '" + tensor.name + "' is a shared expert, which " + config.model_type +
                      " does not have");
  return Ok{};
}

Status check_expected_tensor(const ExpectedTensor& expected, const TensorInfo& found) {
  if (found.shape != expected.shape)
    return make_error("tensor '" + expected.name + "' in " + found.file.string() + " has shape " +
                      detail::format_shape(found.shape) + " but config.json gives " +
                      detail::format_shape(expected.shape) + " (" + expected.shape_source +
                      "); config.json does not match the weights");
  if (!is_float_dtype(found.dtype))
    return make_error("tensor '" + expected.name + "' in " + found.file.string() + " has dtype " +
                      std::string(dtype_name(found.dtype)) +
                      "; coli computes with F32, F16 or BF16 weights (quantized checkpoints are not supported: "
                      "use the original checkpoint)");
  return Ok{};
}

Error missing_tensor_error(const std::vector<const ExpectedTensor*>& missing, const fs::path& dir,
                           const ModelConfig& config) {
  const ExpectedTensor& first = *missing.front();
  std::string message = dir.string() + ": tensor '" + first.name + "' (" + std::string(tensor_role_name(first.role));
  if (first.layer >= 0) message += ", layer " + std::to_string(first.layer);
  message += ") is missing from the safetensors files";
  if (missing.size() > 1) message += " (and " + std::to_string(missing.size() - 1) + " more)";
  if (first.role == TensorRole::LmHead)
    message += "; config.json has tie_word_embeddings=false, so lm_head.weight must be stored";
  else
    message += "; the download is incomplete or config.json (" + config.model_type + ") does not match the weights";
  return make_error(message);
}

}  // namespace

Result<ModelDesc> describe_tensors(const ModelConfig& config, const TensorSet& tensors, const fs::path& dir) {
  // The converter and the engine start here: a planning-only architecture
  // stops before any weight is read (coli-plan plans it from config.json).
  if (Status supported = check_engine_support(config, dir.string()); !supported)
    return make_error(supported.error().message + " (pass its config.json to coli-plan to plan it)");
  const std::vector<ExpectedTensor> expected = expected_tensors(config);
  std::unordered_set<std::string_view> expected_names;
  for (const ExpectedTensor& tensor : expected) expected_names.insert(tensor.name);

  ModelDesc desc;
  desc.directory = dir;
  desc.config = config;
  desc.files = tensors.files();
  for (const TensorInfo& tensor : tensors.tensors()) {
    if (expected_names.count(tensor.name) != 0) continue;
    if (Status status = check_unexpected_tensor(config, tensor, dir.string()); !status) return status.error();
    desc.ignored_tensors.push_back(tensor.name);
  }

  std::vector<const ExpectedTensor*> missing;
  for (const ExpectedTensor& tensor : expected)
    if (tensors.find(tensor.name) == nullptr) missing.push_back(&tensor);
  if (!missing.empty()) return missing_tensor_error(missing, dir, config);

  std::optional<DType> expert_dtype;
  for (const ExpectedTensor& tensor : expected) {
    const TensorInfo& found = *tensors.find(tensor.name);
    if (Status status = check_expected_tensor(tensor, found); !status) return status.error();
    desc.tensors.push_back(
        {found.name, found.dtype, found.shape, found.file, found.offset, found.bytes, tensor.role, tensor.layer,
         tensor.expert});
    if (tensor.role != TensorRole::Expert) {
      desc.dense_bytes_total += found.bytes;
      continue;
    }
    // The planner moves experts as equal-sized units; mixed dtypes would break that.
    if (expert_dtype && *expert_dtype != found.dtype)
      return make_error("tensor '" + found.name + "' is " + std::string(dtype_name(found.dtype)) +
                        " but other expert tensors are " + std::string(dtype_name(*expert_dtype)) +
                        "; coli needs all routed experts in one dtype (re-export the checkpoint)");
    expert_dtype = found.dtype;
    desc.expert_bytes_total += found.bytes;
  }

  for (std::uint64_t layer = 0; layer < config.num_hidden_layers; ++layer)
    if (config.is_moe_layer(layer)) desc.moe_layers.push_back(layer);
  desc.expert_count = desc.moe_layers.size() * config.num_experts;
  if (expert_dtype) desc.expert_dtype = *expert_dtype;
  // Every expert has the same shapes and dtype, so the division is exact.
  if (desc.expert_count > 0) desc.bytes_per_expert = desc.expert_bytes_total / desc.expert_count;
  return desc;
}

Result<ModelDesc> describe_model(const fs::path& dir) {
  auto config = read_model_config(dir / "config.json");
  if (!config) return config.error();
  auto tensors = open_safetensors_dir(dir);
  if (!tensors) return tensors.error();
  return describe_tensors(*config, *tensors, dir);
}

}  // namespace coli::model
