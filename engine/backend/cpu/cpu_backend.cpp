#include "cpu_backend.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>

#include "coli/forward/ops.h"
#include "reference/gemv_reference.h"

namespace coli::backend {
namespace {

namespace cpu = kernels::cpu;

const std::byte* record_of(const ExpertBatch& batch, int slot) {
  const auto bytes = batch.storage->host_slot(static_cast<std::size_t>(slot));
  // Storage from another backend is a wiring mistake, not a runtime condition.
  if (bytes.empty()) throw std::invalid_argument("CPU backend given expert slots the host cannot address");
  return bytes.data();
}

cpu::Q4G64View q4_view(const std::byte* weights, const std::byte* scales, int rows, int cols) {
  return {reinterpret_cast<const std::uint8_t*>(weights), reinterpret_cast<const std::uint16_t*>(scales), rows, cols};
}
cpu::Q8RowView q8_view(const std::byte* weights, const std::byte* scales, int rows, int cols) {
  return {reinterpret_cast<const std::int8_t*>(weights), reinterpret_cast<const float*>(scales), rows, cols};
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

void CpuBackend::project(const container::ExpertPart& part, WeightFormat format, const std::byte* record,
                         std::span<const float> x, std::span<float> y) {
  matmul({record + part.weights_offset, record + part.scales_offset, format, static_cast<int>(part.rows),
          static_cast<int>(part.cols)},
         x, y);
}

void CpuBackend::expert_ffn_batch(const ExpertBatch& batch) {
  if (batch.rows.empty()) return;
  if (!exact_ && traits(batch.layout->format).cpu_int8_kernels) ffn_quantized(batch);
  else ffn_each(batch);
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
    for (std::size_t i = 0; i < gate_.size(); ++i) gate_[i] = forward::silu(gate_[i]) * up_[i];
    project(down_part, batch.layout->format, record, gate_,
            batch.out.subspan(static_cast<std::size_t>(row.output_row) * out_width, out_width));
  }
}

// With the SIMD kernels, all gates and ups run in one parallel region and
// all downs in another (the fork/join of a region costs about as much as
// streaming 0.3 MB at 16 threads); every output equals ffn_each's bit for bit.
void CpuBackend::ffn_quantized(const ExpertBatch& batch) {
  const WeightFormat format = batch.layout->format;
  const bool q4 = format == WeightFormat::q4_g64;
  const auto& [gate_part, up_part, down_part] = std::tie(batch.layout->parts[0], batch.layout->parts[1], batch.layout->parts[2]);
  const std::size_t width = gate_part.rows, in_width = gate_part.cols, out_width = down_part.rows;
  const std::size_t count = batch.rows.size();
  inputs_.resize(count);
  hidden_.resize(count);
  gate_.resize(count * width);
  up_.resize(count * width);
  std::vector<cpu::Q4GemvJob> q4_jobs;
  std::vector<cpu::Q8GemvJob> q8_jobs;
  // One job list per stage, then one parallel region for it.
  auto add_job = [&](const container::ExpertPart& part, const std::byte* record, const cpu::QuantizedActivations& x,
                     std::span<float> y) {
    const std::byte* weights = record + part.weights_offset;
    const std::byte* scales = record + part.scales_offset;
    const int rows = static_cast<int>(part.rows), cols = static_cast<int>(part.cols);
    if (q4) q4_jobs.push_back({q4_view(weights, scales, rows, cols), &x, y});
    else q8_jobs.push_back({q8_view(weights, scales, rows, cols), &x, y});
  };
  auto run_jobs = [&] {
    if (q4) cpu::gemv_quantized_many(q4_jobs, gemv_.threads);
    else cpu::gemv_quantized_many(q8_jobs, gemv_.threads);
    q4_jobs.clear();
    q8_jobs.clear();
  };
  for (std::size_t i = 0; i < count; ++i) {
    const auto x = batch.in.subspan(static_cast<std::size_t>(batch.rows[i].input_row) * in_width, in_width);
    inputs_[i].quantize(gemv_.variant, format, x, 1, static_cast<int>(in_width));
    const std::byte* record = record_of(batch, batch.rows[i].slot);
    add_job(gate_part, record, inputs_[i], std::span(gate_).subspan(i * width, width));
    add_job(up_part, record, inputs_[i], std::span(up_).subspan(i * width, width));
  }
  run_jobs();
  for (std::size_t i = 0; i < count; ++i) {
    float* gate = gate_.data() + i * width;
    const float* up = up_.data() + i * width;
    for (std::size_t j = 0; j < width; ++j) gate[j] = forward::silu(gate[j]) * up[j];
    hidden_[i].quantize(gemv_.variant, format, std::span<const float>(gate, width), 1, static_cast<int>(width));
    add_job(down_part, record_of(batch, batch.rows[i].slot), hidden_[i],
            batch.out.subspan(static_cast<std::size_t>(batch.rows[i].output_row) * out_width, out_width));
  }
  run_jobs();
}

}  // namespace coli::backend
