// Routed experts of every MoE layer behind per-layer caches: a round leases
// the experts one token (or a prefill round) needs and hands the misses'
// reads to a pool of I/O threads, so the FFN can start on resident experts
// while the misses are still arriving; the compute thread waits only for the
// expert it needs next. The slots live in storage the backend made, and the
// backend computes the FFNs.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "coli/backend/backend.h"
#include "coli/container/container.h"
#include "coli/experts/expert_cache.h"
#include "coli/experts/round_planner.h"
#include "coli/experts/read_rounds.h"
#include "io_pool.h"

namespace coli::runtime {

struct ExpertIo {
  int threads = 4;        // I/O threads; 0 = synchronous reads on the compute thread
  // O_DIRECT for expert records when experts stream (capacity < experts):
  // the slab is the only copy, so the page cache would hold a second one of
  // every streamed expert and evict the dense weights' pages for it. With
  // every expert resident each record is read once and buffered reads are
  // as good (and a second run finds them in the page cache).
  bool direct_io = true;
  int compute_threads = 0;  // the compute team beside the reads: labels the read rounds (ReadRounds)
};

class ExpertStore {
 public:
  // `capacity` 0 = every expert resident; pins per MoE layer. Every layer's
  // slots come from `backend`, which computes the FFNs and must outlive the store.
  static Result<ExpertStore> create(const container::ContainerReader& reader, backend::Backend& backend, int top_k,
                                    int capacity, const std::vector<std::vector<int>>& pins, const ExpertIo& io = {});
  ExpertStore();
  ExpertStore(ExpertStore&&) noexcept;
  ExpertStore& operator=(ExpertStore&&) noexcept;
  ~ExpertStore();

  // Leases `experts` of MoE layer `moe_layer` and submits the misses' reads;
  // returns before they land (wait() before using a miss).
  Status begin(int moe_layer, std::span<const int> experts);
  // Starts reads of `experts` of a layer whose round is not open (the next
  // layer's predicted experts, while this layer computes): a speculative
  // round that leases and reads them into that layer's own cache, so it can
  // never evict an expert another layer's open round uses. The layer's next
  // begin() waits for those reads and closes it first; its hits and misses
  // are not counted (prefetched() and prefetch_used() are). Ok and nothing
  // done when the layer's round is open.
  Status prefetch(int moe_layer, std::span<const int> experts);
  std::uint64_t prefetched() const { return prefetched_; }          // reads a prefetch started
  std::uint64_t prefetch_used() const { return prefetch_used_; }    // of those, experts the real round needed

  // The open round's distinct experts in compute order: resident ones first,
  // then the misses in the order their reads were submitted.
  std::span<const int> round_order(int moe_layer) const;
  // Blocks until `expert`'s read (if any) has landed. A failed read waits
  // for the round's other reads, aborts the round and returns the error
  // (naming the container file and offset); the round is then closed.
  Status wait(int moe_layer, int expert);
  // Closes the round; reads still in flight are waited for first (a slot is
  // never recycled under a read), and a failed one aborts the round.
  void end(int moe_layer);

  // One expert FFN to compute: out row `output_row` = ffn(in row
  // `input_row`) for a leased, landed expert.
  struct FfnTask {
    int expert;
    int input_row;
    int output_row;
  };
  // Many FFNs at once on the backend (rows of hidden floats in `in` and
  // `out`); results do not depend on how tasks are batched. With `sums`,
  // the backend then adds those weighted outputs to rows of sum_into
  // (backend::ExpertBatch::sums).
  void ffn_batch(int moe_layer, std::span<const float> in, std::span<float> out, std::span<const FfnTask> tasks,
                 std::span<const backend::WeightedOutput> sums = {}, std::span<float> sum_into = {});
  // True when `expert` of the open round needs no wait (resident, or landed).
  bool landed(int moe_layer, int expert) const;
  // A leased, landed expert's record (record_bytes) in host memory; empty
  // when the slots are device memory.
  std::span<const std::byte> record(int moe_layer, int expert) const;

  // Tokens one prefill round may hold so that its distinct misses always fit
  // every layer's evictable slots (field note 1); at most `requested`.
  int tokens_per_round(int requested) const { return planner_->tokens_per_round(requested); }

  std::uint64_t slab_bytes() const;  // all layers' cache slabs (slots in use)
  int moe_layers() const { return static_cast<int>(caches_.size()); }
  // The RSS watchdog's lever: every layer hands up to `slots` evictable slots
  // back (never below top_k evictable), and later rounds shrink to fit.
  // Call between rounds. Returns the bytes given back to the OS.
  Result<std::uint64_t> retire_slots(int slots);
  int retirable_slots() const;
  std::uint64_t slot_stride() const { return layout_.record_stride; }  // the most retire_slots can still give back per layer
  void commit_slabs();               // touch every slot page (see ModelOptions::commit_expert_cache)
  // Reads every expert of every layer into its slot, the I/O threads in
  // parallel (every layer's reads queued at once), when the cache holds them
  // all (a resident plan): the first tokens then wait for no reads, as
  // llama.cpp's load leaves every weight in memory. Ok and nothing read when
  // the cache streams (load_experts reads a chosen part then).
  Status load_every_expert();
  // Reads the given experts into their slots: `per_layer[l]` for MoE layer l
  // (distinct ids, at most the cap; layers past the list's end read none),
  // every layer's reads queued at once. Not counted as hits or misses, nor as
  // a read round the planner prices. Errors: an id out of range or a layer
  // over its cap (before any read), else the first failed read in
  // layer-then-list order (named), returned once every read has finished.
  Status load_experts(const std::vector<std::vector<int>>& per_layer);

  // Whether experts stream: the capacity given to create() is below the
  // expert count, so rounds read misses. The one place that fact is decided:
  // O_DIRECT, the preload and speculative prefetch all follow it.
  bool experts_stream() const { return experts_stream_; }

  std::uint64_t hits() const;
  std::uint64_t misses() const;
  // Bytes transferred from the container (whole aligned records under O_DIRECT).
  std::uint64_t bytes_read() const { return bytes_read_; }
  // Seconds the I/O threads spent in the reads that succeeded, each read
  // timed on its own thread (plan vs actual: what a read took in this run
  // beside the profile's figure; reads in flight together overlap), and how
  // many reads that was: every read, the misses', the preload's and the
  // speculative rounds' (which hits() and misses() leave out).
  double read_seconds() const { return static_cast<double>(read_clock_->nanoseconds.load()) * 1e-9; }
  std::uint64_t timed_reads() const { return read_clock_->reads.load(); }
  // Every closed round that read, by its read count, from its submission to
  // its last read landing (each read stamps when it landed, so a compute
  // thread busy elsewhere does not lengthen the figure); not the preload's.
  const experts::ReadRounds& read_rounds() const { return read_rounds_; }
  // A forward pass begins: whether its rounds belong to a single-token
  // pass (a generated token), which read_rounds() counts apart too
  // (decode_rounds). end_pass(its seconds) files a streaming generated
  // token that followed another by its rounds that blocked
  // (ReadRounds::add_token).
  void begin_pass(bool single_token);
  void end_pass(double seconds);
  // "O_DIRECT, 4 I/O threads", "buffered, ... (why)", "synchronous ...".
  const std::string& io_mode() const { return io_mode_; }

 private:
  // The open round of one layer: a read per miss, indexed by expert.
  struct Round {
    std::vector<int> order;
    std::vector<std::future<Status>> reads;
    std::vector<int> read_of_expert;  // index into reads; -1: none pending
    bool speculative = false;         // opened by prefetch(); closed by the next begin()
    std::vector<int> prefetched;      // experts a speculative round read
    std::chrono::steady_clock::time_point submitted;  // when begin() submitted the reads
    // Nanoseconds (steady clock) of the round's last read to land, set by
    // the I/O threads; shared with the jobs, which outlive no round.
    std::shared_ptr<std::atomic<std::int64_t>> landed = std::make_shared<std::atomic<std::int64_t>>(0);
    // When wait() last returned from a read it had to wait for (the
    // epoch while it never had to): the round's wake-up after its last landing.
    std::chrono::steady_clock::time_point resumed{};
  };
  // Waits for a speculative round's reads and closes it (a failed read only
  // aborts it: the real round reads the expert again and reports).
  void close_speculative(int moe_layer, std::span<const int> needed);

  void setup_io(const ExpertIo& io);
  std::function<Status()> read_job(int moe_layer, const experts::SlotLoad& load, std::uint64_t offset,
                                   std::shared_ptr<std::atomic<std::int64_t>> landed);
  // Waits for every read still pending; the first error, if any. A round
  // whose reads all succeeded counts in read_rounds() unless `failed`.
  std::optional<Error> drain(Round& round, bool failed = false);

  const container::ContainerReader* reader_ = nullptr;
  backend::Backend* backend_ = nullptr;
  container::ExpertLayout layout_;
  int top_k_ = 0;
  std::vector<experts::ExpertCache> caches_;
  std::vector<Round> rounds_;  // per MoE layer
  std::optional<experts::RoundPlanner> planner_;  // set by create()
  std::vector<backend::ExpertRow> batch_rows_;  // ffn_batch scratch
  UniqueFd direct_fd_;          // O_DIRECT descriptor, when in use
  // Declared after the caches and the descriptor so it is destroyed first:
  // its threads finish every queued read before slots or fd go away.
  std::unique_ptr<IoPool> io_;
  int read_fd_ = -1;            // direct_fd_ or the reader's buffered one
  std::size_t read_bytes_ = 0;  // per record: record_stride (O_DIRECT) or record_bytes
  std::string io_mode_;
  std::uint64_t bytes_read_ = 0;
  // The reads' nanoseconds and count, added by the I/O threads (shared with
  // their jobs, which hold it however the store is moved).
  struct ReadClock {
    std::atomic<std::uint64_t> nanoseconds{0}, reads{0};
  };
  std::shared_ptr<ReadClock> read_clock_ = std::make_shared<ReadClock>();
  experts::ReadRounds read_rounds_;
  bool decode_pass_ = false;        // see begin_pass()
  bool after_decode_pass_ = false;  // the pass before this one was a single token's too
  // This pass's time blocked in wait() and its rounds that blocked.
  std::chrono::steady_clock::duration pass_blocked_{};
  std::uint64_t pass_waited_rounds_ = 0;
  std::uint64_t prefetched_ = 0, prefetch_used_ = 0;
  std::uint64_t uncounted_hits_ = 0, uncounted_misses_ = 0;  // speculative rounds' and the preload's lookups
  bool experts_stream_ = false;  // see experts_stream()
};

}  // namespace coli::runtime
