// The seam between the engine and the hardware that computes: every matmul
// and every batch of expert FFNs of `coli run` goes through a Backend, and
// every expert cache slot lives in storage a Backend made. The engine above
// knows no kernel type; a backend below knows no routing or cache policy.
// docs/backends.md says how to add one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "coli/backend/backend_memory.h"
#include "coli/backend/backend_props.h"
#include "coli/base/result.h"
#include "coli/base/weight_format.h"
#include "coli/container/container.h"
#include "coli/experts/slot_storage.h"

namespace coli::backend {

// Weight layouts are the one vocabulary of coli/base/weight_format.h.
using coli::WeightFormat;

// A 2-D weight as the container holds it, wherever it is: `rows` x `cols`
// values at `data`; quantised formats keep their scales at `scales`
// (q8_row: a float per row; q4_g64: a binary16 per 64 columns of a row).
struct WeightView {
  const std::byte* data = nullptr;
  const std::byte* scales = nullptr;  // quantised formats only
  WeightFormat format = WeightFormat::f32;
  int rows = 0;
  int cols = 0;
};

// One expert FFN of a batch: out[output_row] = down(silu(gate(x)) * up(x))
// with x = in[input_row], for the expert held in `slot`.
struct ExpertRow {
  int slot = -1;
  int input_row = 0;
  int output_row = 0;
};

// A batch of expert FFNs of one MoE layer, described without kernel types:
// the layer's slot storage, the container's record layout (format and the
// gate/up/down parts' offsets inside a record) and float activations, rows
// of `layout.parts[0].cols` (in) and `layout.parts[2].rows` (out) floats.
// One term of an expert batch's weighted sums: weight x out[output_row],
// summed into row sum_row of ExpertBatch::sum_into.
struct WeightedOutput {
  int sum_row = 0;
  int output_row = 0;
  float weight = 0;
};

struct ExpertBatch {
  const experts::SlotStorage* storage = nullptr;
  const container::ExpertLayout* layout = nullptr;
  std::span<const float> in;
  std::span<float> out;
  std::span<const ExpertRow> rows;
  // Optional: after the FFNs, each sum_row's terms (`sums` is ordered by
  // sum_row) are summed from zero in their order with forward::add_scaled and the
  // sum added to that row of sum_into (rows as wide as out's): a token's
  // experts in routing order, as the engine sums them, by the backend's
  // threads instead of after the batch on one.
  std::span<const WeightedOutput> sums;
  std::span<float> sum_into;
};

// One product of matmul_rows: y = W x[t] (+ bias) for every row t of x.
struct MatmulOutput {
  WeightView w;
  std::span<float> y;            // count * w.rows floats, row t after row t-1
  std::span<const float> bias;   // w.rows floats, or empty
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const BackendProps& props() const = 0;
  // Its memory as the planner prices it, plus what it really allocated.
  virtual BackendMemory memory() const = 0;

  // Storage for one layer's expert slots: `slots` of at least `slot_bytes`,
  // each starting on `alignment`. Errors: bad sizes or alignment, no memory.
  virtual Result<std::unique_ptr<experts::SlotStorage>> create_slot_storage(std::size_t slots, std::size_t slot_bytes,
                                                                            std::size_t alignment) = 0;
  // Copies an expert record into `slot` of storage this backend made (the
  // way into device memory; host storage is also read into directly). Safe
  // to call from I/O threads for distinct slots. Errors: a slot out of
  // range, more bytes than a slot holds, storage of another backend.
  virtual Status upload(experts::SlotStorage& storage, int slot, std::span<const std::byte> bytes) = 0;

  // Every row of the batch; results do not depend on how rows are batched.
  virtual void expert_ffn_batch(const ExpertBatch& batch) = 0;
  // y = W x (+ bias): x has w.cols floats, y w.rows.
  virtual void matmul(const WeightView& w, std::span<const float> x, std::span<float> y,
                      std::span<const float> bias = {}) = 0;
  // Several matrices times the same `count` rows of x (count * cols floats),
  // as one piece of work: each weight row is read once per tile of rows, the
  // activations are prepared once for all outputs (q, k and v of a layer;
  // gate and up). Row t of every y equals matmul() of row t bit for bit.
  virtual void matmul_rows(std::span<const float> x, int count, std::span<const MatmulOutput> outputs) = 0;
  void matmul_rows(const WeightView& w, std::span<const float> x, int count, std::span<float> y,
                   std::span<const float> bias = {}) {
    const MatmulOutput output{w, y, bias};
    matmul_rows(x, count, std::span(&output, 1));
  }
  // The compute threads from now on (a prefill and a decode thread set);
  // the caller pins them. Calls in flight are not affected.
  virtual void set_threads(int threads) = 0;
};

// The backend `props` describe, made for this process. Errors: a kind this
// build has no backend for, a CPU kernel this CPU lacks (named).
Result<std::unique_ptr<Backend>> create_backend(const BackendProps& props);

}  // namespace coli::backend
