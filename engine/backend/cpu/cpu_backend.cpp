#include "cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "coli/forward/ops.h"
#include "cpu/parallel_for.h"
#include "reference/gemv_reference.h"

namespace coli::backend {
namespace {

// Resizes `v` to at least `n` elements (new ones `fill`, when given), never
// down: what a larger call grew is kept for the next one.
template <class T, class... Fill>
void grow_to(std::vector<T>& v, std::size_t n, const Fill&... fill) {
  if (v.size() < n) v.resize(n, fill...);
}

namespace cpu = kernels::cpu;

const std::byte* record_of(const ExpertBatch& batch, int slot) {
  const auto bytes = batch.storage->host_slot(static_cast<std::size_t>(slot));
  // Storage from another backend is a wiring mistake, not a runtime condition.
  if (bytes.empty()) throw std::invalid_argument("CPU backend given expert slots the host cannot address");
  return bytes.data();
}

// `rows` rows from row i (of the row order) in chunk c's staging buffer.
std::span<float> staged_rows(std::vector<float>& buffer, const StagedChunk& c, std::size_t i, std::size_t rows,
                             std::size_t row_width) {
  return std::span(buffer).subspan((i - c.first_row) * row_width, rows * row_width);
}

// Row `row` of the batch (an index into batch.rows): its output row in batch.out.
std::span<float> batch_output_row(const ExpertBatch& batch, std::size_t row) {
  const std::size_t width = batch.layout->parts[2].rows;
  return batch.out.subspan(static_cast<std::size_t>(batch.rows[row].output_row) * width, width);
}

cpu::Q4G64View q4_view(const std::byte* weights, const std::byte* scales, int rows, int cols) {
  return {reinterpret_cast<const std::uint8_t*>(weights), reinterpret_cast<const std::uint16_t*>(scales), rows, cols};
}
cpu::Q8RowView q8_view(const std::byte* weights, const std::byte* scales, int rows, int cols) {
  return {reinterpret_cast<const std::int8_t*>(weights), reinterpret_cast<const float*>(scales), rows, cols};
}

// An expert matrix: a part of a record.
WeightView part_view(const container::ExpertPart& part, WeightFormat format, const std::byte* record) {
  return {record + part.weights_offset, record + part.scales_offset, format, static_cast<int>(part.rows),
          static_cast<int>(part.cols)};
}

// The jobs as the kernels' jobs of one format (Q4GemvJob or Q8GemvJob, the
// view made by `view`), all in one parallel region.
template <class KernelJob, class Job, class MakeView>
void run_as(std::span<const Job> jobs, MakeView view, int threads) {
  std::vector<KernelJob> kernel_jobs;
  kernel_jobs.reserve(jobs.size());
  for (const Job& job : jobs) {
    kernel_jobs.push_back({view(job.w.data, job.w.scales, job.w.rows, job.w.cols), job.x, job.y});
  }
  if (!kernel_jobs.empty()) cpu::gemv_quantized_many(kernel_jobs, threads);
}

// The jobs as one step of a team (cpu::GemvTeamWork), checked here.
template <class KernelJob, class Job, class MakeView>
std::unique_ptr<cpu::GemvTeamWork> team_work_as(std::span<const Job> jobs, MakeView view) {
  std::vector<KernelJob> kernel_jobs;
  kernel_jobs.reserve(jobs.size());
  for (const Job& job : jobs) {
    kernel_jobs.push_back({view(job.w.data, job.w.scales, job.w.rows, job.w.cols), job.x, job.y});
  }
  return std::make_unique<cpu::GemvTeamWork>(std::move(kernel_jobs));
}

}  // namespace

Result<std::unique_ptr<CpuBackend>> CpuBackend::create(const BackendProps& props) {
  if (props.kind != BackendKind::cpu) {
    return make_error("the CPU backend was given props of a " + std::string(backend_kind_name(props.kind)) + " device");
  }
  const bool exact = props.cpu_kernel == "exact";
  auto variant = props.cpu_kernel.empty() || exact ? cpu::selected_variant() : cpu::parse_variant(props.cpu_kernel);
  if (!variant) return variant.error();
  if (!cpu::variant_supported(*variant)) {
    return make_error("CPU kernel " + std::string(cpu::variant_name(*variant)) + " is not supported by this CPU");
  }
  std::unique_ptr<CpuBackend> backend(new CpuBackend(props));
  backend->exact_ = exact;
  const int threads = props.compute_pus.empty() ? std::max(1, props.threads) : props.compute_pus.size();
  backend->gemv_ = {*variant, threads};
  // The props say what really runs: the variant chosen and the thread count.
  backend->props_.cpu_kernel = exact ? "exact" : std::string(cpu::variant_name(*variant));
  backend->props_.threads = threads;
  return backend;
}

BackendMemory CpuBackend::memory() const {
  BackendMemory memory = cpu_backend_memory(props_);
  memory.slot_bytes_allocated = slot_bytes_allocated_.load();
  return memory;
}

Result<std::unique_ptr<experts::SlotStorage>> CpuBackend::create_slot_storage(std::size_t slots, std::size_t slot_bytes,
                                                                              std::size_t alignment) {
  auto storage = experts::HostSlabStorage::create(slots, slot_bytes, alignment);
  if (!storage) return storage.error();
  slot_bytes_allocated_ += (*storage)->bytes_held();
  return std::unique_ptr<experts::SlotStorage>(std::move(*storage));
}

Status CpuBackend::upload(experts::SlotStorage& storage, int slot, std::span<const std::byte> bytes) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= storage.slot_count()) {
    return make_error("upload to slot " + std::to_string(slot) + " of a storage with " +
                      std::to_string(storage.slot_count()) + " slots");
  }
  const auto destination = storage.host_slot(static_cast<std::size_t>(slot));
  if (destination.empty()) return make_error("the CPU backend cannot upload into device storage of another backend");
  if (bytes.size() > destination.size()) {
    return make_error("upload of " + std::to_string(bytes.size()) + " bytes into a slot of " +
                      std::to_string(destination.size()));
  }
  std::memcpy(destination.data(), bytes.data(), bytes.size());
  return Ok{};
}

void CpuBackend::matmul(const WeightView& w, std::span<const float> x, std::span<float> y,
                        std::span<const float> bias) {
  if (!traits(w.format).quantized) {
    forward::gemv_dense({w.format, w.rows, w.cols, w.data}, x, y, gemv_.threads, bias);
    return;
  }
  const bool int4 = w.format == WeightFormat::q4_g64;
  if (int4 && exact_) {
    const auto v = q4_view(w.data, w.scales, w.rows, w.cols);
    kernels::gemv_reference_q4(v.nibbles, v.scales, v.rows, v.cols, x, y);
  } else if (int4) {
    cpu::gemv(q4_view(w.data, w.scales, w.rows, w.cols), x, y, gemv_);
  } else if (exact_) {
    const auto v = q8_view(w.data, w.scales, w.rows, w.cols);
    kernels::gemv_reference_q8(v.weights, v.scales, v.rows, v.cols, x, y);
  } else {
    cpu::gemv(q8_view(w.data, w.scales, w.rows, w.cols), x, y, gemv_);
  }
  for (std::size_t i = 0; i < bias.size(); ++i) y[i] += bias[i];
}

void CpuBackend::matmul_rows(std::span<const float> x, int count, std::span<const MatmulOutput> outputs) {
  if (outputs.empty() || count <= 0) return;
  for (const MatmulOutput& o : outputs) {
    if (o.w.cols != outputs[0].w.cols || x.size() != static_cast<std::size_t>(count) * static_cast<std::size_t>(o.w.cols) ||
        o.y.size() != static_cast<std::size_t>(count) * static_cast<std::size_t>(o.w.rows)) {
      throw std::invalid_argument("matmul_rows: x must hold count * cols floats, each y count * rows, one cols for all");
    }
  }
  // Float matrices: one region over the rows of all of them.
  std::vector<forward::DenseProduct> dense;
  for (const MatmulOutput& o : outputs) {
    if (!traits(o.w.format).quantized) dense.push_back({{o.w.format, o.w.rows, o.w.cols, o.w.data}, o.y, o.bias});
  }
  if (!dense.empty()) forward::gemv_dense_many(dense, x, count, gemv_.threads);
  // Quantised ones: the rows quantised once per format, then one region per format.
  for (const WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
    std::vector<const MatmulOutput*> of_format;
    for (const MatmulOutput& o : outputs) {
      if (o.w.format == format) of_format.push_back(&o);
    }
    if (of_format.empty()) continue;
    if (exact_) {
      const std::size_t cols = static_cast<std::size_t>(of_format[0]->w.cols);
      for (const MatmulOutput* o : of_format) {
        const std::size_t rows = static_cast<std::size_t>(o->w.rows);
        for (int t = 0; t < count; ++t) matmul(o->w, x.subspan(t * cols, cols), o->y.subspan(t * rows, rows), o->bias);
      }
      continue;
    }
    cpu::QuantizedActivations& activations = format == WeightFormat::q8_row ? rows_q8_ : rows_q4_;
    activations.quantize(gemv_.variant, format, x, count, of_format[0]->w.cols, gemv_.threads);
    std::vector<QuantizedJob> jobs;
    for (const MatmulOutput* o : of_format) jobs.push_back({o->w, &activations, o->y});
    run_quantized(format, jobs);
    for (const MatmulOutput* o : of_format) {
      const std::size_t rows = static_cast<std::size_t>(o->w.rows);
      for (int t = 0; t < count && !o->bias.empty(); ++t) {
        for (std::size_t i = 0; i < rows; ++i) o->y[t * rows + i] += o->bias[i];
      }
    }
  }
}

void CpuBackend::set_threads(int threads) {
  gemv_.threads = std::max(1, threads);
  props_.threads = gemv_.threads;
}

void CpuBackend::project(const container::ExpertPart& part, WeightFormat format, const std::byte* record,
                         std::span<const float> x, std::span<float> y) {
  matmul(part_view(part, format, record), x, y);
}

void CpuBackend::expert_ffn_batch(const ExpertBatch& batch) {
  if (batch.rows.empty()) return;
  group_sums(batch);
  if (!exact_ && traits(batch.layout->format).cpu_int8_kernels) {
    ffn_quantized(batch);
    return;
  }
  ffn_each(batch);
  const std::size_t width = batch.layout->parts[2].rows;
  for (std::size_t i = 0; i < sum_items(width); ++i) add_sum_item(batch, width, i);
}

// The runs of batch.sums with one sum_row, checked against out and sum_into
// and for their order (two runs of one row could be added by two threads at
// once): a wiring mistake, thrown here, before any team.
void CpuBackend::group_sums(const ExpertBatch& batch) {
  sum_groups_.clear();
  const std::size_t width = batch.layout->parts[2].rows;
  for (std::size_t i = 0; i < batch.sums.size(); ++i) {
    const WeightedOutput& term = batch.sums[i];
    if (term.output_row < 0 || static_cast<std::size_t>(term.output_row + 1) * width > batch.out.size() ||
        term.sum_row < 0 || static_cast<std::size_t>(term.sum_row + 1) * width > batch.sum_into.size()) {
      throw std::invalid_argument("expert batch: a weighted sum's rows are outside out or sum_into");
    }
    if (i > 0 && term.sum_row < batch.sums[i - 1].sum_row) {
      throw std::invalid_argument("expert batch: weighted sums must be ordered by sum row");
    }
    if (i == 0 || term.sum_row != batch.sums[i - 1].sum_row) sum_groups_.push_back(i);
  }
  if (!batch.sums.empty()) sum_groups_.push_back(batch.sums.size());
}

// Items of the weighted sums: each sum row cut into blocks of kSumBlock values.
std::size_t CpuBackend::sum_items(std::size_t width) const {
  const std::size_t sum_rows = sum_groups_.empty() ? 0 : sum_groups_.size() - 1;
  return sum_rows * ((width + kSumBlock - 1) / kSumBlock);
}

// One block of one sum row: its terms summed from zero in their order
// (forward::add_scaled, as the engine sums a token's experts), then added to
// sum_into. Every value goes through the same operations in the same order
// as a whole row summed on one thread, so the bits are the same.
void CpuBackend::add_sum_item(const ExpertBatch& batch, std::size_t width, std::size_t item) const {
  const std::size_t blocks = (width + kSumBlock - 1) / kSumBlock, group = item / blocks;
  const std::size_t begin = item % blocks * kSumBlock, count = std::min(kSumBlock, width - begin);
  float sum[kSumBlock] = {};
  const std::span<float> block(sum, count);
  for (std::size_t i = sum_groups_[group]; i < sum_groups_[group + 1]; ++i) {
    const WeightedOutput& term = batch.sums[i];
    forward::add_scaled(term.weight, batch.out.subspan(static_cast<std::size_t>(term.output_row) * width + begin, count), block);
  }
  float* row = batch.sum_into.data() + static_cast<std::size_t>(batch.sums[sum_groups_[group]].sum_row) * width + begin;
  for (std::size_t j = 0; j < count; ++j) row[j] += sum[j];
}

void CpuBackend::ffn_each(const ExpertBatch& batch) {
  const auto& [gate_part, up_part, down_part] = std::tie(batch.layout->parts[0], batch.layout->parts[1], batch.layout->parts[2]);
  const std::size_t in_width = gate_part.cols, out_width = down_part.rows;
  gate_.resize(gate_part.rows);
  up_.resize(up_part.rows);
  for (const ExpertRow& row : batch.rows) {
    const std::byte* record = record_of(batch, row.slot);
    const auto x = batch.in.subspan(static_cast<std::size_t>(row.input_row) * in_width, in_width);
    project(gate_part, batch.layout->format, record, x, gate_);
    project(up_part, batch.layout->format, record, x, up_);
    forward::swiglu(gate_, up_);
    project(down_part, batch.layout->format, record, gate_,
            batch.out.subspan(static_cast<std::size_t>(row.output_row) * out_width, out_width));
  }
}

// With the SIMD kernels every expert of the batch is one job with all of
// its rows (the tokens routed to it), so each weight row is read once per
// tile of tokens. The whole batch is one team (cpu::team_steps) whose steps
// meet at barriers, chunk after chunk of its experts (staged_chunks): rows
// quantised where they lie, all gates and ups, SwiGLU and its quantisation,
// all downs, rows scattered back; then the weighted sums when the batch asks
// for them. As regions of their own, a decode token's gate/up, SwiGLU and
// down cost two more fork/joins per layer (~4.5 us each at 16 threads, a
// barrier ~1.5 us: docs/benchmarks.md). Every output equals ffn_each's bit
// for bit: quantisation is per row and every Y[t] of a many-token job
// equals the one-token product.
void CpuBackend::ffn_quantized(const ExpertBatch& batch) {
  const WeightFormat format = batch.layout->format;
  const auto& [gate_part, up_part, down_part] = std::tie(batch.layout->parts[0], batch.layout->parts[1], batch.layout->parts[2]);
  const std::size_t width = gate_part.rows, in_width = gate_part.cols, out_width = down_part.rows;
  const std::vector<ExpertGroup>& groups = grouping_.group(batch.rows, batch.storage->slot_count());
  const std::vector<std::size_t>& row_order = grouping_.row_order();
  auto input_of = [&](const ExpertRow& row) { return batch.in.subspan(static_cast<std::size_t>(row.input_row) * in_width, in_width); };
  // Decode: every expert takes the one token's row, quantised once for all
  // (quantisation is per row, so the bytes are the same), in one chunk.
  const bool one_row = std::all_of(groups.begin(), groups.end(), [](const ExpertGroup& g) { return g.count == 1; }) &&
                       std::all_of(batch.rows.begin(), batch.rows.end(),
                                   [&](const ExpertRow& row) { return row.input_row == batch.rows.front().input_row; });
  const std::vector<StagedChunk> chunks =
      staged_chunks(groups, one_row ? batch.rows.size() : cpu_staged_chunk_rows(staging_bytes_, width, out_width));
  std::size_t largest_chunk = 0;
  for (const StagedChunk& c : chunks) largest_chunk = std::max(largest_chunk, c.rows);
  // The buffers only grow: a decode token's call between two prompts
  // would otherwise free the quantised inputs of all but top_k experts and
  // shrink the rows, and the next prompt's first layer allocate and zero
  // them again (a 64-wide model's prompt ran 1.5x slower per routed row).
  grow_to(inputs_, groups.size());
  grow_to(hidden_, groups.size());
  grow_to(gate_, largest_chunk * width);
  grow_to(up_, largest_chunk * width);
  if (!one_row) grow_to(down_, largest_chunk * out_width);
  group_of_staged_row_.resize(batch.rows.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    std::fill_n(group_of_staged_row_.begin() + static_cast<std::ptrdiff_t>(groups[g].first), groups[g].count, g);
  // Every job's activations are shaped before the team starts, so the jobs
  // are checked here; the team's steps fill them.
  if (one_row) inputs_.front().quantize(gemv_.variant, format, input_of(batch.rows.front()), 1, static_cast<int>(in_width));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int count = static_cast<int>(groups[g].count);
    if (!one_row) inputs_[g].shape(gemv_.variant, format, count, static_cast<int>(in_width));
    hidden_[g].shape(gemv_.variant, format, count, static_cast<int>(width));
  }
  auto output_row = [&](std::size_t i) { return batch_output_row(batch, row_order[i]); };
  std::vector<std::unique_ptr<cpu::GemvTeamWork>> works;  // per chunk: gate/up, then down
  for (const StagedChunk& c : chunks) chunk_works(batch, c, one_row, works);
  // The steps of chunk c over its rows: row i's group and place in it.
  auto each_row = [&](const StagedChunk& c, auto step) {
    return [&, c, step] {
      cpu::for_each_in_team(c.rows, [&](std::size_t r) {
        const std::size_t i = c.first_row + r, g = group_of_staged_row_[i];
        step(i, g, static_cast<int>(i - groups[g].first));
      });
    };
  };
  std::vector<std::function<void()>> steps;
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const StagedChunk& c = chunks[k];
    if (!one_row) {
      steps.emplace_back(each_row(c, [&](std::size_t i, std::size_t g, int local) {
        inputs_[g].fill_vector(local, input_of(batch.rows[row_order[i]]));
      }));
    }
    steps.emplace_back([&, k] { works[2 * k]->share(); });
    steps.emplace_back(each_row(c, [&, c](std::size_t i, std::size_t g, int local) {
      const auto gate = staged_rows(gate_, c, i, 1, width);
      forward::swiglu(gate, staged_rows(up_, c, i, 1, width));
      hidden_[g].fill_vector(local, gate);
    }));
    steps.emplace_back([&, k] { works[2 * k + 1]->share(); });
    if (!one_row) {
      steps.emplace_back(each_row(c, [&, c](std::size_t i, std::size_t, int) {
        const auto from = staged_rows(down_, c, i, 1, out_width);
        std::copy(from.begin(), from.end(), output_row(i).begin());
      }));
    }
  }
  if (!batch.sums.empty()) {
    steps.emplace_back([&] { cpu::for_each_in_team(sum_items(out_width), [&](std::size_t i) { add_sum_item(batch, out_width, i); }); });
  }
  cpu::team_steps(gemv_.threads, steps);
}

// Chunk c's jobs as two team works, gate/up then down: their outputs the
// chunk's staged rows, or decode's output rows in place.
void CpuBackend::chunk_works(const ExpertBatch& batch, const StagedChunk& c, bool one_row,
                             std::vector<std::unique_ptr<cpu::GemvTeamWork>>& works) {
  const WeightFormat format = batch.layout->format;
  const auto& [gate_part, up_part, down_part] = std::tie(batch.layout->parts[0], batch.layout->parts[1], batch.layout->parts[2]);
  const std::size_t width = gate_part.rows, out_width = down_part.rows;
  const std::vector<ExpertGroup>& groups = grouping_.groups();
  std::vector<QuantizedJob> gate_up_jobs, down_jobs;
  for (std::size_t g = c.first_group; g < c.end_group; ++g) {
    const ExpertGroup& group = groups[g];
    const std::byte* record = record_of(batch, group.slot);
    const cpu::QuantizedActivations* input = one_row ? &inputs_.front() : &inputs_[g];
    gate_up_jobs.push_back({part_view(gate_part, format, record), input, staged_rows(gate_, c, group.first, group.count, width)});
    gate_up_jobs.push_back({part_view(up_part, format, record), input, staged_rows(up_, c, group.first, group.count, width)});
    down_jobs.push_back({part_view(down_part, format, record), &hidden_[g],
                         one_row ? batch_output_row(batch, grouping_.row_order()[group.first])
                                 : staged_rows(down_, c, group.first, group.count, out_width)});
  }
  works.push_back(team_work(format, gate_up_jobs));
  works.push_back(team_work(format, down_jobs));
}

std::vector<StagedChunk> staged_chunks(std::span<const ExpertGrouping::Group> groups, std::size_t max_rows) {
  std::vector<StagedChunk> chunks;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (chunks.empty() || chunks.back().rows + groups[g].count > max_rows)
      chunks.push_back({g, g, groups[g].first, 0});
    chunks.back().end_group = g + 1;
    chunks.back().rows += groups[g].count;
  }
  return chunks;
}

const std::vector<ExpertGrouping::Group>& ExpertGrouping::group(std::span<const ExpertRow> rows, std::size_t slot_count) {
  for (const ExpertRow& row : rows) {
    if (row.slot < 0 || static_cast<std::size_t>(row.slot) >= slot_count) {
      throw std::invalid_argument("expert row for slot " + std::to_string(row.slot) + " of a storage with " +
                                  std::to_string(slot_count) + " slots");
    }
  }
  grow_to(group_of_slot_, slot_count, -1);
  groups_.clear();
  group_of_row_.resize(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    int& g = group_of_slot_[static_cast<std::size_t>(rows[i].slot)];
    if (g < 0) {
      g = static_cast<int>(groups_.size());
      groups_.push_back({rows[i].slot, 0, 0});
    }
    ++groups_[static_cast<std::size_t>(g)].count;
    group_of_row_[i] = static_cast<std::size_t>(g);
  }
  // A stable counting sort: each group's count is rebuilt as its rows are placed.
  for (std::size_t g = 0, first = 0; g < groups_.size(); first += groups_[g].count, ++g) {
    groups_[g].first = first;
    group_of_slot_[static_cast<std::size_t>(groups_[g].slot)] = -1;
  }
  for (Group& g : groups_) g.count = 0;
  row_order_.resize(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Group& g = groups_[group_of_row_[i]];
    row_order_[g.first + g.count++] = i;
  }
  return groups_;
}

std::unique_ptr<cpu::GemvTeamWork> CpuBackend::team_work(WeightFormat format, std::span<const QuantizedJob> jobs) {
  if (format == WeightFormat::q4_g64) return team_work_as<cpu::Q4GemvJob>(jobs, q4_view);
  return team_work_as<cpu::Q8GemvJob>(jobs, q8_view);
}

void CpuBackend::run_quantized(WeightFormat format, std::span<const QuantizedJob> jobs) {
  if (format == WeightFormat::q4_g64) run_as<cpu::Q4GemvJob>(jobs, q4_view, gemv_.threads);
  else run_as<cpu::Q8GemvJob>(jobs, q8_view, gemv_.threads);
}

}  // namespace coli::backend
