// The engine's expert-read rounds (a decode layer's misses, a prefill
// round's) by how many records each read, and their seconds from submission
// to the last read landing: the disk as the engine meets it, on the model's
// own file in its own pattern. The engine counts them (ExpertStore), a usage
// history keeps the latest run's, and the planner prices a batch of m reads
// by them where they were measured (measured_rates.h, DiskReads). A
// generated token's rounds are also counted apart (decode_rounds): they
// follow a token's compute with the pool idle, a prompt's follow the round
// before, and the two take different times (the 2-core VM's one-read
// rounds: 0.16-0.39 ms in decode, 0.12 back to back), so each phase is
// priced by its own where a run gave enough of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace coli::experts {

struct ReadRounds {
  static constexpr std::size_t kLargest = 64;  // rounds of more reads are filed here
  // Generated tokens needed on each side (calm, waiting) before their
  // difference prices resuming after a wait: a token's time moves by more
  // than the cost between them.
  static constexpr std::uint64_t kResumeTokens = 5;
  std::uint64_t record_bytes = 0;  // what one read transfers (the record stride under O_DIRECT)
  int io_threads = 0;              // the pool that read them
  int compute_threads = 0;         // the compute team they ran beside; 0 = not recorded (a version-5 history)
  std::vector<std::uint64_t> rounds = std::vector<std::uint64_t>(kLargest + 1, 0);  // index: reads in the round
  std::vector<double> seconds = std::vector<double>(kLargest + 1, 0.0);             // summed over those rounds
  // The same for the rounds of single-token passes alone (generated
  // tokens), counted above too; zero in histories before version 9.
  std::vector<std::uint64_t> decode_rounds = std::vector<std::uint64_t>(kLargest + 1, 0);
  std::vector<double> decode_seconds = std::vector<double>(kLargest + 1, 0.0);
  // Rounds whose compute thread was still waiting when their last read
  // landed, and the seconds summed from that landing to the thread running
  // again: its wake-up, which a round's own time leaves out (the 2-core VM:
  // 12 us beside 1 compute thread, 6 beside 2). Version 7 histories.
  std::uint64_t waited = 0;
  double wake_seconds = 0;

  // Generated tokens after the first of a generation, by whether any of
  // their rounds waited, each timed as its pass less the time it blocked
  // on reads: tokens that never waited (calm), and those that did with
  // their waited rounds. What a waiting token's compute takes beyond a
  // calm one's, per waited round, is the cost of resuming after the wait,
  // which neither the round nor the wake-up holds (the 2-core VM: a
  // one-miss token's lm_head ran 10-25% slower after its thread slept on
  // the read). Version 10 histories.
  std::uint64_t calm_tokens = 0, waiting_tokens = 0, waiting_rounds = 0;
  double calm_seconds = 0, waiting_seconds = 0;
  // `decode`: a single-token pass's round.
  void add(std::size_t reads, double elapsed, bool decode = false) {
    const std::size_t m = std::min(reads, kLargest);
    ++rounds[m];
    seconds[m] += elapsed;
    if (decode) ++decode_rounds[m], decode_seconds[m] += elapsed;
  }
  // Rounds of the same reads, pool and team: one replaces the other in a history.
  bool same_setting(const ReadRounds& other) const {
    return record_bytes == other.record_bytes && io_threads == other.io_threads && compute_threads == other.compute_threads;
  }
  void add_wake(double elapsed) {
    ++waited;
    wake_seconds += elapsed;
  }
  // A generated token's pass: `compute_seconds` its time less its blocked waits, `waited` its rounds that blocked.
  void add_token(double compute_seconds, std::uint64_t waited_rounds) {
    if (waited_rounds == 0) {
      ++calm_tokens, calm_seconds += compute_seconds;
    } else {
      ++waiting_tokens, waiting_rounds += waited_rounds, waiting_seconds += compute_seconds;
    }
  }
  bool prices_resume() const { return calm_tokens >= kResumeTokens && waiting_tokens >= kResumeTokens; }
  bool empty() const {
    return std::all_of(rounds.begin(), rounds.end(), [](std::uint64_t n) { return n == 0; });
  }
  ReadRounds& operator+=(const ReadRounds& other) {
    for (std::size_t m = 0; m <= kLargest; ++m) {
      rounds[m] += other.rounds[m], seconds[m] += other.seconds[m];
      decode_rounds[m] += other.decode_rounds[m], decode_seconds[m] += other.decode_seconds[m];
    }
    waited += other.waited, wake_seconds += other.wake_seconds;
    calm_tokens += other.calm_tokens, calm_seconds += other.calm_seconds;
    waiting_tokens += other.waiting_tokens, waiting_rounds += other.waiting_rounds;
    waiting_seconds += other.waiting_seconds;
    return *this;
  }
  // `after`'s rounds less `before`'s (a timed step's), with after's record size, pool and team.
  static ReadRounds between(const ReadRounds& before, const ReadRounds& after) {
    ReadRounds out = after;
    for (std::size_t m = 0; m <= kLargest; ++m) {
      out.rounds[m] -= before.rounds[m];
      out.seconds[m] -= before.seconds[m];
      out.decode_rounds[m] -= before.decode_rounds[m];
      out.decode_seconds[m] -= before.decode_seconds[m];
    }
    out.waited -= before.waited, out.wake_seconds -= before.wake_seconds;
    out.calm_tokens -= before.calm_tokens, out.calm_seconds -= before.calm_seconds;
    out.waiting_tokens -= before.waiting_tokens, out.waiting_rounds -= before.waiting_rounds;
    out.waiting_seconds -= before.waiting_seconds;
    return out;
  }
  // The rounds of one phase alone, with this setting and wake-ups: the
  // decode rounds (`decode`, with the generated tokens), or the rest (a
  // prompt's, without them).
  ReadRounds phase(bool decode) const {
    ReadRounds out = *this;
    for (std::size_t m = 0; m <= kLargest; ++m) {
      out.rounds[m] = decode ? decode_rounds[m] : rounds[m] - decode_rounds[m];
      out.seconds[m] = decode ? decode_seconds[m] : std::max(0.0, seconds[m] - decode_seconds[m]);
      out.decode_rounds[m] = decode ? decode_rounds[m] : 0;
      out.decode_seconds[m] = decode ? decode_seconds[m] : 0.0;
    }
    if (!decode) out.calm_tokens = out.waiting_tokens = out.waiting_rounds = 0, out.calm_seconds = out.waiting_seconds = 0;
    return out;
  }
};

}  // namespace coli::experts
