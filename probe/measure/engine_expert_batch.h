// The engine's own CPU expert batch (backend::CpuBackend::expert_ffn_batch,
// the code decode and prefill run) for the tuning phase: expert records laid
// out as coli convert lays them out, in slots over the tuning pool's memory,
// so every call reads its weights from RAM as a real pass does. Timing this
// instead of a replica keeps the probe's figures honest when the engine's
// batch changes (a replica quantised on one thread where the engine used its
// team and measured a third of the engine's prefill rate on 16 cores).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"

namespace coli::backend {
class CpuBackend;
}
namespace coli::container {
struct ExpertLayout;
}
namespace coli::experts {
class SlotStorage;
}

namespace coli::probe {

// The tuning phase's expert shapes: OLMoE-1B-7B's hidden 2048 and 64 experts
// of width 1024, top-8 (kernel_timing.cpp's points and the reads beside
// compute time them).
inline constexpr int kOlmoeHidden = 2048, kOlmoeWidth = 1024, kOlmoeTopK = 8, kOlmoeExperts = 64;

// The engine's CPU backend for the tuning phase's calls: `threads` running
// `cpu_kernel` (a variant name). Errors: an unknown or unsupported variant.
Result<std::unique_ptr<backend::CpuBackend>> tuning_cpu_backend(const std::string& cpu_kernel, int threads);

class EngineExpertBatch {
 public:
  // Experts of hidden x width in `format`, computed by a CPU backend of
  // `threads` running `cpu_kernel` (a variant name), their records in
  // `pool` (never written). Errors: the backend's (an unknown or unsupported
  // variant), a pool smaller than one record.
  static Result<EngineExpertBatch> create(WeightFormat format, int hidden, int width, const std::string& cpu_kernel,
                                          int threads, std::span<std::byte> pool);
  EngineExpertBatch(EngineExpertBatch&&) noexcept;
  EngineExpertBatch& operator=(EngineExpertBatch&&) noexcept;
  ~EngineExpertBatch();

  std::size_t slots() const;                 // records the pool holds
  std::uint64_t record_bytes() const;        // meaningful bytes of one record
  // One MoE layer's experts for `tokens` rows of xs (tokens x hidden):
  // `tasks` are (token, expert) pairs, expert-major as the expert store
  // orders a round, experts numbered 0..experts-1 within this call; each
  // call takes the next `experts` slots of the pool. Every token's outputs
  // are summed in the batch as the engine's resident pass does.
  void run(std::span<const std::pair<int, int>> tasks, int experts, std::span<const float> xs, int tokens);
  // From now on experts 0..kept-1 of every call read the pool's first
  // `kept` slots, the same records call after call (a prompt's popular
  // experts, re-read round after round at one layer), and the others cycle
  // through the slots after them. At most slots() - 1 (0: none kept).
  void keep_first(int kept);
  // The last call's per-token sums (tokens x hidden): each token's experts'
  // outputs, each weighted 1/top_k.
  std::span<const float> sums() const;
  bool finite() const;

 private:
  struct State;
  explicit EngineExpertBatch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace coli::probe
