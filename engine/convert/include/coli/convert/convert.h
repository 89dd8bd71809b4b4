// `coli convert`: a Hugging Face checkpoint directory -> coli container,
// streaming one tensor / one expert at a time (never the whole model in RAM)
// and atomically (the container appears only when complete).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"

namespace coli::convert {

// Routed experts: q4_g64 (int4, group 64, f16 scales), q8_row (int8, f32 row
// scale), or f32 (unquantised, for exactness tests and small models).
// Dense projections (attention, lm_head, shared experts, dense MLPs): a
// DenseFormat (coli/base/weight_format.h). Embeddings, norms, biases and the
// router always keep their dtype (routing decisions are too sensitive to quantise).
// The CLI's names: the formats' own, or int4/int8; errors list the choices.
Result<WeightFormat> parse_expert_format(std::string_view name);
Result<DenseFormat> parse_dense_format(std::string_view name);

struct ConvertReport {
  std::vector<std::string> runtime_files;  // what the container carries for running (tokenizer, configs)
  std::uint64_t dense_tensors = 0;
  std::uint64_t dense_bytes = 0;
  std::uint64_t experts = 0;
  std::uint64_t expert_record_bytes = 0;  // one expert in the container
  std::uint64_t source_bytes_per_expert = 0;
  std::uint64_t file_bytes = 0;
};

using ConvertProgress = std::function<void(std::string_view)>;

// An upper bound on the container's size (exact for the tensor and expert
// data, a bound for the index): convert_model refuses up front, with needed
// and available bytes, when the output's filesystem has less free space.
Result<std::uint64_t> planned_container_bytes(const std::filesystem::path& model_dir, WeightFormat format,
                                              DenseFormat dense = DenseFormat::source);

// `tokenizer`: the tokenizer to carry (a tokenizer.json or a GGUF
// vocabulary; it must load); empty: the model directory's tokenizer.json
// when it loads (otherwise the container carries none and progress says
// why). The directory's tokenizer_config.json and generation_config.json
// come along when present, so the container runs on its own.
Result<ConvertReport> convert_model(const std::filesystem::path& model_dir, const std::filesystem::path& output,
                                    WeightFormat format, DenseFormat dense = DenseFormat::source,
                                    const ConvertProgress& progress = {}, const std::filesystem::path& tokenizer = {});

}  // namespace coli::convert
