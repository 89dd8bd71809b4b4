#include "expert_store.h"

#include "coli/forward/ops.h"
#include "reference/gemv_reference.h"

namespace coli::runtime {

Result<ExpertStore> ExpertStore::create(const container::ContainerReader& reader, int top_k, int capacity,
                                        const std::vector<std::vector<int>>& pins) {
  ExpertStore store;
  store.reader_ = &reader;
  store.layout_ = reader.index().experts;
  const auto& layout = store.layout_;
  const int experts = static_cast<int>(layout.experts);
  std::vector<experts::CacheShape> shapes;
  for (std::uint32_t layer = 0; layer < layout.layers; ++layer) {
    experts::ExpertCacheConfig config;
    config.layer = static_cast<int>(layout.model_layers[layer]);
    config.n_experts = experts;
    config.top_k = top_k;
    config.cap = capacity > 0 ? capacity : experts;
    if (pins.size() == 1) config.pins = pins[0];
    else if (layer < pins.size()) config.pins = pins[layer];
    config.expert_bytes = layout.record_stride;
    config.alignment = container::kAlignment;
    auto cache = experts::ExpertCache::create(config);
    if (!cache) return cache.error();
    shapes.push_back({config.n_experts, top_k, config.cap,
                      static_cast<int>(config.pins.size())});
    store.caches_.push_back(std::move(*cache));
  }
  auto planner = experts::RoundPlanner::create(shapes);
  if (!planner) return planner.error();
  store.planner_ = std::move(*planner);
  for (const auto& part : layout.parts) {
    if (part.name == "gate") store.gate_.resize(part.rows);
    if (part.name == "up") store.up_.resize(part.rows);
    if (part.name == "down") store.down_.resize(part.rows);
  }
  return store;
}

Status ExpertStore::begin(int moe_layer, std::span<const int> experts) {
  experts::ExpertCache& cache = caches_[static_cast<std::size_t>(moe_layer)];
  auto plan = cache.begin_round(experts);
  if (!plan) return plan.error();
  for (const experts::SlotLoad& load : plan->loads) {
    const std::uint64_t offset = layout_.record_offset(static_cast<std::uint32_t>(moe_layer),
                                                       static_cast<std::uint32_t>(load.expert));
    if (Status s = reader_->read(offset, load.destination.first(layout_.record_bytes)); !s) {
      cache.abort_round();
      return s;
    }
    bytes_read_ += layout_.record_bytes;
  }
  return Ok{};
}

void ExpertStore::end(int moe_layer) { caches_[static_cast<std::size_t>(moe_layer)].end_round(); }

void ExpertStore::project(const container::ExpertPart& part, const std::byte* record, std::span<const float> x,
                          std::span<float> y, const kernels::cpu::GemvOptions& gemv) const {
  const std::byte* weights = record + part.weights_offset;
  const std::byte* scales = record + part.scales_offset;
  const int rows = static_cast<int>(part.rows), cols = static_cast<int>(part.cols);
  if (exact_ && layout_.format == "q4_g64") {
    kernels::gemv_reference_q4(reinterpret_cast<const std::uint8_t*>(weights),
                               reinterpret_cast<const std::uint16_t*>(scales), rows, cols, x, y);
  } else if (exact_ && layout_.format == "q8_row") {
    kernels::gemv_reference_q8(reinterpret_cast<const std::int8_t*>(weights), reinterpret_cast<const float*>(scales),
                               rows, cols, x, y);
  } else if (layout_.format == "q4_g64") {
    kernels::cpu::gemv(kernels::cpu::Q4G64View{reinterpret_cast<const std::uint8_t*>(weights),
                                               reinterpret_cast<const std::uint16_t*>(scales), rows, cols},
                       x, y, gemv);
  } else if (layout_.format == "q8_row") {
    kernels::cpu::gemv(kernels::cpu::Q8RowView{reinterpret_cast<const std::int8_t*>(weights),
                                               reinterpret_cast<const float*>(scales), rows, cols},
                       x, y, gemv);
  } else {
    forward::gemv_dense({forward::Dtype::f32, rows, cols, weights}, x, y, gemv.threads);
  }
}

void ExpertStore::accumulate_ffn(int moe_layer, int expert, float weight, std::span<const float> x,
                                 std::span<float> out, const kernels::cpu::GemvOptions& gemv) {
  const std::byte* record = caches_[static_cast<std::size_t>(moe_layer)].expert_data(expert).data();
  project(layout_.parts[0], record, x, gate_, gemv);
  project(layout_.parts[1], record, x, up_, gemv);
  for (std::size_t i = 0; i < gate_.size(); ++i) gate_[i] = forward::silu(gate_[i]) * up_[i];
  project(layout_.parts[2], record, gate_, down_, gemv);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] += weight * down_[i];
}

std::uint64_t ExpertStore::hits() const {
  std::uint64_t total = 0;
  for (const auto& cache : caches_) total += cache.stats().hits;
  return total;
}

std::uint64_t ExpertStore::misses() const {
  std::uint64_t total = 0;
  for (const auto& cache : caches_) total += cache.stats().misses;
  return total;
}

}  // namespace coli::runtime
