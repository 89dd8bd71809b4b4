// What a model costs in bytes, from its config.json alone (no weights read):
// every dense component and one routed expert in each representation the
// engine really holds. The sizes follow the converter (engine/convert) and
// the container's own size formulas, so a plan and a container agree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "coli/base/kv_type.h"
#include "coli/base/result.h"
#include "coli/base/weight_format.h"
#include "coli/model/model_config.h"

namespace coli::planner {

// Routed experts are stored as q4_g64, q8_row or f32 (f32 is for tests);
// dense projections as a DenseFormat (both in coli/base/weight_format.h).

// One expert record (gate, up, down back to back, each part 64-aligned).
struct ExpertRecordSize {
  WeightFormat format = WeightFormat::q4_g64;
  std::uint64_t record_bytes = 0;   // meaningful bytes
  std::uint64_t record_stride = 0;  // rounded up to the container's 4096 alignment: one cache slot
};

// One dense component (tensors of one role), in every format it may take.
// Roles the converter never quantises (embeddings, norms, router, biases)
// show their source bytes in all three columns.
struct DenseComponent {
  std::string role;                  // tensor_role_name(): "attention", "lm_head", ...
  std::uint64_t tensors = 0;
  std::uint64_t source_bytes = 0;
  std::uint64_t q8_row_bytes = 0;
  std::uint64_t q4_g64_bytes = 0;
  std::uint64_t held_bytes = 0;      // in the footprint's dense format
  std::uint64_t matrix_rows = 0;     // rows of its 2-D tensors: what a token's GEMVs walk (speed model)
  // Its 2-D tensors the engine keeps in the checkpoint's precision in the
  // footprint's dense format (all of them with source dense; else the ones
  // not quantised: the router), which the float GEMV multiplies (speed model).
  std::uint64_t float_matrix_bytes = 0;
  std::uint64_t float_matrix_rows = 0;
};

// A part of the checkpoint coli leaves out, with why (e.g. the MTP modules).
struct ExcludedComponent {
  std::string role;                  // "mtp"
  std::uint64_t tensors = 0;
  std::uint64_t parameters = 0;
  std::uint64_t source_bytes = 0;
  std::string reason;
};

struct ModelFootprint {
  model::ModelConfig config;
  WeightFormat expert_format = WeightFormat::q4_g64;
  DenseFormat dense_format = DenseFormat::source;
  std::string source_dtype;          // from torch_dtype; "bfloat16 (assumed)" when absent
  std::uint64_t source_dtype_bytes = 2;

  std::vector<std::uint64_t> moe_layers;  // decoder layers with routed experts
  int n_experts = 0;
  int top_k = 0;
  std::uint64_t expert_source_bytes = 0;  // one expert in the source dtype
  ExpertRecordSize q4_g64, q8_row, f32;   // one expert in each container format
  ExpertRecordSize expert() const;        // the one for expert_format
  // Rows of one expert's matrices, what a token's expert GEMVs walk: gate and
  // up (its width each) and down (the hidden size).
  std::uint64_t expert_matrix_rows() const { return 2 * config.moe_intermediate_size + config.hidden_size; }
  // Rows (token, expert) of a prompt's expert batch the CPU backend stages
  // per chunk: their gate, up and down floats within kCpuExpertStagingBytes.
  std::uint64_t cpu_staged_chunk_rows() const;

  std::vector<DenseComponent> dense;      // by role, in first-appearance order
  std::uint64_t dense_held_bytes = 0;     // sum of held_bytes
  std::uint64_t dense_tensor_count = 0;
  // The engine's block of dense tensors (one WeightMemory, each tensor at a
  // 64-byte boundary, the whole rounded to pages) less dense_held_bytes.
  std::uint64_t dense_page_rounding_bytes = 0;
  // The engine copies norm weights and biases into float vectors per layer.
  std::uint64_t norm_f32_copy_bytes = 0;
  // The input embedding as held (a GPU run keeps only it on the host).
  std::uint64_t embedding_held_bytes = 0;
  // The GPU decoder's dense buffer (engine/vulkan/decoder): every tensor but
  // the embedding (read again as lm_head when tied), vectors widened to f32,
  // each 256-aligned.
  std::uint64_t gpu_dense_bytes = 0;
  // The largest dense matrix a GPU decoder reads from the container to
  // upload (one at a time: its load's transient host buffer); not the
  // embedding, which the host keeps and uploads from where it is.
  std::uint64_t largest_gpu_dense_matrix_bytes = 0;
  std::uint64_t container_bytes = 0;      // the whole file: header, dense, records, index estimate

  // KV cache bytes per context position, all layers, in f32 (the GPU
  // decoder's cache; the CPU's type is a knob: MemoryKnobs::kv_type):
  // GQA 2 x kv_heads x head_dim per layer; MLA the kv_lora_rank latent plus
  // the qk_rope_head_dim key (+ index_head_dim indexer key with DSA).
  std::uint64_t kv_bytes_per_position = 0;
  std::string kv_layout;                  // that formula with the config's numbers

  // Parameters of the tensors the engine needs (MTP modules excluded), and
  // those one token reads: all but the input embedding (a row lookup) and
  // the routed experts, plus top_k routed experts per MoE layer.
  std::uint64_t total_parameters = 0;
  std::uint64_t active_parameters = 0;
  std::uint64_t expert_parameters = 0;    // one routed expert
  std::vector<ExcludedComponent> excluded;  // in the checkpoint, not held (MTP modules)

  std::uint64_t moe_layer_count() const { return moe_layers.size(); }
  std::uint64_t all_expert_records_bytes() const {
    return moe_layer_count() * static_cast<std::uint64_t>(n_experts) * expert().record_stride;
  }
};

// Per-position KV bytes and its formula as text, per architecture (see above).
std::uint64_t kv_bytes_per_position(const model::ModelConfig& config, KvType type = KvType::f32);
std::string kv_layout(const model::ModelConfig& config, KvType type = KvType::f32);

ModelFootprint describe_footprint(const model::ModelConfig& config, WeightFormat experts, DenseFormat dense);

// The one I/O helper: reads `path` (a config.json, or a directory holding one).
Result<ModelFootprint> read_footprint(const std::filesystem::path& path, WeightFormat experts, DenseFormat dense);

}  // namespace coli::planner
