#include "container_format.h"

namespace coli::container::format {

using nlohmann::json;

json index_to_json(const ContainerIndex& index) {
  json tensors = json::array();
  for (const TensorEntry& t : index.tensors) {
    tensors.push_back({{"name", t.name}, {"dtype", traits(t.dtype).container_dtype}, {"shape", t.shape}, {"offset", t.offset}, {"bytes", t.bytes}});
  }
  json parts = json::array();
  for (const ExpertPart& p : index.experts.parts) {
    parts.push_back({{"name", p.name}, {"rows", p.rows}, {"cols", p.cols}, {"weights_offset", p.weights_offset},
                     {"weights_bytes", p.weights_bytes}, {"scales_offset", p.scales_offset},
                     {"scales_bytes", p.scales_bytes}});
  }
  const ExpertLayout& e = index.experts;
  return {{"format", "coli-container"},
          {"format_version", kFormatVersion},
          {"architecture", index.architecture},
          {"source", index.source},
          {"config", json::parse(index.config_json)},
          {"tensors", tensors},
          {"experts",
           {{"format", traits(e.format).name}, {"layers", e.layers}, {"experts", e.experts}, {"model_layers", e.model_layers},
            {"parts", parts}, {"record_bytes", e.record_bytes}, {"record_stride", e.record_stride},
            {"layer_offsets", e.layer_offsets}}}};
}

Result<ContainerIndex> index_from_json(const json& j) {
  ContainerIndex index;
  index.architecture = j.at("architecture").get<std::string>();
  index.source = j.at("source").get<std::string>();
  index.config_json = j.at("config").dump();
  // Format strings become WeightFormat here, once, so nothing downstream compares strings.
  for (const json& t : j.at("tensors")) {
    const auto name = t.at("name").get<std::string>();
    auto dtype = parse_container_dtype(t.at("dtype").get<std::string>(), "index field tensors[" + name + "].dtype");
    if (!dtype) return dtype.error();
    index.tensors.push_back({name, *dtype, t.at("shape").get<std::vector<std::uint64_t>>(),
                             t.at("offset").get<std::uint64_t>(), t.at("bytes").get<std::uint64_t>()});
  }
  const json& e = j.at("experts");
  ExpertLayout& layout = index.experts;
  auto format = parse_weight_format(e.at("format").get<std::string>(), "index field experts.format");
  if (!format) return format.error();
  layout.format = *format;
  layout.layers = e.at("layers").get<std::uint32_t>();
  layout.experts = e.at("experts").get<std::uint32_t>();
  layout.model_layers = e.at("model_layers").get<std::vector<std::uint32_t>>();
  for (const json& p : e.at("parts")) {
    layout.parts.push_back({p.at("name").get<std::string>(), p.at("rows").get<std::uint32_t>(),
                            p.at("cols").get<std::uint32_t>(), p.at("weights_offset").get<std::uint64_t>(),
                            p.at("weights_bytes").get<std::uint64_t>(), p.at("scales_offset").get<std::uint64_t>(),
                            p.at("scales_bytes").get<std::uint64_t>()});
  }
  layout.record_bytes = e.at("record_bytes").get<std::uint64_t>();
  layout.record_stride = e.at("record_stride").get<std::uint64_t>();
  layout.layer_offsets = e.at("layer_offsets").get<std::vector<std::uint64_t>>();
  return index;
}

}  // namespace coli::container::format
