#include "measure/engine_projections.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_backend.h"
#include "measure/engine_expert_batch.h"

namespace coli::probe {

struct EngineProjections::State {
  std::unique_ptr<backend::CpuBackend> backend;
  WeightFormat format = WeightFormat::q4_g64;
  int hidden = 0;
  std::vector<float> q, k, v, o;
};

EngineProjections::EngineProjections(std::unique_ptr<State> state) : state_(std::move(state)) {}
EngineProjections::EngineProjections(EngineProjections&&) noexcept = default;
EngineProjections& EngineProjections::operator=(EngineProjections&&) noexcept = default;
EngineProjections::~EngineProjections() = default;

Result<EngineProjections> EngineProjections::create(WeightFormat format, int hidden, const std::string& cpu_kernel, int threads) {
  auto cpu = tuning_cpu_backend(cpu_kernel, threads);
  if (!cpu) return cpu.error();
  auto state = std::make_unique<State>();
  state->backend = std::move(*cpu);
  state->format = format;
  state->hidden = hidden;
  return EngineProjections(std::move(state));
}

void EngineProjections::run(std::span<const std::byte* const, 4> weights, std::span<const float> xs, int tokens) {
  State& s = *state_;
  const auto n = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(s.hidden);
  const auto& format = traits(s.format);
  const auto scales = format.scales_offset(static_cast<std::uint64_t>(s.hidden), static_cast<std::uint64_t>(s.hidden));
  const auto view = [&](const std::byte* w) {
    return backend::WeightView{w, format.quantized ? w + scales : nullptr, s.format, s.hidden, s.hidden};
  };
  for (auto* out : {&s.q, &s.k, &s.v, &s.o}) out->resize(n);
  const backend::MatmulOutput qkv[] = {{view(weights[0]), s.q, {}}, {view(weights[1]), s.k, {}}, {view(weights[2]), s.v, {}}};
  s.backend->matmul_rows(xs.first(n), tokens, qkv);
  const backend::MatmulOutput o[] = {{view(weights[3]), s.o, {}}};
  s.backend->matmul_rows(s.q, tokens, o);
}

bool EngineProjections::finite() const {
  return std::all_of(state_->o.begin(), state_->o.end(), [](float v) { return std::isfinite(v); });
}

}  // namespace coli::probe
