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
#include "coli/backend/backend_memory.h"
#include "cpu/gemv_cpu.h"

namespace coli::backend {

// An expert batch's rows grouped by slot, in O(rows): groups in order of
// first appearance, rows in batch order inside a group (the order decides
// which jobs run together, so it is kept exactly).
class ExpertGrouping {
 public:
  struct Group {
    int slot = -1;
    std::size_t first = 0;  // index into row_order()
    std::size_t count = 0;
  };
  // Throws std::invalid_argument for a slot outside [0, slot_count): a
  // wiring mistake, not a runtime condition.
  const std::vector<Group>& group(std::span<const ExpertRow> rows, std::size_t slot_count);
  const std::vector<Group>& groups() const { return groups_; }
  // Indices into the rows, group after group.
  const std::vector<std::size_t>& row_order() const { return row_order_; }

 private:
  std::vector<Group> groups_;
  std::vector<std::size_t> row_order_;
  std::vector<std::size_t> group_of_row_;
  std::vector<int> group_of_slot_;  // -1 for every slot between calls
};

// A prompt's expert batch runs a chunk of its experts at a time: consecutive
// groups whose rows fit max_rows (a larger group alone is a chunk of its
// own), rows [first_row, first_row + rows) of the row order.
struct StagedChunk {
  std::size_t first_group = 0, end_group = 0, first_row = 0, rows = 0;
};
std::vector<StagedChunk> staged_chunks(std::span<const ExpertGrouping::Group> groups, std::size_t max_rows);

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
  // Bytes of staged rows per chunk of a prompt's expert batch (default
  // kCpuExpertStagingBytes; at least one expert a chunk): tests force several chunks
  // on small models, the expert batch benchmark compares chunk sizes.
  void set_staging_bytes(std::size_t bytes) { staging_bytes_ = bytes; }

 private:
  explicit CpuBackend(BackendProps props) : props_(std::move(props)) {}
  // y = part of the record times x, one matrix at a time.
  void project(const container::ExpertPart& part, WeightFormat format, const std::byte* record,
               std::span<const float> x, std::span<float> y);
  // One expert after another (exact and f32 experts).
  void ffn_each(const ExpertBatch& batch);
  // One job per expert with all its rows; the whole batch in one parallel
  // region whose steps meet at barriers.
  void ffn_quantized(const ExpertBatch& batch);
  // A chunk's gate/up and down jobs as two team works, appended to `works`.
  void chunk_works(const ExpertBatch& batch, const StagedChunk& c, bool one_row,
                   std::vector<std::unique_ptr<kernels::cpu::GemvTeamWork>>& works);
  using ExpertGroup = ExpertGrouping::Group;
  // A quantised matrix (an expert's part, or a matmul_rows output) times
  // quantised rows: y holds x->count() rows of w.rows floats.
  struct QuantizedJob {
    WeightView w;
    const kernels::cpu::QuantizedActivations* x = nullptr;
    std::span<float> y;
  };
  // Quantised matrices (all of `format`) times their rows, in one parallel region.
  void run_quantized(WeightFormat format, std::span<const QuantizedJob> jobs);
  // The same as one step of a team (ffn_quantized's).
  static std::unique_ptr<kernels::cpu::GemvTeamWork> team_work(WeightFormat format, std::span<const QuantizedJob> jobs);
  // The batch's weighted sums (ExpertBatch::sums): grouped and checked by
  // group_sums, then cut into items (a block of one sum row) that any
  // thread may add.
  void group_sums(const ExpertBatch& batch);
  std::size_t sum_items(std::size_t width) const;
  void add_sum_item(const ExpertBatch& batch, std::size_t width, std::size_t item) const;
  static constexpr std::size_t kSumBlock = 64;  // values: four cache lines of a row

  BackendProps props_;
  kernels::cpu::GemvOptions gemv_;
  bool exact_ = false;
  std::size_t staging_bytes_ = kCpuExpertStagingBytes;
  std::atomic<std::uint64_t> slot_bytes_allocated_{0};
  // scratch, kept between calls
  std::vector<float> gate_, up_, down_;
  std::vector<std::size_t> group_of_staged_row_;  // by index into the row order
  std::vector<kernels::cpu::QuantizedActivations> inputs_, hidden_;
  kernels::cpu::QuantizedActivations rows_q8_, rows_q4_;  // matmul_rows
  ExpertGrouping grouping_;
  std::vector<std::size_t> sum_groups_;  // where each sum row's terms start in batch.sums, then the end
};

}  // namespace coli::backend
