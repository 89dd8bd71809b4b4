#include "coli/convert/convert.h"

#include <filesystem>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "coli/base/files.h"
#include "coli/base/pending_file.h"
#include "coli/container/container.h"
#include "coli/model/model_desc.h"
#include "coli/model/tensor_data.h"
#include "coli/tokenizer/tokenizer.h"
#include "reference/gemv_reference.h"

namespace coli::convert {
namespace {

using container::ExpertPart;

model::TensorInfo info_of(const model::DescribedTensor& t) {
  return model::TensorInfo{t.name, t.dtype, t.shape, t.file, t.offset, t.bytes};
}

// The first NaN or +-Inf element of a float tensor's little-endian bytes,
// found from the exponent bits alone (all ones), so no format is widened.
struct NonFinite {
  std::uint64_t element = 0;
  bool nan = false;  // else an infinity
};

template <typename Bits>
std::optional<NonFinite> first_all_ones_exponent(std::span<const std::byte> bytes, Bits exponent, Bits mantissa) {
  const std::size_t count = bytes.size() / sizeof(Bits);
  for (std::size_t i = 0; i < count; ++i) {
    Bits bits;
    std::memcpy(&bits, bytes.data() + i * sizeof(Bits), sizeof(Bits));
    if ((bits & exponent) == exponent) return NonFinite{i, (bits & mantissa) != 0};
  }
  return std::nullopt;
}

std::optional<NonFinite> first_non_finite(model::DType dtype, std::span<const std::byte> bytes) {
  switch (dtype) {
    case model::DType::F32: return first_all_ones_exponent<std::uint32_t>(bytes, 0x7f800000u, 0x007fffffu);
    case model::DType::F16: return first_all_ones_exponent<std::uint16_t>(bytes, 0x7c00, 0x03ff);
    case model::DType::BF16: return first_all_ones_exponent<std::uint16_t>(bytes, 0x7f80, 0x007f);
    default: return std::nullopt;  // integer tensors hold no NaN
  }
}

// A NaN or Inf weight would convert into a container that runs and prints
// garbage: refused, naming the tensor and its first bad element.
Status check_finite(const model::DescribedTensor& tensor, std::span<const std::byte> bytes) {
  const auto bad = first_non_finite(tensor.dtype, bytes);
  if (!bad) return Ok{};
  std::string where = "element " + std::to_string(bad->element);
  if (tensor.shape.size() == 2) {
    where += " (row " + std::to_string(bad->element / tensor.shape[1]) + ", column " + std::to_string(bad->element % tensor.shape[1]) + ")";
  }
  return make_error("convert: tensor " + tensor.name + " in " + tensor.file.string() + " holds " + (bad->nan ? "NaN" : "an infinity") +
                    " at " + where + ": the checkpoint is damaged (or was saved after training diverged); "
                    "export or download it again");
}

Result<std::vector<float>> read_f32(const model::DescribedTensor& tensor) {
  auto bytes = model::read_tensor_bytes(info_of(tensor), 0, tensor.bytes);
  if (!bytes) return bytes.error();
  if (Status s = check_finite(tensor, *bytes); !s) return s.error();
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
void pack_part(WeightFormat format, const std::vector<float>& matrix, const ExpertPart& part,
               std::vector<std::byte>& record) {
  const int rows = static_cast<int>(part.rows), cols = static_cast<int>(part.cols);
  auto put = [&](std::uint64_t offset, const void* data, std::size_t size) {
    std::memcpy(record.data() + offset, data, size);
  };
  switch (format) {
    case WeightFormat::q4_g64: {
      const auto q = kernels::quantize_q4_g64(matrix, rows, cols);
      put(part.weights_offset, q.nibbles.data(), q.nibbles.size());
      put(part.scales_offset, q.scales.data(), q.scales.size() * 2);
      break;
    }
    case WeightFormat::q8_row: {
      const auto q = kernels::quantize_q8_row(matrix, rows, cols);
      put(part.weights_offset, q.weights.data(), q.weights.size());
      put(part.scales_offset, q.scales.data(), q.scales.size() * 4);
      break;
    }
    case WeightFormat::f32:
      put(part.weights_offset, matrix.data(), matrix.size() * 4);
      break;
    case WeightFormat::bf16:
    case WeightFormat::f16: break;  // parse_expert_format never yields these
  }
}

// 2-D projections worth int8: not the embedding (a lookup) or the router.
bool quantisable_dense(const model::DescribedTensor& t) {
  using model::TensorRole;
  return t.shape.size() == 2 && t.shape[0] > 1 &&
         (t.role == TensorRole::Attention || t.role == TensorRole::LmHead || t.role == TensorRole::SharedExpert ||
          t.role == TensorRole::DenseMlp);
}

// A dense projection in the container's quantised layout: weights, then the
// scales at the format's scales_offset.
std::vector<std::byte> quantized_tensor(WeightFormat format, const std::vector<float>& matrix, std::uint64_t rows,
                                        std::uint64_t cols) {
  const WeightFormatTraits& t = traits(format);
  std::vector<std::byte> bytes(t.matrix_bytes(rows, cols));
  std::byte* scales = bytes.data() + t.scales_offset(rows, cols);
  if (format == WeightFormat::q8_row) {
    const auto q = kernels::quantize_q8_row(matrix, static_cast<int>(rows), static_cast<int>(cols));
    std::memcpy(bytes.data(), q.weights.data(), q.weights.size());
    std::memcpy(scales, q.scales.data(), q.scales.size() * 4);
  } else {
    const auto q = kernels::quantize_q4_g64(matrix, static_cast<int>(rows), static_cast<int>(cols));
    std::memcpy(bytes.data(), q.nibbles.data(), q.nibbles.size());
    std::memcpy(scales, q.scales.data(), q.scales.size() * 2);
  }
  return bytes;
}

// Bytes the container will take: the writer's layout (the header's block,
// each dense tensor aligned, then layers x experts aligned records) and a
// generous bound on the index and trailer.
std::uint64_t planned_bytes(const model::ModelDesc& desc, WeightFormat format, DenseFormat dense,
                            std::uint64_t config_bytes) {
  auto align = [](std::uint64_t v) { return (v + container::kAlignment - 1) / container::kAlignment * container::kAlignment; };
  const std::optional<WeightFormat> dense_quantized = quantized_format(dense);
  std::uint64_t end = container::kAlignment, index = 4096 + 2 * config_bytes;
  for (const auto& t : desc.tensors) {
    if (t.role == model::TensorRole::Expert) continue;
    const bool quantised = dense_quantized && quantisable_dense(t) && traits(*dense_quantized).valid_cols(t.shape[1]);
    end = align(end + (quantised ? traits(*dense_quantized).matrix_bytes(t.shape[0], t.shape[1]) : t.bytes));
    index += 256 + 2 * t.name.size();
  }
  const std::uint64_t records = desc.moe_layers.size() * desc.config.num_experts;
  const container::ExpertRecordLayout layout =
      container::expert_record_layout(format, desc.config.hidden_size, desc.config.moe_intermediate_size);
  return end + records * align(layout.record_bytes) + index + records * 128;
}

// Refuses before anything is written when the output's filesystem lacks the room.
Status check_room_for(const std::filesystem::path& output, std::uint64_t needed) {
  auto available = free_bytes_at(output.has_parent_path() ? output.parent_path() : std::filesystem::path("."));
  if (!available) return available.error();
  return check_free_space(output, needed, *available);
}

}  // namespace

Result<std::uint64_t> planned_container_bytes(const std::filesystem::path& model_dir, WeightFormat format,
                                              DenseFormat dense) {
  auto desc = model::describe_model(model_dir);
  if (!desc) return desc.error();
  std::error_code error;
  const std::uintmax_t config_bytes = std::filesystem::file_size(model_dir / "config.json", error);
  return planned_bytes(*desc, format, dense, error ? 0 : config_bytes);
}

// The CLI also takes int4/int8 for the quantised formats.
Result<WeightFormat> parse_expert_format(std::string_view name) {
  if (name == "int4") return WeightFormat::q4_g64;
  if (name == "int8") return WeightFormat::q8_row;
  auto format = parse_weight_format(name, "--experts");
  if (format && traits(*format).expert_records) return format;
  return make_error("unknown expert format '" + std::string(name) + "': choose q4_g64 (int4), q8_row (int8) or f32");
}

Result<DenseFormat> parse_dense_format(std::string_view name) {
  if (name == "int8") return DenseFormat::q8_row;
  if (name == "int4") return DenseFormat::q4_g64;
  auto format = coli::parse_dense_format(name, "--dense");
  if (format) return format;
  return make_error("unknown dense format '" + std::string(name) + "': choose source, q8_row (int8) or q4_g64 (int4)");
}

namespace {

// The runtime files a container carries (see convert_model).
Result<std::vector<container::RuntimeFile>> runtime_files_for(const std::filesystem::path& model_dir,
                                                              const std::filesystem::path& tokenizer,
                                                              const ConvertProgress& progress) {
  std::vector<container::RuntimeFile> files;
  if (!tokenizer.empty()) {
    auto bytes = read_text_file(tokenizer);
    if (!bytes) return bytes.error();
    const std::string name = tokenizer.extension() == ".gguf" ? "tokenizer.gguf" : "tokenizer.json";
    if (auto loads = Tokenizer::from_file_bytes(name, *bytes, tokenizer.string()); !loads) {
      return make_error("--tokenizer: " + loads.error().message);
    }
    files.push_back({name, std::move(*bytes)});
  } else if (std::filesystem::exists(model_dir / "tokenizer.json")) {
    auto bytes = read_text_file(model_dir / "tokenizer.json");
    if (!bytes) return bytes.error();
    if (auto loads = Tokenizer::from_tokenizer_json_text(*bytes, (model_dir / "tokenizer.json").string()); !loads) {
      if (progress) progress("not carrying the tokenizer: " + loads.error().message + " (coli run will need --tokenizer)");
    } else {
      files.push_back({"tokenizer.json", std::move(*bytes)});
    }
  }
  for (const char* config : {"tokenizer_config.json", "generation_config.json"}) {
    if (!std::filesystem::exists(model_dir / config)) continue;
    auto bytes = read_text_file(model_dir / config);
    if (!bytes) return bytes.error();
    files.push_back({config, std::move(*bytes)});
  }
  return files;
}

// Every tensor but the experts': quantised where --dense asks and the row width allows, else as stored.
Status write_dense_tensors(container::ContainerWriter& writer, const model::ModelDesc& desc, DenseFormat dense,
                           const std::filesystem::path& model_dir, ConvertReport& report) {
  const std::optional<WeightFormat> dense_quantized = quantized_format(dense);
  for (const auto& t : desc.tensors) {
    if (t.role == model::TensorRole::Expert) continue;
    if (dense_quantized && quantisable_dense(t) && traits(*dense_quantized).valid_cols(t.shape[1])) {
      auto matrix = read_f32(t);
      if (!matrix) return matrix.error();
      const auto bytes = quantized_tensor(*dense_quantized, *matrix, t.shape[0], t.shape[1]);
      if (Status s = writer.add_tensor(t.name, *dense_quantized, t.shape, bytes); !s) return s.error();
      ++report.dense_tensors;
      report.dense_bytes += bytes.size();
      continue;
    }
    auto bytes = model::read_tensor_bytes(info_of(t), 0, t.bytes);
    if (!bytes) return bytes.error();
    if (Status s = check_finite(t, *bytes); !s) return s.error();
    auto dtype = parse_container_dtype(model::dtype_name(t.dtype), model_dir.string() + ": tensor " + t.name);
    if (!dtype) return dtype.error();
    if (Status s = writer.add_tensor(t.name, *dtype, t.shape, *bytes); !s) return s.error();
    ++report.dense_tensors;
    report.dense_bytes += t.bytes;
  }
  return Ok{};
}

// Every MoE layer's experts, each one record of its gate, up and down parts in `format`.
Status write_experts(container::ContainerWriter& writer, const model::ModelDesc& desc,
                     const std::map<std::pair<int, int>, ExpertTensors>& experts, WeightFormat format,
                     const ConvertProgress& progress, ConvertReport& report) {
  const model::ModelConfig& config = desc.config;
  const container::ExpertRecordLayout record_layout =
      container::expert_record_layout(format, config.hidden_size, config.moe_intermediate_size);
  const std::vector<ExpertPart>& parts = record_layout.parts;
  std::vector<std::uint32_t> model_layers(desc.moe_layers.begin(), desc.moe_layers.end());
  if (Status s = writer.begin_experts(format, static_cast<std::uint32_t>(model_layers.size()),
                                      static_cast<std::uint32_t>(config.num_experts), model_layers, parts);
      !s) {
    return s.error();
  }
  std::vector<std::byte> record(record_layout.record_bytes);
  for (std::uint32_t layer : model_layers) {
    if (progress) progress("layer " + std::to_string(layer) + ": quantising " + std::to_string(config.num_experts) + " experts");
    for (std::uint64_t e = 0; e < config.num_experts; ++e) {
      const ExpertTensors& tensors = experts.at({static_cast<int>(layer), static_cast<int>(e)});
      std::fill(record.begin(), record.end(), std::byte{0});
      const model::DescribedTensor* sources[] = {tensors.gate, tensors.up, tensors.down};
      for (std::size_t p = 0; p < parts.size(); ++p) {
        auto matrix = read_f32(*sources[p]);
        if (!matrix) return matrix.error();
        pack_part(format, *matrix, parts[p], record);
      }
      if (Status s = writer.add_expert(record); !s) return s.error();
      ++report.experts;
    }
  }
  report.expert_record_bytes = record_layout.record_bytes;
  return Ok{};
}

}  // namespace

Result<ConvertReport> convert_model(const std::filesystem::path& model_dir, const std::filesystem::path& output,
                                    WeightFormat format, DenseFormat dense, const ConvertProgress& progress,
                                    const std::filesystem::path& tokenizer) {
  auto desc = model::describe_model(model_dir);
  if (!desc) return desc.error();
  const model::ModelConfig& config = desc->config;
  const std::uint64_t hidden = config.hidden_size, width = config.moe_intermediate_size;
  if (!traits(format).valid_cols(hidden) || !traits(format).valid_cols(width)) {
    return make_error("q4_g64 needs hidden_size and moe_intermediate_size to be multiples of 64 (have " +
                      std::to_string(hidden) + " and " + std::to_string(width) + "): use --experts q8_row");
  }
  auto experts = group_experts(*desc);
  if (!experts) return experts.error();
  auto config_text = read_text_file(model_dir / "config.json");
  if (!config_text) return config_text.error();
  auto runtime = runtime_files_for(model_dir, tokenizer, progress);
  if (!runtime) return runtime.error();
  std::uint64_t runtime_bytes = 0;  // in the index as base64: 4 characters per 3 bytes
  for (const auto& file : *runtime) runtime_bytes += (file.bytes.size() + 2) / 3 * 4 + 256;
  if (Status room = check_room_for(output, planned_bytes(*desc, format, dense, config_text->size()) + runtime_bytes); !room) {
    return room.error();
  }
  auto writer = container::ContainerWriter::create(output);
  if (!writer) return writer.error();

  ConvertReport report;
  for (auto& file : *runtime) {
    report.runtime_files.push_back(file.name);
    if (Status s = writer->add_runtime_file(std::move(file.name), std::move(file.bytes)); !s) return s.error();
  }
  if (Status s = write_dense_tensors(*writer, *desc, dense, model_dir, report); !s) return s.error();
  if (Status s = write_experts(*writer, *desc, *experts, format, progress, report); !s) return s.error();
  report.source_bytes_per_expert = desc->bytes_per_expert;
  const std::string source = "converted from " + model_dir.string() + " (experts " +
                             std::string(name_of(format)) + ")";
  if (Status s = writer->finish(std::string(model::architecture_name(config.architecture)), *config_text, source); !s) {
    return s.error();
  }
  report.file_bytes = std::filesystem::file_size(output);
  return report;
}

}  // namespace coli::convert
