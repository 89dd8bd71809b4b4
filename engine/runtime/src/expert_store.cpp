#include "expert_store.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <tuple>

#include "coli/forward/ops.h"
#include "reference/gemv_reference.h"

namespace coli::runtime {

ExpertStore::ExpertStore() = default;
ExpertStore::ExpertStore(ExpertStore&&) noexcept = default;
ExpertStore& ExpertStore::operator=(ExpertStore&&) noexcept = default;
ExpertStore::~ExpertStore() = default;  // io_ joins its threads; no round is open by then

Result<ExpertStore> ExpertStore::create(const container::ContainerReader& reader, int top_k, int capacity,
                                        const std::vector<std::vector<int>>& pins, const ExpertIo& io) {
  ExpertStore store;
  store.reader_ = &reader;
  store.layout_ = reader.index().experts;
  store.top_k_ = top_k;
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
    store.rounds_.push_back({{}, {}, std::vector<int>(static_cast<std::size_t>(experts), -1)});
  }
  auto planner = experts::RoundPlanner::create(shapes);
  if (!planner) return planner.error();
  store.planner_ = std::move(*planner);
  for (const auto& part : layout.parts) {
    if (part.name == "gate") store.gate_.resize(part.rows);
    if (part.name == "up") store.up_.resize(part.rows);
    if (part.name == "down") store.down_.resize(part.rows);
  }
  store.setup_io(io, capacity > 0 && capacity < experts);
  return store;
}

void ExpertStore::setup_io(const ExpertIo& io, bool streaming) {
  io_ = std::make_unique<IoPool>(std::max(0, io.threads));
  read_fd_ = reader_->fd();
  read_bytes_ = layout_.record_bytes;
  const std::string threads = io.threads > 0 ? std::to_string(io.threads) + (io.threads == 1 ? " I/O thread" : " I/O threads")
                                             : "synchronous reads";
  // Why O_DIRECT is not used; empty when it is.
  auto try_direct = [&]() -> std::string {
    if (caches_.empty()) return "no routed experts";
    // O_DIRECT needs an aligned offset, length and destination: records are
    // 4096-aligned with a 4096-multiple stride, and so are the slab's slots.
    const auto& storage = caches_[0].storage();
    if (layout_.record_stride % container::kAlignment != 0 || storage.alignment() % container::kAlignment != 0 ||
        storage.slot_bytes() < layout_.record_stride) {
      return "records not aligned for O_DIRECT";
    }
    const std::string path = reader_->path().string();
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
    if (fd.get() < 0) return std::string("the filesystem refuses O_DIRECT: ") + std::strerror(errno);
    // Some filesystems accept the flag at open and refuse the reads: try one.
    std::unique_ptr<std::byte, decltype(&std::free)> probe(
        static_cast<std::byte*>(std::aligned_alloc(container::kAlignment, layout_.record_stride)), &std::free);
    if (!probe) return "no memory for an O_DIRECT probe";
    if (Status s = pread_full(fd.get(), layout_.record_offset(0, 0), std::span(probe.get(), layout_.record_stride),
                              layout_.record_bytes, path);
        !s) {
      return "an O_DIRECT read failed: " + s.error().message;
    }
    direct_fd_ = std::move(fd);
    read_fd_ = direct_fd_.get();
    read_bytes_ = layout_.record_stride;
    return "";
  };
  std::string why;
  if (!io.direct_io) why = "O_DIRECT off";
  else if (!streaming) why = "all experts resident: page cache";
  else why = try_direct();
  io_mode_ = why.empty() ? "O_DIRECT, " + threads : "buffered, " + threads + " (" + why + ")";
}

Status ExpertStore::begin(int moe_layer, std::span<const int> experts) {
  const auto layer = static_cast<std::size_t>(moe_layer);
  experts::ExpertCache& cache = caches_[layer];
  auto plan = cache.begin_round(experts);
  if (!plan) return plan.error();
  Round& round = rounds_[layer];
  round.order.clear();
  round.reads.clear();
  for (const experts::SlotLoad& load : plan->loads) {
    const std::uint64_t offset = layout_.record_offset(static_cast<std::uint32_t>(moe_layer),
                                                       static_cast<std::uint32_t>(load.expert));
    round.read_of_expert[static_cast<std::size_t>(load.expert)] = static_cast<int>(round.reads.size());
    round.reads.push_back(io_->submit([fd = read_fd_, offset, destination = load.destination.first(read_bytes_),
                                       min_bytes = layout_.record_bytes, file = reader_->path().string(),
                                       moe_layer, expert = load.expert]() -> Status {
      Status read = pread_full(fd, offset, destination, min_bytes, file);
      if (!read) {
        return make_error("expert " + std::to_string(expert) + " of MoE layer " + std::to_string(moe_layer) + ": " +
                          read.error().message);
      }
      return read;
    }));
  }
  // Hits first (computable now), then misses in submission order, which the
  // pool's FIFO queue makes roughly their landing order.
  for (int e : experts) {
    if (round.read_of_expert[static_cast<std::size_t>(e)] < 0 &&
        std::find(round.order.begin(), round.order.end(), e) == round.order.end()) {
      round.order.push_back(e);
    }
  }
  for (const experts::SlotLoad& load : plan->loads) round.order.push_back(load.expert);
  return Ok{};
}

std::span<const int> ExpertStore::round_order(int moe_layer) const {
  return rounds_[static_cast<std::size_t>(moe_layer)].order;
}

std::optional<Error> ExpertStore::drain(Round& round) {
  std::optional<Error> first;
  for (std::future<Status>& read : round.reads) {
    if (!read.valid()) continue;  // already waited for
    Status s = read.get();
    if (s) bytes_read_ += read_bytes_;
    else if (!first) first = s.error();
  }
  for (int e : round.order) round.read_of_expert[static_cast<std::size_t>(e)] = -1;
  round.reads.clear();
  round.order.clear();
  return first;
}

Status ExpertStore::wait(int moe_layer, int expert) {
  const auto layer = static_cast<std::size_t>(moe_layer);
  Round& round = rounds_[layer];
  int& index = round.read_of_expert[static_cast<std::size_t>(expert)];
  if (index < 0) return Ok{};  // resident, or already landed
  Status read = round.reads[static_cast<std::size_t>(index)].get();
  index = -1;
  if (read) {
    bytes_read_ += read_bytes_;
    return read;
  }
  // No read may still be writing into a slot once the round is aborted.
  (void)drain(round);
  caches_[layer].abort_round();
  return read;
}

void ExpertStore::end(int moe_layer) {
  const auto layer = static_cast<std::size_t>(moe_layer);
  experts::ExpertCache& cache = caches_[layer];
  if (!cache.in_round()) return;  // a failed wait() closed it already
  if (drain(rounds_[layer])) cache.abort_round();
  else cache.end_round();
}

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

void ExpertStore::ffn(int moe_layer, int expert, std::span<const float> x, std::span<float> y,
                      const kernels::cpu::GemvOptions& gemv) {
  const std::byte* record = caches_[static_cast<std::size_t>(moe_layer)].expert_data(expert).data();
  project(layout_.parts[0], record, x, gate_, gemv);
  project(layout_.parts[1], record, x, up_, gemv);
  for (std::size_t i = 0; i < gate_.size(); ++i) gate_[i] = forward::silu(gate_[i]) * up_[i];
  project(layout_.parts[2], record, gate_, y, gemv);
}

bool ExpertStore::landed(int moe_layer, int expert) const {
  return rounds_[static_cast<std::size_t>(moe_layer)].read_of_expert[static_cast<std::size_t>(expert)] < 0;
}

void ExpertStore::ffn_batch(int moe_layer, std::span<const FfnTask> tasks, const kernels::cpu::GemvOptions& gemv) {
  if (tasks.empty()) return;
  if (!quantized_simd()) {
    for (const FfnTask& task : tasks) ffn(moe_layer, task.expert, task.x, task.y, gemv);
    return;
  }
  namespace cpu = kernels::cpu;
  const bool q4 = layout_.format == "q4_g64";
  const auto format = q4 ? cpu::WeightFormat::q4_g64 : cpu::WeightFormat::q8_row;
  const auto& [gate_part, up_part, down_part] = std::tie(layout_.parts[0], layout_.parts[1], layout_.parts[2]);
  const std::size_t width = gate_part.rows;
  batch_inputs_.resize(tasks.size());
  batch_hidden_.resize(tasks.size());
  batch_gate_.resize(tasks.size() * width);
  batch_up_.resize(tasks.size() * width);
  std::vector<cpu::Q4GemvJob> q4_jobs;
  std::vector<cpu::Q8GemvJob> q8_jobs;
  // One job list per stage, then one parallel region for it.
  auto add_job = [&](const container::ExpertPart& part, const std::byte* record, const cpu::QuantizedActivations& x,
                     std::span<float> y) {
    const std::byte* weights = record + part.weights_offset;
    const std::byte* scales = record + part.scales_offset;
    const int rows = static_cast<int>(part.rows), cols = static_cast<int>(part.cols);
    if (q4) {
      q4_jobs.push_back({{reinterpret_cast<const std::uint8_t*>(weights), reinterpret_cast<const std::uint16_t*>(scales), rows, cols}, &x, y});
    } else {
      q8_jobs.push_back({{reinterpret_cast<const std::int8_t*>(weights), reinterpret_cast<const float*>(scales), rows, cols}, &x, y});
    }
  };
  auto run_jobs = [&] {
    if (q4) cpu::gemv_quantized_many(q4_jobs, gemv.threads);
    else cpu::gemv_quantized_many(q8_jobs, gemv.threads);
    q4_jobs.clear();
    q8_jobs.clear();
  };
  const auto& cache = caches_[static_cast<std::size_t>(moe_layer)];
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    batch_inputs_[i].quantize(gemv.variant, format, tasks[i].x, 1, static_cast<int>(tasks[i].x.size()));
    const std::byte* record = cache.expert_data(tasks[i].expert).data();
    add_job(gate_part, record, batch_inputs_[i], std::span(batch_gate_).subspan(i * width, width));
    add_job(up_part, record, batch_inputs_[i], std::span(batch_up_).subspan(i * width, width));
  }
  run_jobs();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    float* gate = batch_gate_.data() + i * width;
    const float* up = batch_up_.data() + i * width;
    for (std::size_t j = 0; j < width; ++j) gate[j] = forward::silu(gate[j]) * up[j];
    batch_hidden_[i].quantize(gemv.variant, format, std::span<const float>(gate, width), 1, static_cast<int>(width));
    add_job(down_part, cache.expert_data(tasks[i].expert).data(), batch_hidden_[i], tasks[i].y);
  }
  run_jobs();
}

void ExpertStore::add_scaled(float weight, std::span<const float> y, std::span<float> out) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] += weight * y[i];
}

void ExpertStore::accumulate_ffn(int moe_layer, int expert, float weight, std::span<const float> x,
                                 std::span<float> out, const kernels::cpu::GemvOptions& gemv) {
  ffn(moe_layer, expert, x, down_, gemv);
  add_scaled(weight, down_, out);
}

int ExpertStore::retirable_slots() const {
  int slots = std::numeric_limits<int>::max();
  for (const auto& cache : caches_) slots = std::min(slots, cache.evictable_slots() - top_k_);
  return caches_.empty() ? 0 : std::max(0, slots);
}

Result<std::uint64_t> ExpertStore::retire_slots(int slots) {
  slots = std::min(slots, retirable_slots());
  if (slots <= 0) return std::uint64_t{0};
  std::uint64_t released = 0;
  std::vector<experts::CacheShape> shapes;
  for (auto& cache : caches_) {
    auto bytes = cache.retire_slots(slots);
    if (!bytes) return bytes.error();
    released += *bytes;
    shapes.push_back({cache.n_experts(), top_k_, cache.cap(), cache.n_pins()});
  }
  // Rounds must keep fitting the evictable slots that remain (field note 1).
  auto planner = experts::RoundPlanner::create(shapes);
  if (!planner) return planner.error();
  planner_ = std::move(*planner);
  return released;
}

std::uint64_t ExpertStore::slab_bytes() const {
  std::uint64_t total = 0;
  for (const auto& cache : caches_) total += cache.storage().bytes_held();
  return total;
}

void ExpertStore::commit_slabs() {
  for (auto& cache : caches_) {
    for (int slot = 0; slot < cache.cap(); ++slot) {
      const std::span<std::byte> bytes = cache.slot_data(slot);
      std::memset(bytes.data(), 0, bytes.size());
    }
  }
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
