#include "coli/convert/convert.h"

#include <filesystem>
#include <cstring>
#include <map>
#include <tuple>

#include "coli/base/files.h"
#include "coli/container/container.h"
#include "coli/model/model_desc.h"
#include "coli/model/tensor_data.h"
#include "reference/gemv_reference.h"

namespace coli::convert {
namespace {

using container::ExpertPart;

constexpr std::uint64_t kPartAlignment = 64;  // SIMD loads start on a cache line

std::uint64_t align(std::uint64_t value) { return (value + kPartAlignment - 1) / kPartAlignment * kPartAlignment; }

std::pair<std::uint64_t, std::uint64_t> quantized_bytes(ExpertFormat format, std::uint64_t rows, std::uint64_t cols) {
  switch (format) {
    case ExpertFormat::q4_g64: return {rows * cols / 2, rows * cols / kernels::kQ4GroupSize * 2};
    case ExpertFormat::q8_row: return {rows * cols, rows * 4};
    case ExpertFormat::f32: return {rows * cols * 4, 0};
  }
  return {0, 0};
}

model::TensorInfo info_of(const model::DescribedTensor& t) {
  return model::TensorInfo{t.name, t.dtype, t.shape, t.file, t.offset, t.bytes};
}

Result<std::vector<float>> read_f32(const model::DescribedTensor& tensor) {
  auto bytes = model::read_tensor_bytes(info_of(tensor), 0, tensor.bytes);
  if (!bytes) return bytes.error();
  std::vector<float> values(tensor.bytes / model::dtype_size(tensor.dtype));
  if (Status s = model::convert_to_f32(tensor.dtype, *bytes, values); !s) return s.error();
  return values;
}

// The three projections of one routed expert, whatever the checkpoint calls them.
struct ExpertTensors {
  const model::DescribedTensor* gate = nullptr;
  const model::DescribedTensor* up = nullptr;
  const model::DescribedTensor* down = nullptr;
};

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Result<std::map<std::pair<int, int>, ExpertTensors>> group_experts(const model::ModelDesc& desc) {
  std::map<std::pair<int, int>, ExpertTensors> experts;
  for (const auto& t : desc.tensors) {
    if (t.role != model::TensorRole::Expert) continue;
    ExpertTensors& e = experts[{t.layer, t.expert}];
    if (ends_with(t.name, ".gate_proj.weight") || ends_with(t.name, ".w1.weight")) e.gate = &t;
    else if (ends_with(t.name, ".up_proj.weight") || ends_with(t.name, ".w3.weight")) e.up = &t;
    else if (ends_with(t.name, ".down_proj.weight") || ends_with(t.name, ".w2.weight")) e.down = &t;
    else return make_error("convert: unexpected expert tensor " + t.name);
  }
  for (const auto& [key, e] : experts) {
    if (!e.gate || !e.up || !e.down) {
      return make_error("convert: layer " + std::to_string(key.first) + " expert " + std::to_string(key.second) +
                        " lacks its gate, up or down projection");
    }
  }
  return experts;
}

// Appends one projection, quantised, at the part's offsets inside `record`.
void pack_part(ExpertFormat format, const std::vector<float>& matrix, const ExpertPart& part,
               std::vector<std::byte>& record) {
  const int rows = static_cast<int>(part.rows), cols = static_cast<int>(part.cols);
  auto put = [&](std::uint64_t offset, const void* data, std::size_t size) {
    std::memcpy(record.data() + offset, data, size);
  };
  switch (format) {
    case ExpertFormat::q4_g64: {
      const auto q = kernels::quantize_q4_g64(matrix, rows, cols);
      put(part.weights_offset, q.nibbles.data(), q.nibbles.size());
      put(part.scales_offset, q.scales.data(), q.scales.size() * 2);
      break;
    }
    case ExpertFormat::q8_row: {
      const auto q = kernels::quantize_q8_row(matrix, rows, cols);
      put(part.weights_offset, q.weights.data(), q.weights.size());
      put(part.scales_offset, q.scales.data(), q.scales.size() * 4);
      break;
    }
    case ExpertFormat::f32:
      put(part.weights_offset, matrix.data(), matrix.size() * 4);
      break;
  }
}

// 2-D projections worth int8: not the embedding (a lookup) or the router.
bool quantisable_dense(const model::DescribedTensor& t) {
  using model::TensorRole;
  return t.shape.size() == 2 && t.shape[0] > 1 &&
         (t.role == TensorRole::Attention || t.role == TensorRole::LmHead || t.role == TensorRole::SharedExpert ||
          t.role == TensorRole::DenseMlp);
}

// The container's Q8_ROW tensor bytes: int8 weights, then row scales.
std::vector<std::byte> q8_row_tensor(const std::vector<float>& matrix, std::uint64_t rows, std::uint64_t cols) {
  const auto q = kernels::quantize_q8_row(matrix, static_cast<int>(rows), static_cast<int>(cols));
  std::vector<std::byte> bytes(container::q8_row_tensor_bytes(rows, cols));
  std::memcpy(bytes.data(), q.weights.data(), q.weights.size());
  std::memcpy(bytes.data() + container::q8_row_scales_offset(rows, cols), q.scales.data(), q.scales.size() * 4);
  return bytes;
}

std::vector<std::byte> q4_g64_tensor(const std::vector<float>& matrix, std::uint64_t rows, std::uint64_t cols) {
  const auto q = kernels::quantize_q4_g64(matrix, static_cast<int>(rows), static_cast<int>(cols));
  std::vector<std::byte> bytes(container::q4_g64_tensor_bytes(rows, cols));
  std::memcpy(bytes.data(), q.nibbles.data(), q.nibbles.size());
  std::memcpy(bytes.data() + container::q4_g64_scales_offset(rows, cols), q.scales.data(), q.scales.size() * 2);
  return bytes;
}

}  // namespace

Result<ExpertFormat> parse_expert_format(std::string_view name) {
  if (name == "q4_g64" || name == "int4") return ExpertFormat::q4_g64;
  if (name == "q8_row" || name == "int8") return ExpertFormat::q8_row;
  if (name == "f32") return ExpertFormat::f32;
  return make_error("unknown expert format '" + std::string(name) + "': choose q4_g64 (int4), q8_row (int8) or f32");
}

std::string_view expert_format_name(ExpertFormat format) {
  switch (format) {
    case ExpertFormat::q4_g64: return "q4_g64";
    case ExpertFormat::q8_row: return "q8_row";
    case ExpertFormat::f32: return "f32";
  }
  return "?";
}

Result<DenseFormat> parse_dense_format(std::string_view name) {
  if (name == "source") return DenseFormat::source;
  if (name == "q8_row" || name == "int8") return DenseFormat::q8_row;
  if (name == "q4_g64" || name == "int4") return DenseFormat::q4_g64;
  return make_error("unknown dense format '" + std::string(name) + "': choose source, q8_row (int8) or q4_g64 (int4)");
}

Result<ConvertReport> convert_model(const std::filesystem::path& model_dir, const std::filesystem::path& output,
                                    ExpertFormat format, DenseFormat dense, const ConvertProgress& progress) {
  auto desc = model::describe_model(model_dir);
  if (!desc) return desc.error();
  const model::ModelConfig& config = desc->config;
  const std::uint64_t hidden = config.hidden_size, width = config.moe_intermediate_size;
  if (format == ExpertFormat::q4_g64 && (hidden % kernels::kQ4GroupSize != 0 || width % kernels::kQ4GroupSize != 0)) {
    return make_error("q4_g64 needs hidden_size and moe_intermediate_size to be multiples of 64 (have " +
                      std::to_string(hidden) + " and " + std::to_string(width) + "): use --experts q8_row");
  }
  auto experts = group_experts(*desc);
  if (!experts) return experts.error();
  auto config_text = read_text_file(model_dir / "config.json");
  if (!config_text) return config_text.error();
  auto writer = container::ContainerWriter::create(output);
  if (!writer) return writer.error();

  ConvertReport report;
  for (const auto& t : desc->tensors) {
    if (t.role == model::TensorRole::Expert) continue;
    const bool q4_fits = t.shape.size() == 2 && t.shape[1] % kernels::kQ4GroupSize == 0;
    if (dense != DenseFormat::source && quantisable_dense(t) && (dense == DenseFormat::q8_row || q4_fits)) {
      auto matrix = read_f32(t);
      if (!matrix) return matrix.error();
      const bool q8 = dense == DenseFormat::q8_row;
      const auto bytes = q8 ? q8_row_tensor(*matrix, t.shape[0], t.shape[1]) : q4_g64_tensor(*matrix, t.shape[0], t.shape[1]);
      if (Status s = writer->add_tensor(t.name, q8 ? "Q8_ROW" : "Q4_G64", t.shape, bytes); !s) return s.error();
      ++report.dense_tensors;
      report.dense_bytes += bytes.size();
      continue;
    }
    auto bytes = model::read_tensor_bytes(info_of(t), 0, t.bytes);
    if (!bytes) return bytes.error();
    if (Status s = writer->add_tensor(t.name, std::string(model::dtype_name(t.dtype)), t.shape, *bytes); !s) return s.error();
    ++report.dense_tensors;
    report.dense_bytes += t.bytes;
  }

  // gate and up read hidden inputs, down reads the expert width.
  std::vector<ExpertPart> parts;
  std::uint64_t offset = 0;
  for (const auto& [name, rows, cols] : {std::tuple{"gate", width, hidden}, {"up", width, hidden}, {"down", hidden, width}}) {
    const auto [weights, scales] = quantized_bytes(format, rows, cols);
    ExpertPart part{name, static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(cols), offset, weights, 0, scales};
    part.scales_offset = align(offset + weights);
    offset = align(part.scales_offset + scales);
    parts.push_back(part);
  }
  std::vector<std::uint32_t> model_layers(desc->moe_layers.begin(), desc->moe_layers.end());
  if (Status s = writer->begin_experts(std::string(expert_format_name(format)), static_cast<std::uint32_t>(model_layers.size()),
                                       static_cast<std::uint32_t>(config.num_experts), model_layers, parts);
      !s) {
    return s.error();
  }
  std::vector<std::byte> record(offset);
  for (std::uint32_t layer : model_layers) {
    if (progress) progress("layer " + std::to_string(layer) + ": quantising " + std::to_string(config.num_experts) + " experts");
    for (std::uint64_t e = 0; e < config.num_experts; ++e) {
      const ExpertTensors& tensors = experts->at({static_cast<int>(layer), static_cast<int>(e)});
      std::fill(record.begin(), record.end(), std::byte{0});
      const model::DescribedTensor* sources[] = {tensors.gate, tensors.up, tensors.down};
      for (std::size_t p = 0; p < parts.size(); ++p) {
        auto matrix = read_f32(*sources[p]);
        if (!matrix) return matrix.error();
        pack_part(format, *matrix, parts[p], record);
      }
      if (Status s = writer->add_expert(record); !s) return s.error();
      ++report.experts;
    }
  }
  report.expert_record_bytes = offset;
  report.source_bytes_per_expert = desc->bytes_per_expert;
  const std::string source = "converted from " + model_dir.string() + " (experts " +
                             std::string(expert_format_name(format)) + ")";
  if (Status s = writer->finish(std::string(model::architecture_name(config.architecture)), *config_text, source); !s) {
    return s.error();
  }
  report.file_bytes = std::filesystem::file_size(output);
  return report;
}

}  // namespace coli::convert
