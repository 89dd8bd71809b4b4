#include "expert_store.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

namespace coli::runtime {

ExpertStore::ExpertStore() = default;
ExpertStore::ExpertStore(ExpertStore&&) noexcept = default;
ExpertStore& ExpertStore::operator=(ExpertStore&&) noexcept = default;
ExpertStore::~ExpertStore() = default;  // io_ joins its threads; no round is open by then

Result<ExpertStore> ExpertStore::create(const container::ContainerReader& reader, backend::Backend& backend, int top_k,
                                        int capacity, const std::vector<std::vector<int>>& pins, const ExpertIo& io) {
  ExpertStore store;
  store.reader_ = &reader;
  store.backend_ = &backend;
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
    auto policy = experts::SlotPolicy::create(config);
    if (!policy) return policy.error();
    auto storage = backend.create_slot_storage(static_cast<std::size_t>(policy->cap()), config.expert_bytes,
                                               config.alignment);
    if (!storage) return make_error("layer " + std::to_string(config.layer) + " expert slots: " + storage.error().message);
    auto cache = experts::ExpertCache::create(std::move(*policy), std::move(*storage));
    if (!cache) return cache.error();
    shapes.push_back({config.n_experts, top_k, config.cap,
                      static_cast<int>(config.pins.size())});
    store.caches_.push_back(std::move(*cache));
    store.rounds_.push_back({{}, {}, std::vector<int>(static_cast<std::size_t>(experts), -1)});
  }
  auto planner = experts::RoundPlanner::create(shapes);
  if (!planner) return planner.error();
  store.planner_ = std::move(*planner);
  store.experts_stream_ = capacity > 0 && capacity < experts;
  store.setup_io(io);
  return store;
}

void ExpertStore::setup_io(const ExpertIo& io) {
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
  else if (!experts_stream_) why = "all experts resident: page cache";
  else why = try_direct();
  io_mode_ = why.empty() ? "O_DIRECT, " + threads : "buffered, " + threads + " (" + why + ")";
  read_rounds_.record_bytes = read_bytes_;
  read_rounds_.io_threads = std::max(0, io.threads);
  read_rounds_.compute_threads = std::max(0, io.compute_threads);
}

Status ExpertStore::prefetch(int moe_layer, std::span<const int> experts) {
  const auto layer = static_cast<std::size_t>(moe_layer);
  if (caches_[layer].in_round()) return Ok{};
  const std::uint64_t hits_before = caches_[layer].stats().hits, misses_before = caches_[layer].stats().misses;
  if (Status s = begin(moe_layer, experts); !s) return s;
  Round& round = rounds_[layer];
  round.speculative = true;
  round.prefetched.clear();
  for (int e : round.order) {
    if (round.read_of_expert[static_cast<std::size_t>(e)] >= 0) round.prefetched.push_back(e);
  }
  prefetched_ += round.prefetched.size();
  uncounted_hits_ += caches_[layer].stats().hits - hits_before;
  uncounted_misses_ += caches_[layer].stats().misses - misses_before;
  return Ok{};
}

void ExpertStore::close_speculative(int moe_layer, std::span<const int> needed) {
  const auto layer = static_cast<std::size_t>(moe_layer);
  Round& round = rounds_[layer];
  round.speculative = false;
  for (int e : round.prefetched) {
    if (std::find(needed.begin(), needed.end(), e) != needed.end()) ++prefetch_used_;
  }
  round.prefetched.clear();
  if (drain(round)) caches_[layer].abort_round();
  else caches_[layer].end_round();
}

Status ExpertStore::begin(int moe_layer, std::span<const int> experts) {
  const auto layer = static_cast<std::size_t>(moe_layer);
  if (rounds_[layer].speculative) close_speculative(moe_layer, experts);
  experts::ExpertCache& cache = caches_[layer];
  auto plan = cache.begin_round(experts);
  if (!plan) return plan.error();
  Round& round = rounds_[layer];
  round.order.clear();
  round.reads.clear();
  round.submitted = std::chrono::steady_clock::now();
  round.resumed = {};
  round.landed->store(0);
  for (const experts::SlotLoad& load : plan->loads) {
    const std::uint64_t offset = layout_.record_offset(static_cast<std::uint32_t>(moe_layer),
                                                       static_cast<std::uint32_t>(load.expert));
    round.read_of_expert[static_cast<std::size_t>(load.expert)] = static_cast<int>(round.reads.size());
    round.reads.push_back(io_->submit(read_job(moe_layer, load, offset, round.landed)));
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

// One miss's read, for an I/O thread: straight into the slot when the host
// can address it, else into an aligned staging buffer that the backend
// uploads from (device storage).
std::function<Status()> ExpertStore::read_job(int moe_layer, const experts::SlotLoad& load, std::uint64_t offset,
                                              std::shared_ptr<std::atomic<std::int64_t>> landed) {
  experts::SlotStorage* storage = &caches_[static_cast<std::size_t>(moe_layer)].storage();
  return [fd = read_fd_, offset, destination = load.destination, read_bytes = read_bytes_,
          min_bytes = layout_.record_bytes, file = reader_->path().string(), backend = backend_, storage, moe_layer,
          expert = load.expert, slot = load.slot, clock = read_clock_, landed = std::move(landed)]() -> Status {
    const std::string what = "expert " + std::to_string(expert) + " of MoE layer " + std::to_string(moe_layer) + ": ";
    const auto start = std::chrono::steady_clock::now();
    auto timed = [&] {
      const auto now = std::chrono::steady_clock::now();
      clock->nanoseconds.fetch_add(
          static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count()));
      clock->reads.fetch_add(1);
      const std::int64_t at = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
      for (std::int64_t seen = landed->load(); seen < at && !landed->compare_exchange_weak(seen, at);) {
      }
    };
    if (!destination.empty()) {
      Status read = pread_full(fd, offset, destination.first(read_bytes), min_bytes, file);
      if (!read) return make_error(what + read.error().message);
      timed();
      return read;
    }
    const std::size_t staging_bytes = (read_bytes + container::kAlignment - 1) / container::kAlignment * container::kAlignment;
    std::unique_ptr<std::byte, decltype(&std::free)> staging(
        static_cast<std::byte*>(std::aligned_alloc(container::kAlignment, staging_bytes)), &std::free);
    if (!staging) return make_error(what + "no memory for a " + std::to_string(read_bytes) + "-byte upload staging buffer");
    Status read = pread_full(fd, offset, std::span(staging.get(), read_bytes), min_bytes, file);
    if (read) timed();  // the read alone, not the upload after it
    if (read) read = backend->upload(*storage, slot, std::span<const std::byte>(staging.get(), min_bytes));
    if (!read) return make_error(what + read.error().message);
    return read;
  };
}

void ExpertStore::begin_pass(bool single_token) {
  after_decode_pass_ = decode_pass_;
  decode_pass_ = single_token;
  pass_blocked_ = {};
  pass_waited_rounds_ = 0;
}

void ExpertStore::end_pass(double seconds) {
  // The first token after a prompt is left out: it warms what the prompt's
  // pass displaced whether it waits or not (the 2-core VM's tiny model: 1.08
  // ms at cap all against 0.81 for the tokens after it), and the first is
  // the likeliest to miss, so it would be taken for the cost of waiting.
  if (!decode_pass_ || !after_decode_pass_ || !experts_stream_) return;
  read_rounds_.add_token(std::max(0.0, seconds - std::chrono::duration<double>(pass_blocked_).count()), pass_waited_rounds_);
}

std::span<const int> ExpertStore::round_order(int moe_layer) const {
  return rounds_[static_cast<std::size_t>(moe_layer)].order;
}

std::optional<Error> ExpertStore::drain(Round& round, bool failed) {
  std::optional<Error> first;
  for (std::future<Status>& read : round.reads) {
    if (!read.valid()) continue;  // already waited for
    Status s = read.get();
    if (s) bytes_read_ += read_bytes_;
    else if (!first) first = s.error();
  }
  if (!round.reads.empty() && !first && !failed) {
    const std::chrono::nanoseconds landed(round.landed->load());
    const auto elapsed = std::chrono::steady_clock::time_point(landed) - round.submitted;
    read_rounds_.add(round.reads.size(), std::max(0.0, std::chrono::duration<double>(elapsed).count()), decode_pass_);
    // Still waiting when the last read landed: the time until it ran again.
    if (round.resumed >= std::chrono::steady_clock::time_point(landed)) {
      read_rounds_.add_wake(std::chrono::duration<double>(round.resumed - std::chrono::steady_clock::time_point(landed)).count());
      ++pass_waited_rounds_;
    }
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
  std::future<Status>& pending = round.reads[static_cast<std::size_t>(index)];
  const bool landed_already = pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  const auto blocked_from = std::chrono::steady_clock::now();
  Status read = pending.get();
  if (!landed_already) {
    round.resumed = std::chrono::steady_clock::now();
    pass_blocked_ += round.resumed - blocked_from;
  }
  index = -1;
  if (read) {
    bytes_read_ += read_bytes_;
    return read;
  }
  // No read may still be writing into a slot once the round is aborted.
  (void)drain(round, true);
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

bool ExpertStore::landed(int moe_layer, int expert) const {
  return rounds_[static_cast<std::size_t>(moe_layer)].read_of_expert[static_cast<std::size_t>(expert)] < 0;
}

void ExpertStore::ffn_batch(int moe_layer, std::span<const float> in, std::span<float> out,
                            std::span<const FfnTask> tasks, std::span<const backend::WeightedOutput> sums,
                            std::span<float> sum_into) {
  if (tasks.empty()) return;
  const experts::ExpertCache& cache = caches_[static_cast<std::size_t>(moe_layer)];
  batch_rows_.clear();
  for (const FfnTask& task : tasks) batch_rows_.push_back({*cache.slot_of(task.expert), task.input_row, task.output_row});
  backend_->expert_ffn_batch({&cache.storage(), &layout_, in, out, batch_rows_, sums, sum_into});
}

std::span<const std::byte> ExpertStore::record(int moe_layer, int expert) const {
  const experts::ExpertCache& cache = caches_[static_cast<std::size_t>(moe_layer)];
  const std::optional<int> slot = cache.slot_of(expert);
  if (!slot) return {};
  const std::span<const std::byte> bytes = cache.storage().host_slot(static_cast<std::size_t>(*slot));
  return bytes.empty() ? bytes : bytes.first(layout_.record_bytes);
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
      const std::span<std::byte> bytes = cache.slot_data(slot);  // empty for device storage
      if (!bytes.empty()) std::memset(bytes.data(), 0, bytes.size());
    }
  }
}

Status ExpertStore::load_every_expert() {
  if (experts_stream_ || caches_.empty()) return Ok{};
  std::vector<int> every(layout_.experts);
  std::iota(every.begin(), every.end(), 0);
  const std::vector<std::vector<int>> per_layer(caches_.size(), every);
  if (Status s = load_experts(per_layer); !s) return make_error("reading every expert at load: " + s.error().message);
  return Ok{};
}

// Every layer's round is opened (its reads submitted) before any read is
// waited for, so the I/O threads' queue holds every record and never runs
// dry at a layer's end. Waiting layer by layer, expert by expert, makes the
// error reported the first failed read in that order, whatever the timing;
// every round is closed (its reads drained) before returning.
Status ExpertStore::load_experts(const std::vector<std::vector<int>>& per_layer) {
  const std::size_t layers = std::min(per_layer.size(), caches_.size());
  for (std::size_t layer = 0; layer < layers; ++layer) {
    const std::vector<int>& ids = per_layer[layer];
    if (static_cast<int>(ids.size()) > caches_[layer].cap())
      return make_error("MoE layer " + std::to_string(layer) + ": " + std::to_string(ids.size()) +
                        " experts to read into a cache of " + std::to_string(caches_[layer].cap()) + " slots");
    for (int e : ids) {
      if (e < 0 || e >= static_cast<int>(layout_.experts))
        return make_error("MoE layer " + std::to_string(layer) + ": expert " + std::to_string(e) + " is not one of its " +
                          std::to_string(layout_.experts));
    }
  }
  std::vector<experts::ExpertCacheStats> before;
  const experts::ReadRounds rounds_before = read_rounds_;
  Status result = Ok{};
  std::size_t opened = 0;
  for (; opened < layers && result; ++opened) {
    before.push_back(caches_[opened].stats());
    result = begin(static_cast<int>(opened), per_layer[opened]);
  }
  if (!result) --opened;  // the failed begin() left its round closed
  for (std::size_t layer = 0; layer < opened; ++layer) {
    const int moe_layer = static_cast<int>(layer);
    for (std::size_t e = 0; e < per_layer[layer].size() && result; ++e) result = wait(moe_layer, per_layer[layer][e]);
    end(moe_layer);  // after a failed wait() the round is closed already
    uncounted_hits_ += caches_[layer].stats().hits - before[layer].hits;
    uncounted_misses_ += caches_[layer].stats().misses - before[layer].misses;
  }
  read_rounds_ = rounds_before;  // every layer's reads queued at once: no round the planner prices
  return result;
}

std::uint64_t ExpertStore::hits() const {
  std::uint64_t total = 0;
  for (const auto& cache : caches_) total += cache.stats().hits;
  return total - uncounted_hits_;
}

std::uint64_t ExpertStore::misses() const {
  std::uint64_t total = 0;
  for (const auto& cache : caches_) total += cache.stats().misses;
  return total - uncounted_misses_;
}

}  // namespace coli::runtime
