#include "measure/engine_expert_batch.h"

#include <algorithm>
#include <cmath>

#include "coli/container/container.h"
#include "coli/experts/slot_storage.h"
#include "cpu/cpu_backend.h"

namespace coli::probe {
namespace {

// The tuning pool seen as expert slots: slot i is the i-th stride of it.
// The pool belongs to the tuning phase, so retiring gives nothing back.
class PoolSlots final : public experts::SlotStorage {
 public:
  PoolSlots(std::span<std::byte> pool, std::size_t stride) : pool_(pool), stride_(stride) {}
  std::size_t slot_count() const override { return pool_.size() / stride_; }
  std::size_t slot_bytes() const override { return stride_; }
  std::size_t slot_stride() const override { return stride_; }
  std::size_t alignment() const override { return container::kAlignment; }
  std::uint64_t bytes_held() const override { return slot_count() * stride_; }
  std::span<std::byte> host_slot(std::size_t slot) override { return pool_.subspan(slot * stride_, stride_); }
  std::span<const std::byte> host_slot(std::size_t slot) const override { return pool_.subspan(slot * stride_, stride_); }
  std::uint64_t retire(std::size_t) override { return 0; }

 private:
  std::span<std::byte> pool_;
  std::size_t stride_;
};

}  // namespace

struct EngineExpertBatch::State {
  std::unique_ptr<backend::CpuBackend> backend;
  container::ExpertLayout layout;
  std::unique_ptr<PoolSlots> slots;
  std::size_t next_slot = 0, kept = 0;  // slots [0, kept) belong to experts 0..kept-1 of every call
  int hidden = 0, width = 0;
  std::vector<int> slot_of_expert;
  std::vector<backend::ExpertRow> rows;
  std::vector<backend::WeightedOutput> sums;
  std::vector<float> out, sum_into;
};

EngineExpertBatch::EngineExpertBatch(std::unique_ptr<State> state) : state_(std::move(state)) {}
EngineExpertBatch::EngineExpertBatch(EngineExpertBatch&&) noexcept = default;
EngineExpertBatch& EngineExpertBatch::operator=(EngineExpertBatch&&) noexcept = default;
EngineExpertBatch::~EngineExpertBatch() = default;

Result<std::unique_ptr<backend::CpuBackend>> tuning_cpu_backend(const std::string& cpu_kernel, int threads) {
  backend::BackendProps props;
  props.kind = backend::BackendKind::cpu;
  props.name = "cpu";
  props.cpu_kernel = cpu_kernel;
  props.threads = threads;
  auto cpu = backend::CpuBackend::create(props);
  if (!cpu) return make_error("kernel tuning: " + cpu.error().message);
  return std::move(*cpu);
}

Result<EngineExpertBatch> EngineExpertBatch::create(WeightFormat format, int hidden, int width, const std::string& cpu_kernel,
                                                    int threads, std::span<std::byte> pool) {
  auto cpu = tuning_cpu_backend(cpu_kernel, threads);
  if (!cpu) return cpu.error();
  auto state = std::make_unique<State>();
  state->backend = std::move(*cpu);
  state->hidden = hidden, state->width = width;
  // As many records as the pool holds slots (set below, once the stride gives them).
  container::ExpertLayout& layout = state->layout;
  layout = container::single_layer_expert_layout(format, static_cast<std::uint64_t>(hidden), static_cast<std::uint64_t>(width), 0);
  state->slots = std::make_unique<PoolSlots>(pool, layout.record_stride);
  if (state->slots->slot_count() == 0) {
    return make_error("kernel tuning: a pool of " + std::to_string(pool.size()) + " bytes holds no " +
                      std::to_string(layout.record_stride) + "-byte expert record");
  }
  layout.experts = static_cast<std::uint32_t>(state->slots->slot_count());
  return EngineExpertBatch(std::move(state));
}

std::size_t EngineExpertBatch::slots() const { return state_->slots->slot_count(); }
std::uint64_t EngineExpertBatch::record_bytes() const { return state_->layout.record_bytes; }

void EngineExpertBatch::run(std::span<const std::pair<int, int>> tasks, int experts, std::span<const float> xs, int tokens) {
  State& s = *state_;
  s.slot_of_expert.resize(static_cast<std::size_t>(experts));
  for (std::size_t e = 0; e < s.slot_of_expert.size(); ++e) {
    if (e < s.kept) {
      s.slot_of_expert[e] = static_cast<int>(e);
      continue;
    }
    s.slot_of_expert[e] = static_cast<int>(s.kept + s.next_slot);
    s.next_slot = (s.next_slot + 1) % (s.slots->slot_count() - s.kept);
  }
  // Each token's outputs in rows of their own (token-major, in the order
  // its experts come), summed per token in the batch as the engine does.
  std::vector<int> per_token(static_cast<std::size_t>(tokens), 0);
  for (auto [token, expert] : tasks) ++per_token[static_cast<std::size_t>(token)];
  const int top_k = tasks.empty() ? 0 : *std::max_element(per_token.begin(), per_token.end());
  std::fill(per_token.begin(), per_token.end(), 0);
  s.rows.clear();
  for (auto [token, expert] : tasks) {
    const int output_row = token * top_k + per_token[static_cast<std::size_t>(token)]++;
    s.rows.push_back({s.slot_of_expert[static_cast<std::size_t>(expert)], token, output_row});
  }
  s.sums.clear();
  for (int token = 0; token < tokens; ++token)
    for (int k = 0; k < per_token[static_cast<std::size_t>(token)]; ++k)
      s.sums.push_back({token, token * top_k + k, 1.0f / static_cast<float>(top_k)});
  const auto hidden = static_cast<std::size_t>(s.hidden);
  s.out.resize(static_cast<std::size_t>(tokens) * static_cast<std::size_t>(top_k) * hidden);
  s.sum_into.assign(static_cast<std::size_t>(tokens) * hidden, 0.0f);
  s.backend->expert_ffn_batch({s.slots.get(), &s.layout, xs.first(static_cast<std::size_t>(tokens) * hidden), s.out, s.rows,
                               s.sums, s.sum_into});
}

void EngineExpertBatch::keep_first(int kept) {
  State& s = *state_;
  s.kept = std::min(static_cast<std::size_t>(std::max(0, kept)), s.slots->slot_count() - 1);
  s.next_slot = 0;
}

std::span<const float> EngineExpertBatch::sums() const { return state_->sum_into; }

bool EngineExpertBatch::finite() const {
  return std::all_of(state_->sum_into.begin(), state_->sum_into.end(), [](float v) { return std::isfinite(v); });
}

}  // namespace coli::probe
