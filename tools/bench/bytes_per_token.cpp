#include "bytes_per_token.h"

#include <cstdio>
#include <numeric>

#include "coli/base/text.h"
#include "coli/model/model_config.h"

namespace coli::bench {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<TokenTraffic> decode_traffic(const container::ContainerReader& reader, int first_position, int tokens) {
  const container::ContainerIndex& index = reader.index();
  auto config = model::parse_model_config(index.config_json, reader.path().string() + " (config)");
  if (!config) return config.error();
  TokenTraffic t;
  for (const container::TensorEntry& tensor : index.tensors) {
    const std::string& name = tensor.name;
    if (name == "model.embed_tokens.weight") {
      t.embedding_row = tensor.bytes / tensor.shape.at(0);
      if (config->tie_word_embeddings) t.lm_head = tensor.bytes;
    } else if (name == "lm_head.weight") {
      t.lm_head = tensor.bytes;
    } else if (tensor.shape.size() == 1) {
      t.other_dense += tensor.shape[0] * 4;  // the runtime keeps vectors as f32
    } else if (name.find(".self_attn.") != std::string::npos) {
      t.attention += tensor.bytes;
    } else if (ends_with(name, "mlp.gate.weight") || ends_with(name, "block_sparse_moe.gate.weight")) {
      t.router += tensor.bytes;
    } else {
      t.other_dense += tensor.bytes;
    }
  }
  const container::ExpertLayout& experts = index.experts;
  std::uint64_t expert_bytes = 0;
  for (const container::ExpertPart& part : experts.parts) expert_bytes += part.weights_bytes + part.scales_bytes;
  t.experts = config->num_experts_per_tok * experts.layers * expert_bytes;

  // Attention at position p scans p + 1 cached keys and values.
  const std::uint64_t kv_row_bytes = config->num_key_value_heads * config->head_dim * 4 * 2;
  std::uint64_t positions_scanned = 0;
  for (int i = 0; i < tokens; ++i) positions_scanned += static_cast<std::uint64_t>(first_position + i + 1);
  if (tokens > 0) t.kv_cache = config->num_hidden_layers * kv_row_bytes * positions_scanned / static_cast<std::uint64_t>(tokens);
  return t;
}

std::string describe_traffic(const TokenTraffic& t) {
  char line[512];
  std::snprintf(line, sizeof line,
                "attention %s + router %s + other dense %s + experts %s + lm_head %s + embedding row %s + KV cache %s = %s",
                format_bytes(t.attention).c_str(), format_bytes(t.router).c_str(), format_bytes(t.other_dense).c_str(),
                format_bytes(t.experts).c_str(), format_bytes(t.lm_head).c_str(), format_bytes(t.embedding_row).c_str(),
                format_bytes(t.kv_cache).c_str(), format_bytes(t.total()).c_str());
  return line;
}

}  // namespace coli::bench
