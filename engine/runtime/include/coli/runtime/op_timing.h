// Where a CPU forward pass spends its wall time, per op category. The engine
// keeps an OpTimes only when ModelOptions::op_timing is set; call sites mark
// phase changes with OpPhase::to, which costs one branch when timing is off.
// Wall time on the calling thread: an op that forks worker threads counts
// from its fork to its join, so the categories add up to the pass.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coli::runtime {

enum class Op : std::uint8_t {
  attention_qkv,     // q, k, v projections (+ biases, clipping)
  attention_core,    // KV-cache writes and the attention over the cache
  attention_output,  // o projection and the residual add
  norm_rope,         // RMS norms, q/k norms, rotary embedding
  router,            // MoE gate logits and top-k
  experts,           // routed experts' FFNs and their weighted sum
  expert_io_wait,    // leasing a round's experts and waiting for missed reads
  dense_mlp,         // dense MLP layers and shared experts
  lm_head,           // final norm's projection to the vocabulary
  other,             // embedding lookups, bookkeeping: the pass minus the rest
};
inline constexpr std::size_t kOpCount = static_cast<std::size_t>(Op::other) + 1;

std::string_view op_name(Op op);

// One expert batch of a CPU pass (ExpertStore::ffn_batch): its MoE layer,
// wall time, and the (expert, rows) of every expert it ran, in the order it
// ran them. A prompt's batches priced one by one show what the pass's
// records cost by their rows and by how recently their layer read them,
// beside the probe's stream points (coli-decode-bench --batch-log).
struct ExpertBatchTiming {
  int moe_layer = 0;
  double seconds = 0;
  std::vector<std::pair<int, int>> expert_rows;
};

class OpTimes {
 public:
  void add(Op op, double seconds) { seconds_[static_cast<std::size_t>(op)] += seconds; }
  // One whole forward pass of `tokens` tokens (what "other" is the rest of).
  void add_pass(double seconds, int tokens) { pass_seconds_ += seconds, tokens_ += tokens, ++passes_; }
  // Seconds in `op`; for Op::other, the passes' time no category claimed.
  double seconds(Op op) const;
  double pass_seconds() const { return pass_seconds_; }
  std::int64_t tokens() const { return tokens_; }
  std::int64_t passes() const { return passes_; }
  // Expert batches are kept only when asked (one entry per batch: a 512-token
  // prompt of a 16-layer model in 6-token rounds keeps ~1400).
  void keep_batches(bool keep) { keep_batches_ = keep; }
  bool keeps_batches() const { return keep_batches_; }
  void add_batch(ExpertBatchTiming batch) { batches_.push_back(std::move(batch)); }
  const std::vector<ExpertBatchTiming>& batches() const { return batches_; }
  // Forgets every time and batch; keeping batches stays as it was.
  void clear() {
    const bool keep = keep_batches_;
    *this = OpTimes{};
    keep_batches_ = keep;
  }

 private:
  std::array<double, kOpCount> seconds_{};
  double pass_seconds_ = 0;
  std::int64_t tokens_ = 0, passes_ = 0;
  bool keep_batches_ = false;
  std::vector<ExpertBatchTiming> batches_;
};

// The current phase of a function: to(op) closes the running phase and
// starts `op`; the destructor closes the last one. A null OpTimes = off.
class OpPhase {
 public:
  using Clock = std::chrono::steady_clock;
  OpPhase(OpTimes* times, Op first) : times_(times), op_(first) {
    if (times_) start_ = Clock::now();
  }
  OpPhase(const OpPhase&) = delete;
  OpPhase& operator=(const OpPhase&) = delete;
  ~OpPhase() { to(op_); }
  // Closes the running phase and records nothing more (before a callee that times its own phases).
  void stop() {
    to(op_);
    times_ = nullptr;
  }
  void to(Op next) {
    if (!times_) return;
    const Clock::time_point now = Clock::now();
    times_->add(op_, std::chrono::duration<double>(now - start_).count());
    op_ = next, start_ = now;
  }

 private:
  OpTimes* times_;
  Op op_;
  Clock::time_point start_{};
};

// One whole forward pass: its wall time and tokens, added when it ends.
class OpPass {
 public:
  OpPass(OpTimes* times, int tokens) : times_(times), tokens_(tokens) {
    if (times_) start_ = OpPhase::Clock::now();
  }
  OpPass(const OpPass&) = delete;
  OpPass& operator=(const OpPass&) = delete;
  ~OpPass() {
    if (times_) times_->add_pass(std::chrono::duration<double>(OpPhase::Clock::now() - start_).count(), tokens_);
  }

 private:
  OpTimes* times_;
  int tokens_;
  OpPhase::Clock::time_point start_{};
};

// A table of `times` (ms per token and share of the passes), headed by `title`.
std::string op_times_table(const OpTimes& times, std::string_view title);

// The kept batches as text, one line a batch under a versioned header:
// "moe_layer seconds expert:rows ..." (tools/bench/expert_batch_rates.py
// reads it). `record_bytes`: one expert's record, for the reader's GB/s.
inline constexpr int kExpertBatchLogSchema = 1;
std::string expert_batch_log(const OpTimes& times, std::uint64_t record_bytes);

}  // namespace coli::runtime
