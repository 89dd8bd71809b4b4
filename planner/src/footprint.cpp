#include "coli/planner/footprint.h"

#include "coli/backend/backend_memory.h"

#include <algorithm>
#include <tuple>

#include "coli/container/container.h"
#include "coli/model/tensor_layout.h"

namespace coli::planner {
namespace {

constexpr std::uint64_t kPage = 4096;
// Dense tensors start on these boundaries in the engine's block of them.
constexpr std::uint64_t kDenseTensorAlignment = 64;
// The container index is JSON: about this much per tensor entry, plus the config.
constexpr std::uint64_t kIndexBytesPerTensor = 256;

std::uint64_t round_up(std::uint64_t value, std::uint64_t to) { return (value + to - 1) / to * to; }

ExpertRecordSize record_size(WeightFormat format, std::uint64_t hidden, std::uint64_t width) {
  const std::uint64_t bytes = container::expert_record_layout(format, hidden, width).record_bytes;
  return {format, bytes, round_up(bytes, container::kAlignment)};
}

std::uint64_t elements(const model::ExpectedTensor& t) {
  std::uint64_t n = 1;
  for (std::uint64_t d : t.shape) n *= d;
  return n;
}

// The converter quantises 2-D projections only (convert.cpp quantisable_dense).
bool quantisable(const model::ExpectedTensor& t) {
  using model::TensorRole;
  return t.shape.size() == 2 && t.shape[0] > 1 &&
         (t.role == TensorRole::Attention || t.role == TensorRole::LmHead || t.role == TensorRole::SharedExpert ||
          t.role == TensorRole::DenseMlp);
}

bool copied_to_f32(const model::ExpectedTensor& t) {
  using model::TensorRole;
  return t.role == TensorRole::LayerNorm || t.role == TensorRole::QkNorm || t.role == TensorRole::FinalNorm ||
         (t.role == TensorRole::Attention && t.shape.size() == 1);
}

std::pair<std::string, std::uint64_t> source_dtype(const model::ModelConfig& config) {
  if (config.torch_dtype == "float32") return {"float32", 4};
  if (config.torch_dtype == "bfloat16" || config.torch_dtype == "float16") return {config.torch_dtype, 2};
  return {"bfloat16 (assumed: torch_dtype is '" + config.torch_dtype + "')", 2};
}

// KV elements one layer caches per position.
std::uint64_t kv_elements_per_layer(const model::ModelConfig& c) {
  if (!c.mla) return 2 * c.num_key_value_heads * c.head_dim;  // K and V of every kv head
  return c.mla->kv_lora_rank + c.mla->qk_rope_head_dim + (c.indexer ? c.indexer->head_dim : 0);
}

std::string n(std::uint64_t value) { return std::to_string(value); }

// The MTP modules: in the checkpoint, never needed to generate.
ExcludedComponent mtp_component(const model::ModelConfig& config, std::uint64_t dtype_bytes) {
  ExcludedComponent mtp{"mtp"};
  for (const model::ExpectedTensor& t : model::mtp_tensors(config)) {
    mtp.tensors += 1;
    mtp.parameters += elements(t);
  }
  mtp.source_bytes = mtp.parameters * dtype_bytes;
  mtp.reason = n(config.num_nextn_predict_layers) +
               " multi-token-prediction module(s) (num_nextn_predict_layers): used for speculative decoding only, "
               "not needed to generate; excluded";
  return mtp;
}

}  // namespace

ExpertRecordSize ModelFootprint::expert() const {
  switch (expert_format) {
    case WeightFormat::q4_g64: return q4_g64;
    case WeightFormat::q8_row: return q8_row;
    case WeightFormat::f32: return f32;
    case WeightFormat::bf16:
    case WeightFormat::f16: break;  // experts are never stored so
  }
  return q4_g64;
}

std::uint64_t kv_bytes_per_position(const model::ModelConfig& config, KvType type) {
  // The engine's own formula (coli/base/kv_type.h) for grouped-query caches.
  if (!config.mla) return coli::kv_cache_bytes(config.num_hidden_layers, config.num_key_value_heads, config.head_dim, 1, type);
  return config.num_hidden_layers * kv_elements_per_layer(config) * kv_element_bytes(type);
}

std::string kv_layout(const model::ModelConfig& c, KvType type) {
  const std::string layers = n(c.num_hidden_layers) + " layers x ";
  const std::string element = n(kv_element_bytes(type)) + " B (" + std::string(kv_type_name(type));
  if (!c.mla)
    return layers + "2 (K,V) x " + n(c.num_key_value_heads) + " kv heads x head_dim " + n(c.head_dim) + " x " + element + ")";
  std::string per_layer = "(kv_lora_rank " + n(c.mla->kv_lora_rank) + " + qk_rope_head_dim " + n(c.mla->qk_rope_head_dim);
  if (c.indexer) per_layer += " + index_head_dim " + n(c.indexer->head_dim);
  return layers + per_layer + ") x " + element + ", MLA latent cache)";
}

// The GPU decoder places each dense tensor at a 256-byte boundary.
constexpr std::uint64_t kGpuTensorAlignment = 256;

ModelFootprint describe_footprint(const model::ModelConfig& config, WeightFormat experts, DenseFormat dense) {
  ModelFootprint fp;
  fp.config = config;
  fp.expert_format = experts;
  fp.dense_format = dense;
  std::tie(fp.source_dtype, fp.source_dtype_bytes) = source_dtype(config);
  for (std::uint64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (config.is_moe_layer(layer)) fp.moe_layers.push_back(layer);
  }
  fp.n_experts = static_cast<int>(config.num_experts);
  fp.top_k = static_cast<int>(config.num_experts_per_tok);
  const std::uint64_t hidden = config.hidden_size, width = config.moe_intermediate_size;
  fp.expert_source_bytes = 3 * hidden * width * fp.source_dtype_bytes;
  fp.q4_g64 = record_size(WeightFormat::q4_g64, hidden, width);
  fp.q8_row = record_size(WeightFormat::q8_row, hidden, width);
  fp.f32 = record_size(WeightFormat::f32, hidden, width);

  fp.kv_bytes_per_position = kv_bytes_per_position(config);
  fp.kv_layout = kv_layout(config);
  fp.expert_parameters = 3 * hidden * width;
  if (config.num_nextn_predict_layers > 0) fp.excluded.push_back(mtp_component(config, fp.source_dtype_bytes));

  std::uint64_t container_dense = 0, dense_block = 0;
  for (const model::ExpectedTensor& t : model::expected_tensors(config)) {
    fp.total_parameters += elements(t);
    if (t.role != model::TensorRole::Expert && t.role != model::TensorRole::Embedding)
      fp.active_parameters += elements(t);
    if (t.role == model::TensorRole::Expert) continue;
    const std::string role(model::tensor_role_name(t.role));
    auto found = std::find_if(fp.dense.begin(), fp.dense.end(), [&](const DenseComponent& c) { return c.role == role; });
    if (found == fp.dense.end()) found = fp.dense.insert(fp.dense.end(), DenseComponent{role});
    const std::uint64_t source = elements(t) * fp.source_dtype_bytes;
    const bool q = quantisable(t);
    const std::uint64_t q8 = q ? traits(WeightFormat::q8_row).matrix_bytes(t.shape[0], t.shape[1]) : source;
    const WeightFormatTraits& q4_traits = traits(WeightFormat::q4_g64);
    const std::uint64_t q4 = q && q4_traits.valid_cols(t.shape[1]) ? q4_traits.matrix_bytes(t.shape[0], t.shape[1]) : source;
    const std::uint64_t held = dense == DenseFormat::source ? source : dense == DenseFormat::q8_row ? q8 : q4;
    found->tensors += 1;
    found->source_bytes += source;
    found->q8_row_bytes += q8;
    found->q4_g64_bytes += q4;
    found->held_bytes += held;
    if (t.shape.size() == 2) found->matrix_rows += t.shape[0];
    if (t.shape.size() == 2 && held == source) found->float_matrix_bytes += held, found->float_matrix_rows += t.shape[0];
    fp.dense_held_bytes += held;
    fp.dense_tensor_count += 1;
    dense_block += round_up(held, kDenseTensorAlignment);
    if (copied_to_f32(t)) fp.norm_f32_copy_bytes += elements(t) * 4;
    const bool embedding = t.role == model::TensorRole::Embedding;
    if (embedding) fp.embedding_held_bytes += held;
    if (!embedding || config.tie_word_embeddings) {
      fp.gpu_dense_bytes += round_up(copied_to_f32(t) ? elements(t) * 4 : held, kGpuTensorAlignment);
    }
    if (!embedding && !copied_to_f32(t)) fp.largest_gpu_dense_matrix_bytes = std::max(fp.largest_gpu_dense_matrix_bytes, held);
    container_dense += round_up(held, container::kAlignment);
  }
  // The engine reads every dense tensor into one WeightMemory block
  // (runtime/dense_weights.cpp): 64-byte boundaries, the block a whole number of pages.
  fp.dense_page_rounding_bytes = round_up(dense_block, kPage) - fp.dense_held_bytes;
  fp.active_parameters += fp.moe_layer_count() * static_cast<std::uint64_t>(fp.top_k) * fp.expert_parameters;
  const std::uint64_t index = (fp.dense_tensor_count + 1) * kIndexBytesPerTensor + 4096;
  fp.container_bytes = container::kAlignment + container_dense + fp.all_expert_records_bytes() + index + 24;
  return fp;
}

Result<ModelFootprint> read_footprint(const std::filesystem::path& path, WeightFormat experts, DenseFormat dense) {
  const std::filesystem::path file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  auto config = model::read_model_config(file);
  if (!config) return config.error();
  return describe_footprint(*config, experts, dense);
}

std::uint64_t ModelFootprint::cpu_staged_chunk_rows() const {
  return backend::cpu_staged_chunk_rows(backend::kCpuExpertStagingBytes, config.moe_intermediate_size, config.hidden_size);
}

}  // namespace coli::planner
