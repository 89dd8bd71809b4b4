// The engine's own CPU projections of a prompt slice (backend::CpuBackend::
// matmul_rows, the code MoeModel's attention pass runs for its dense
// weights: q, k and v in one region, o in another; quantised weights with
// the slice's rows quantised once, float ones through the float GEMM) for
// the tuning phase. A prompt's projections run kPassSlice rows
// through each matrix, where an expert of the pass sees a few dozen: the
// GEMM's rate at that shape is its own figure (the H200's 16 cores ran
// OLMoE's q4 projections at twice the expert points' rate).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"

namespace coli::backend {
class CpuBackend;
}

namespace coli::probe {

class EngineProjections {
 public:
  // Square matrices of `hidden` in `format`, computed by a CPU backend of
  // `threads` running `cpu_kernel` (a variant name). Errors: the backend's
  // (an unknown or unsupported variant).
  static Result<EngineProjections> create(WeightFormat format, int hidden, const std::string& cpu_kernel, int threads);
  EngineProjections(EngineProjections&&) noexcept;
  EngineProjections& operator=(EngineProjections&&) noexcept;
  ~EngineProjections();

  // q, k and v (`weights[0..2]`) over `tokens` rows of xs (tokens x hidden)
  // in one call, then o (`weights[3]`) over their q output, as the attention
  // pass does; each weight a matrix laid out as coli convert writes it.
  void run(std::span<const std::byte* const, 4> weights, std::span<const float> xs, int tokens);
  bool finite() const;

 private:
  struct State;
  explicit EngineProjections(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace coli::probe
