// The CPU backend: today's engine code behind the seam. Quantised matrices
// run on the SIMD GEMV kernels (kernels/cpu, the variant and thread count
// from the props) or, with cpu_kernel "exact", on the scalar reference with
// f32 activations; float matrices on forward::gemv_dense. Expert slots are a
// host slab (reads land in them directly).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coli/backend/backend.h"
#include "cpu/gemv_cpu.h"

namespace coli::backend {

class CpuBackend final : public Backend {
 public:
  // Errors: props of another kind, a kernel name that is not a variant or
  // "exact", a variant this CPU cannot run. "" = the best this CPU runs
  // (COLI_CPU_KERNEL may force one).
  static Result<std::unique_ptr<CpuBackend>> create(const BackendProps& props);

  const BackendProps& props() const override { return props_; }
  BackendMemory memory() const override;
  Result<std::unique_ptr<experts::SlotStorage>> create_slot_storage(std::size_t slots, std::size_t slot_bytes,
                                                                    std::size_t alignment) override;
  Status upload(experts::SlotStorage& storage, int slot, std::span<const std::byte> bytes) override;
  void expert_ffn_batch(const ExpertBatch& batch) override;
  void matmul(const WeightView& w, std::span<const float> x, std::span<float> y,
              std::span<const float> bias = {}) override;
  void matmul_rows(std::span<const float> x, int count, std::span<const MatmulOutput> outputs) override;
  using Backend::matmul_rows;
  void set_threads(int threads) override;

 private:
  explicit CpuBackend(BackendProps props) : props_(std::move(props)) {}
  // y = part of the record times x, one matrix at a time.
  void project(const container::ExpertPart& part, WeightFormat format, const std::byte* record,
               std::span<const float> x, std::span<float> y);
  // One expert after another (exact and f32 experts).
  void ffn_each(const ExpertBatch& batch);
  // One job per expert with all its rows: gates and ups in one parallel
  // region, downs in another.
  void ffn_quantized(const ExpertBatch& batch);
  struct ExpertGroup {
    int slot = -1;
    std::size_t first = 0;  // index into grouped_rows_
    std::size_t count = 0;
  };
  const std::vector<ExpertGroup>& group_by_slot(std::span<const ExpertRow> rows);
  void for_each_group(const std::vector<ExpertGroup>& groups, const std::function<void(std::size_t)>& prepare);
  // One expert matrix (a part of a record) times a group's quantised rows.
  struct QuantizedJob {
    const container::ExpertPart* part = nullptr;
    const std::byte* record = nullptr;
    const kernels::cpu::QuantizedActivations* x = nullptr;
    std::span<float> y;
  };
  void run_quantized(WeightFormat format, std::span<const QuantizedJob> jobs);
  // copy(i) for every row i < rows, across the team from kParallelPrepareRows rows on.
  void for_each_row(std::size_t rows, const std::function<void(std::size_t)>& copy);

  // From this many rows on, quantising in parallel pays for a fork/join
  // (the kernels' own threshold for gemv_batched).
  static constexpr int kParallelQuantizeRows = 8;
  // From this many expert rows on (prefill), per-expert preparation runs across the team.
  static constexpr std::size_t kParallelPrepareRows = 16;

  BackendProps props_;
  kernels::cpu::GemvOptions gemv_;
  bool exact_ = false;
  std::atomic<std::uint64_t> slot_bytes_allocated_{0};
  // scratch, kept between calls
  std::vector<float> gate_, up_, down_, gathered_;
  std::vector<kernels::cpu::QuantizedActivations> inputs_, hidden_;
  kernels::cpu::QuantizedActivations rows_q8_, rows_q4_;  // matmul_rows
  std::vector<ExpertGroup> groups_;
  std::vector<std::size_t> grouped_rows_;
};

}  // namespace coli::backend
